"""The farm's own card list for Akash's inventory operator, in its ``gpus.json`` shape
(akash-network/provider-configs ``devices/pcie/gpus.json``, read at 2d04f4f; the operator's Go type
``RegistryGPUVendors``, operator/inventory/registry.go):

    {"10de": {"name": "nvidia", "devices": {"2204": {"name": "rtx3090", "interface": "PCIe",
                                                      "memory_size": "24Gi"}}}}

The operator matches a card by vendor and device ID only and skips one it does not find, so a rig with
an RTX 3080 (2206) or a CMP card gets no labels and no bids under Akash's list.  Served at
``<url>/devices/gpus`` and given to the operator as ``--provider-configs-url <url>``, this list takes
its place: m2p's whole NVIDIA database (Akash's 96 NVIDIA entries with the same names and sizes, plus
the mining cards Akash lacks), and every card the fleet reported that the database does not know
(named from nvidia-smi, or AMD cards from amdgpu's table).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from miner2provider.detect.facts.amd import AMD_VENDOR, AmdGpu
from miner2provider.market.base import RigGpus
from miner2provider.market.cards import Card, card_for, load

INTERFACES = {"pcie": "PCIe", "sxm": "SXM"}  # Akash writes these; m2p's database folds SXM2..SXM5 to sxm


def entry(card: Card) -> dict[str, str]:
    return {"name": card.slug, "interface": INTERFACES.get(card.interface, "PCIe"), "memory_size": card.memory}


def entry_line(card: Card) -> str:
    """The entry to add under "10de" -> "devices" in Akash's devices/pcie/gpus.json."""
    return f'"{card.pci_id.split(":")[1]}": {json.dumps(entry(card))}'


def amd_entry(card: AmdGpu) -> dict[str, str] | None:
    """None for a card whose VRAM sysfs does not report (no amdgpu driver): Akash's entry needs a size."""
    if not card.vram_bytes:
        return None
    return {"name": card.slug, "interface": "PCIe", "memory_size": f"{card.vram_gib}Gi"}


def gpus_json(rigs: Iterable[RigGpus]) -> tuple[dict[str, Any], list[str]]:
    """The card list, and the cards in it that Akash's own list lacks (``vendor:device name``)."""
    nvidia: dict[str, dict[str, str]] = {}
    for card in load().values():
        nvidia[card.pci_id.split(":")[1]] = entry(card)
    amd: dict[str, dict[str, str]] = {}
    for rig in rigs:
        for gpu in rig.gpus.gpus if rig.gpus.state == "ok" else ():
            found = card_for(gpu)
            nvidia.setdefault(gpu.device_id.lower(), entry(found))
        for amd_card in rig.amd:
            listed = amd_entry(amd_card)
            if listed is not None:
                amd.setdefault(amd_card.device_id.lower(), listed)
    cards = load()
    lacking = sorted(f"10de:{device} {body['name']}" for device, body in nvidia.items()
                     if not (f"10de:{device}" in cards and cards[f"10de:{device}"].listed))
    lacking += sorted(f"{AMD_VENDOR}:{device} {body['name']}" for device, body in amd.items())
    out: dict[str, Any] = {"10de": {"name": "nvidia", "devices": dict(sorted(nvidia.items()))}}
    if amd:
        out[AMD_VENDOR] = {"name": "amd", "devices": dict(sorted(amd.items()))}
    return out, lacking
