"""m2p's own node labels for one rig's GPUs, whatever the marketplace.  Pure.

- ``m2p.io/gpu.model.<model>`` with the GPU count as value: the internal truth the time-share agent's
  profit quote reads (timeshare/profit.py); the marketplace's labels may change with it.
- ``nvidia.com/gpu.present=true`` (the device plugin's default affinity wants it).
- GPU-feature-discovery-style ``nvidia.com/gpu.*`` and ``nvidia.com/cuda.*`` labels.
- ``m2p.io/gpu-models``, ``m2p.io/gpu-db`` and the inventory's extra labels.

Model names and the card database are the first marketplace's (market/cards.py, market/gpus.yml).
"""

from __future__ import annotations

import re
from collections import Counter

from miner2provider.detect.facts.gpu import Gpus
from miner2provider.market.cards import card_for

M2P = "m2p.io"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(text: str) -> str:
    """A valid label value: [A-Za-z0-9._-], alphanumeric at both ends, at most 63 characters."""
    return _LABEL_VALUE.sub("-", text).strip("-._")[:63].rstrip("-._")


def own_labels(gpus: Gpus, cuda: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    if gpus.state != "ok" or not gpus.gpus:
        return {}
    cards = [card_for(g) for g in gpus.gpus]
    per_model: Counter[str] = Counter(c.slug for c in cards)
    labels: dict[str, str] = {}
    labels["nvidia.com/gpu.present"] = "true"
    first = gpus.gpus[0]
    labels["nvidia.com/gpu.count"] = str(len(gpus.gpus))
    labels["nvidia.com/gpu.product"] = label_value(first.name)
    labels["nvidia.com/gpu.memory"] = str(first.memory_mib)
    known = cards[0]
    if known.known:
        labels["nvidia.com/gpu.family"] = known.architecture
        major, _, minor = known.compute_capability.partition(".")
        labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"] = major, minor
    labels.update(_version_labels("nvidia.com/cuda.driver-version", first.driver_version, with_revision=True))
    labels.update(_version_labels("nvidia.com/cuda.runtime-version", cuda, with_revision=False))
    for slug, n in sorted(per_model.items()):
        labels[f"{M2P}/gpu.model.{slug}"] = str(n)
    labels[f"{M2P}/gpu-models"] = str(len(per_model))
    labels[f"{M2P}/gpu-db"] = "known" if all(c.known for c in cards) else "unknown-card"
    for key, value in (extra or {}).items():
        labels[f"{M2P}/{key}"] = label_value(value)
    return labels


def _version_labels(prefix: str, version: str, with_revision: bool) -> dict[str, str]:
    parts = version.split(".") if version else []
    if not parts or not all(p.isdigit() for p in parts):
        return {}
    out = {f"{prefix}.major": parts[0], f"{prefix}.full": version}
    if len(parts) > 1:
        out[f"{prefix}.minor"] = parts[1]
    if with_revision and len(parts) > 2:
        out[f"{prefix}.revision"] = parts[2]
    return out
