"""The farm's reclaimer, read on the k3s server: the leases on rigs that must mine, their state and deadlines.

The reclaimer (the marketplace's, under market/; installed by role market_provider on the server only) writes its
last sweep to ``RECLAIMER_STATUS`` (0644).  Every rig is probed for it; only the server has one.  What it says
comes from the cluster and the chain (lease ids, node names, errors): renderers escape it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from miner2provider.detect.facts.base import Fact, Output

RECLAIMER_STATUS = "/var/lib/m2p/reclaimer/status.json"  # role market_provider's market_provider_reclaimer_state_dir


@dataclass(frozen=True)
class ReclaimedLease:
    """One lease on a rig that must mine, as the reclaimer's last sweep saw it."""

    lease: str  # owner/dseq/gseq/oseq/provider
    nodes: tuple[str, ...]
    state: str  # active | reclaiming | "" (the chain was not asked)
    deadline: str  # ISO 8601 when reclaiming: the tenant's lease ends then, and mining may start
    mine_at: str  # when the lease's rigs must mine
    window_s: float | None  # the lease's reclamation window; None: won without one (it cannot be reclaimed)
    action: str  # start-reclaim | close | wait | leave | hold | "" (no mining due)
    why: str
    error: str


@dataclass(frozen=True)
class ReclaimerStatus:
    present: bool  # False: no reclaimer has run on this host (every rig but a server with one)
    at: str = ""  # its last sweep
    last_error: str = ""
    leases: tuple[ReclaimedLease, ...] = ()

    def on_node(self, node: str) -> tuple[ReclaimedLease, ...]:
        return tuple(lease for lease in self.leases if node in lease.nodes)


class ReclaimerFact(Fact[ReclaimerStatus]):
    """The reclaimer's ``status.json`` (``{"at", "last_error", "leases": [{"lease", "nodes", "state", "deadline",
    "mine_at", "window_s", "action", "why", "error"}]}``), or nothing where none runs."""

    name = "reclaimer"
    command = f"[ -e {RECLAIMER_STATUS} ] && cat {RECLAIMER_STATUS} 2>/dev/null; true"  # no process where absent

    @staticmethod
    def parse(out: Output) -> ReclaimerStatus:
        if not out.text.strip():
            return ReclaimerStatus(False)
        try:
            raw = json.loads(out.text)
        except (ValueError, RecursionError):
            return ReclaimerStatus(True, last_error=f"{RECLAIMER_STATUS}: not JSON")
        if not isinstance(raw, dict) or not isinstance(raw.get("leases"), list):
            return ReclaimerStatus(True, last_error=f"{RECLAIMER_STATUS}: not the reclaimer's status")
        leases = tuple(_lease(item) for item in raw["leases"] if isinstance(item, dict))
        return ReclaimerStatus(True, _text(raw.get("at")), _text(raw.get("last_error")), leases)


def _lease(item: dict[str, Any]) -> ReclaimedLease:
    nodes = item.get("nodes")
    window = item.get("window_s")
    return ReclaimedLease(
        _text(item.get("lease")), tuple(_text(n) for n in nodes) if isinstance(nodes, list) else (),
        _text(item.get("state")), _text(item.get("deadline")), _text(item.get("mine_at")),
        float(window) if isinstance(window, (int, float)) and not isinstance(window, bool) else None,
        _text(item.get("action")), _text(item.get("why")), _text(item.get("error")))


def _text(value: Any) -> str:
    """A field as one line of text, cut to what a status line shows (a file gone wrong must not flood a page
    or start a line of its own)."""
    return "" if value is None else " ".join(str(value).split())[:300]
