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

One entry names a device ID on every node, but a card the database does not know is named (and sized) by the
rig that reports it.  So a rig names only its own cards: an entry from the rigs goes in only where every rig
that reports the device says the same, and a device the rigs name differently is left out (``disputes`` says
which), so one rig cannot name another rig's card.
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
    rigs = list(rigs)
    nvidia: dict[str, dict[str, str]] = {}
    for card in load().values():
        nvidia[card.pci_id.split(":")[1]] = entry(card)
    reported = _reported(rigs)
    for device, said in reported["10de"].items():
        if len(said) == 1:
            nvidia.setdefault(device, json.loads(next(iter(said))))
    amd = {device: json.loads(next(iter(said))) for device, said in reported[AMD_VENDOR].items() if len(said) == 1}
    cards = load()
    lacking = sorted(f"10de:{device} {body['name']}" for device, body in nvidia.items()
                     if not (f"10de:{device}" in cards and cards[f"10de:{device}"].listed))
    lacking += sorted(f"{AMD_VENDOR}:{device} {body['name']}" for device, body in amd.items())
    out: dict[str, Any] = {"10de": {"name": "nvidia", "devices": dict(sorted(nvidia.items()))}}
    if amd:
        out[AMD_VENDOR] = {"name": "amd", "devices": dict(sorted(amd.items()))}
    return out, lacking


def disputes(rigs: Iterable[RigGpus]) -> list[str]:
    """One sentence per device the rigs name differently, which the card list leaves out."""
    said = []
    for vendor, devices in _reported(list(rigs)).items():
        for device, by_entry in sorted(devices.items()):
            if len(by_entry) > 1:
                names = "; ".join(f"{', '.join(rigs_)}: {_shown(text)}" for text, rigs_ in sorted(by_entry.items()))
                said.append(f"rigs name card {vendor}:{device} differently ({names}): the card list leaves it out, "
                            "since one rig may not name another's card; add it to m2p's database (market/gpus.yml) "
                            "or check those rigs")
    return said


def _shown(text: str) -> str:
    body = json.loads(text)
    return f"{body['name']} {body['memory_size']}"


def _reported(rigs: list[RigGpus]) -> dict[str, dict[str, dict[str, list[str]]]]:
    """vendor -> device -> entry (as JSON) -> the rigs that report it so, for the cards the rigs name: NVIDIA
    cards m2p's database does not know, and AMD cards (their sizes come from the rig)."""
    out: dict[str, dict[str, dict[str, list[str]]]] = {"10de": {}, AMD_VENDOR: {}}
    for rig in rigs:
        for gpu in rig.gpus.gpus if rig.gpus.state == "ok" else ():
            found = card_for(gpu)
            if found.known or gpu.vendor_id.lower() != "10de":
                continue  # the database names it; another vendor's card is not an NVIDIA entry
            text = json.dumps(entry(found))
            _add(out["10de"].setdefault(gpu.device_id.lower(), {}), text, rig.name)
        for amd_card in rig.amd:
            listed = amd_entry(amd_card)
            if listed is not None:
                _add(out[AMD_VENDOR].setdefault(amd_card.device_id.lower(), {}), json.dumps(listed), rig.name)
    return out


def _add(by_entry: dict[str, list[str]], text: str, rig: str) -> None:
    rigs = by_entry.setdefault(text, [])
    if rig not in rigs:
        rigs.append(rig)
