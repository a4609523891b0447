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

import json
import ssl
from typing import Any

from miner2provider.core.deadline import NoAnswer, exchange
from miner2provider.market.base import ProviderState

TIMEOUT_S = 5.0
MAX_BYTES = 1024 * 1024
PORT = 8443


def status_url(ingress_address: str) -> str:
    host = f"[{ingress_address}]" if ":" in ingress_address else ingress_address
    return f"https://{host}:{PORT}/status"


def fetch(url: str, timeout_s: float = TIMEOUT_S) -> ProviderState:
    """The status at ``url``, or why not, within ``timeout_s`` for the whole read; never raises.

    core/deadline.py's reader: a watchdog ends the read at the deadline however the answer trickles (a socket
    timeout counts from the last byte only), and no redirect is followed (the status is at this URL or nowhere;
    following one would let whoever answers on the status port send m2p to any URL this machine reaches, its
    loopback included)."""
    try:
        _, body = exchange(url, timeout_s, MAX_BYTES, tls=_unverified())
    except NoAnswer as exc:
        return ProviderState(url, str(exc), {})
    try:
        return ProviderState(url, "", parse(json.loads(body)))
    except (ValueError, TypeError, AttributeError):
        return ProviderState(url, "not an Akash provider's status", {})


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
