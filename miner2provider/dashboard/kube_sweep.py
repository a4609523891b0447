"""Collecting from a farm's Kubernetes API: one list of the nodes the agents label (``m2p.io/mode``,
with their ``m2p.io/status`` annotation) covers a pooled farm of any size, between SSH sweeps."""

from __future__ import annotations

import time

from miner2provider.dashboard.history import History
from miner2provider.rigside.kube import ApiError, KubeClient
from miner2provider.rigside.status import MODE_LABEL, node_states


def collect(history: History, client: KubeClient, now: float | None = None) -> int:
    """Store what the API says of every labelled node; returns how many.  ApiError when it cannot be read."""
    states = node_states(client.nodes(MODE_LABEL))
    history.set_nodes(states, time.time() if now is None else now)
    return len(states)


__all__ = ["ApiError", "collect", "node_states"]
