"""The Akash provider's own status: ``GET https://<ingress>:8443/status`` (provider gateway/rest/router.go,
createStatusHandler: the provider client's ProviderStatus plus ``address``).  Fields read, all optional
(older providers give ``cluster.leases`` as a number):

    {"cluster": {"leases": {"active": 2}, "inventory": {...}}, "bidengine": {"orders": 1},
     "manifest": {"deployments": 2}, "cluster_public_hostname": "provider.farm.example.com",
     "address": "akash1..."}

The provider's certificate is its own (published on the chain, not signed by a CA), so m2p cannot verify it
and reads only this public status through it: nothing is sent but the request.
"""

from __future__ import annotations

import http.client
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

from miner2provider.core.deadline import Connection, Watchdog
from miner2provider.market.base import ProviderState

TIMEOUT_S = 5.0
MAX_BYTES = 1024 * 1024
PORT = 8443


def status_url(ingress_address: str) -> str:
    host = f"[{ingress_address}]" if ":" in ingress_address else ingress_address
    return f"https://{host}:{PORT}/status"


def fetch(url: str, timeout_s: float = TIMEOUT_S) -> ProviderState:
    """The status at ``url``, or why not, within ``timeout_s`` for the whole read; never raises.

    Whole-read deadline: a socket timeout counts from the last byte, so a server sending a byte every
    half second held urllib's read for as long as it liked; here a watchdog shuts the socket down at the
    deadline, whatever the read is doing.  No redirect is followed: the status is at this URL or nowhere,
    and following one would let whoever answers on the status port send m2p to any URL this machine
    reaches, its loopback included."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return ProviderState(url, "not a URL with a port number", {})
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ProviderState(url, "not an http:// or https:// URL", {})
    watchdog = Watchdog(timeout_s)
    try:
        with watchdog:
            status, body = _get(parts.hostname, port, parts.scheme == "https", parts.path or "/", watchdog)
    except http.client.HTTPException as exc:  # its text is the server's bytes: not shown
        error = f"not an HTTP answer ({type(exc).__name__})"
    except OSError as exc:
        error = f"no answer ({exc.strerror or exc or exc.__class__.__name__})"
    except ValueError as exc:  # a URL http.client refuses (control characters, a bad port)
        error = f"no answer ({exc.__class__.__name__})"
    else:
        error = ""
    if watchdog.fired:  # whatever the cut read made of it (an error, or an answer cut short)
        return ProviderState(url, f"no whole answer within {timeout_s:g} s", {})
    if error:
        return ProviderState(url, error, {})
    if 300 <= status < 400:
        return ProviderState(url, f"HTTP {status} (a redirect: not followed)", {})
    if status != 200:
        return ProviderState(url, f"HTTP {status}", {})
    if len(body) > MAX_BYTES:
        return ProviderState(url, "the answer is larger than a status is", {})
    try:
        return ProviderState(url, "", parse(json.loads(body)))
    except (ValueError, TypeError, AttributeError):
        return ProviderState(url, "not an Akash provider's status", {})


def _get(host: str, port: int, tls: bool, path: str, watchdog: Watchdog) -> tuple[int, bytes]:
    connection = Connection(host, port, watchdog, _unverified() if tls else None)
    try:
        connection.request("GET", path, headers={"Accept": "application/json", "Connection": "close"})
        reply = connection.getresponse()
        return reply.status, reply.read(MAX_BYTES + 1)
    finally:
        watchdog.release()  # before the close: the watchdog never shuts down a descriptor reused since
        connection.close()


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the provider's own certificate (see above)
    return context


def parse(doc: Any) -> dict[str, Any]:
    """The numbers and names m2p shows, from a provider status document."""
    if not isinstance(doc, dict) or not {"cluster", "bidengine", "manifest"} & set(doc):
        raise ValueError("not a provider status")
    cluster = doc.get("cluster") or {}
    leases = cluster.get("leases", 0)
    active = leases.get("active", 0) if isinstance(leases, dict) else leases
    out = {"address": str(doc.get("address", "")), "hostname": str(doc.get("cluster_public_hostname", "")),
           "active_leases": _count(active), "open_orders": _count((doc.get("bidengine") or {}).get("orders", 0)),
           "deployments": _count((doc.get("manifest") or {}).get("deployments", 0))}
    return out


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError("not a count")
    number = int(value)
    if not 0 <= number < 1 << 31:
        raise ValueError("out of range")
    return number
