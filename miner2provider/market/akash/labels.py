"""Kubernetes node labels for one rig's GPUs.  Pure.

- Akash's set, with GPU **counts** as values (akash-network/provider
  operator/inventory/node-discovery.go generateLabels):
  ``akash.network/capabilities.gpu.vendor.nvidia.model.<model>[.ram.<size>|.interface.<iface>]``
- ``nvidia.com/gpu.present=true`` (the device plugin's default affinity wants it).
- GPU-feature-discovery-style ``nvidia.com/gpu.*`` and ``nvidia.com/cuda.*`` labels.
- m2p's own under ``m2p.io/`` (the Akash operator owns and rewrites ``akash.network*``).
"""

from __future__ import annotations

import re
from collections import Counter

from miner2provider.detect.facts.amd import AmdGpu
from miner2provider.detect.facts.gpu import Gpus
from miner2provider.market.akash.database import Card, card_for

AKASH = "akash.network/capabilities.gpu.vendor"
M2P = "m2p.io"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(text: str) -> str:
    """A valid label value: [A-Za-z0-9._-], alphanumeric at both ends, at most 63 characters."""
    return _LABEL_VALUE.sub("-", text).strip("-._")[:63].rstrip("-._")


def node_labels(gpus: Gpus, cuda: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    if gpus.state != "ok" or not gpus.gpus:
        return {}
    cards = [card_for(g) for g in gpus.gpus]
    labels: dict[str, str] = {}
    per_model: Counter[tuple[str, str]] = Counter((c.vendor, c.slug) for c in cards)
    per_ram: Counter[tuple[str, str, str]] = Counter((c.vendor, c.slug, c.memory) for c in cards)
    per_iface: Counter[tuple[str, str, str]] = Counter((c.vendor, c.slug, c.interface) for c in cards)
    for (vendor, slug), n in sorted(per_model.items()):
        labels[f"{AKASH}.{vendor}.model.{slug}"] = str(n)
    for (vendor, slug, ram), n in sorted(per_ram.items()):
        labels[f"{AKASH}.{vendor}.model.{slug}.ram.{ram}"] = str(n)
    for (vendor, slug, iface), n in sorted(per_iface.items()):
        labels[f"{AKASH}.{vendor}.model.{slug}.interface.{iface}"] = str(n)
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


def cards_of(gpus: Gpus) -> list[Card]:
    return [card_for(g) for g in gpus.gpus] if gpus.state == "ok" else []


def amd_combos(amd: tuple[AmdGpu, ...]) -> list[tuple[str, str, str]]:
    """(slug, memory as Akash writes it, interface) per AMD card.  A card whose VRAM sysfs does not
    report (no amdgpu driver) has no memory key."""
    return [(c.slug, f"{c.vram_gib}Gi" if c.vram_bytes else "", "pcie") for c in amd]


def amd_labels(amd: tuple[AmdGpu, ...]) -> dict[str, str]:
    """Akash's labels for AMD cards (vendor ``amd``, the same shape as NVIDIA's), for `m2p attributes`:
    m2p converts no AMD rig yet, so no node carries them."""
    labels: dict[str, str] = {}
    combos = amd_combos(amd)
    for slug, n in sorted(Counter(slug for slug, _, _ in combos).items()):
        labels[f"{AKASH}.amd.model.{slug}"] = str(n)
    for (slug, ram), n in sorted(Counter((slug, ram) for slug, ram, _ in combos if ram).items()):
        labels[f"{AKASH}.amd.model.{slug}.ram.{ram}"] = str(n)
    for (slug, iface), n in sorted(Counter((slug, iface) for slug, _, iface in combos).items()):
        labels[f"{AKASH}.amd.model.{slug}.interface.{iface}"] = str(n)
    if amd:
        labels[f"{M2P}/amd-gpus"] = str(len(amd))
    return labels
