"""What `m2p provider check` looks up outside the rigs: DNS names, the RPC node's ``/status`` (CometBFT
RPC: ``result.node_info.network``, ``result.sync_info.latest_block_height`` and ``catching_up``) and TCP
connections to the ingress rig's ports.  Nothing else is contacted.  Each lookup has a deadline and comes back as
a value or a sentence, never an exception."""

from __future__ import annotations

import concurrent.futures
import json
import socket
from urllib.parse import urlsplit, urlunsplit

from miner2provider.core.deadline import NoAnswer, exchange
from miner2provider.market.akash.checkup import RpcStatus

TIMEOUT_S = 5.0
MAX_STATUS_BYTES = 256 * 1024


def resolve(name: str, timeout_s: float = TIMEOUT_S) -> tuple[str, ...] | str:
    """The IPv4 and IPv6 addresses of ``name``, or why there are none (getaddrinfo has no deadline of its own:
    it runs in a thread that is left behind when it overruns)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="m2p-dns")
    try:
        found = pool.submit(socket.getaddrinfo, name, None, 0, socket.SOCK_STREAM).result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        return f"no answer in {timeout_s:g} s"
    except socket.gaierror as exc:
        return exc.strerror or "not found"
    except (OSError, UnicodeError) as exc:
        return str(exc) or type(exc).__name__
    finally:
        pool.shutdown(wait=False)
    return tuple(sorted({str(info[4][0]) for info in found}))


def reach(address: str, ports: tuple[int, ...], timeout_s: float = 3.0) -> dict[int, str]:
    """Port -> "" when a TCP connection to ``address`` opens, else why not (from where m2p runs: the farm's side)."""
    out = {}
    for port in ports:
        try:
            with socket.create_connection((address, port), timeout=timeout_s):
                out[port] = ""
        except TimeoutError:
            out[port] = f"no answer in {timeout_s:g} s"
        except OSError as exc:
            out[port] = exc.strerror or type(exc).__name__
    return out


def rpc_status(node: str, timeout_s: float = TIMEOUT_S) -> RpcStatus | str:
    url = urlsplit(node)
    scheme = "http" if url.scheme == "tcp" else url.scheme  # tcp://host:26657 is the CLI's form of the same RPC
    target = urlunsplit((scheme, url.netloc, url.path.rstrip("/") + "/status", "", ""))
    try:  # core/deadline.py's reader: a deadline on the whole read, no redirect followed, every failure a reason
        _, body = exchange(target, timeout_s, MAX_STATUS_BYTES)
    except NoAnswer as exc:
        return f"{target}: {exc}"
    try:
        result = json.loads(body)["result"]
        sync = result["sync_info"]
        return RpcStatus(str(result["node_info"]["network"]), int(sync["latest_block_height"]),
                         bool(sync["catching_up"]))
    except (ValueError, KeyError, TypeError):
        return f"{target}: not a CometBFT RPC status"
