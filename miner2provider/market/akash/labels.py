"""Akash's node labels for one rig's GPUs.  Pure.

Akash's set, with GPU **counts** as values (akash-network/provider
operator/inventory/node-discovery.go generateLabels):
``akash.network/capabilities.gpu.vendor.nvidia.model.<model>[.ram.<size>|.interface.<iface>]``.
m2p's own labels (``m2p.io/``, ``nvidia.com/``) are market/labels.py's (the Akash operator owns and
rewrites ``akash.network*``).
"""

from __future__ import annotations

from collections import Counter

from miner2provider.detect.facts.amd import AmdGpu
from miner2provider.detect.facts.gpu import Gpus
from miner2provider.market.cards import amd_combos, card_for
from miner2provider.market.labels import M2P, own_labels

AKASH = "akash.network/capabilities.gpu.vendor"


def akash_labels(gpus: Gpus) -> dict[str, str]:
    """Akash's GPU capability labels, with GPU counts as values."""
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
    return labels


def node_labels(gpus: Gpus, cuda: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Akash's labels, then m2p's own (market/labels.py): what a node of an Akash farm carries."""
    return {**akash_labels(gpus), **own_labels(gpus, cuda, extra)}


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
