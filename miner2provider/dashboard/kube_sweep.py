"""Collecting from a farm's Kubernetes API: one list of the nodes the agents label (``m2p.io/mode``,
with their ``m2p.io/status`` annotation) covers a pooled farm of any size, between SSH sweeps.  The cards'
readings the status carries go to the rig's day charts too, so a rig the dashboard reaches only through the
API is charted as one it sweeps over SSH."""

from __future__ import annotations

import time
from collections.abc import Mapping

from miner2provider.dashboard.history import History
from miner2provider.rigside.kube import ApiError, KubeClient
from miner2provider.rigside.status import MODE_LABEL, node_states, telemetry_from


def collect(history: History, client: KubeClient, now: float | None = None,
            rigs: Mapping[str, str] | None = None) -> int:
    """Store what the API says of every labelled node; returns how many.  ``rigs``: node name -> rig name, the
    inventory's (never the node's own word: a rig's kubelet may annotate only its own node, and the inventory says
    whose node that is); each such node's card readings are stored as its rig's.  ApiError when it cannot be read."""
    at = time.time() if now is None else now
    states = node_states(client.nodes(MODE_LABEL))
    history.set_nodes(states, at)
    owned = [(rigs[node], telemetry_from(status.get("telemetry"))) for node, (_, status) in states.items()
             if rigs and node in rigs]  # the same reading an SSH sweep stored already adds nothing (keyed by read_at)
    history.add_cards_of(owned, at)
    return len(states)


__all__ = ["ApiError", "collect", "node_states"]
