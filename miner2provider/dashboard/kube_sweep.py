"""Collecting from a farm's Kubernetes API: one list of the nodes the agents label (``m2p.io/mode``,
with their ``m2p.io/status`` annotation) covers a pooled farm of any size, between SSH sweeps."""

from __future__ import annotations

import json
import time
from typing import Any

from miner2provider.agent.kube import ApiError, KubeClient
from miner2provider.dashboard.history import History

MODE_LABEL, STATUS_ANNOTATION = "m2p.io/mode", "m2p.io/status"


def node_states(items: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """node name -> (mode, the agent's status); an unreadable annotation is an empty status."""
    out = {}
    for node in items:
        meta = node.get("metadata") or {}
        mode = (meta.get("labels") or {}).get(MODE_LABEL)
        if not isinstance(mode, str) or not meta.get("name"):
            continue
        try:
            status = json.loads((meta.get("annotations") or {}).get(STATUS_ANNOTATION) or "{}")
        except ValueError:
            status = {}
        # A label value is at most 63 characters in Kubernetes; whoever can label the node may still try more.
        out[str(meta["name"])[:253]] = (mode[:63], status if isinstance(status, dict) else {})
    return out


def collect(history: History, client: KubeClient, now: float | None = None) -> int:
    """Store what the API says of every labelled node; returns how many.  ApiError when it cannot be read."""
    states = node_states(client.nodes(MODE_LABEL))
    history.set_nodes(states, time.time() if now is None else now)
    return len(states)


__all__ = ["ApiError", "collect", "node_states"]
