"""Akash provider attributes for a fleet, and the warnings an operator must see.  Pure.

Key order as Akash's docs and its provider's own key builder (akash-network/provider) use it:
``capabilities/gpu/vendor/<vendor>/model/<model>[/ram/<size>][/interface/<iface>]``,
plus ``capabilities/gpu``, the ``cuda`` the whole fleet can honestly serve (the lowest
CUDA version any rig's driver supports) and ``location-region`` (never the legacy ``region``).
"""

from __future__ import annotations

from miner2provider.market.akash.gpus_json import disputes, entry_line
from miner2provider.market.akash.labels import amd_labels, node_labels
from miner2provider.market.akash.rules import GPUS_JSON_WHERE, ONE_MODEL_PER_NODE
from miner2provider.market.base import FleetAttributes, RigAttributes, RigGpus
from miner2provider.market.cards import amd_combos, cards_of


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".") if p.isdigit())


def rig_attributes(rig: RigGpus) -> RigAttributes:
    warnings = []
    cards = cards_of(rig.gpus)
    if not cards and not rig.amd:
        warnings.append("no usable NVIDIA GPU: no labels")
    if rig.amd:
        warnings.append(f"{len(rig.amd)} AMD GPU(s): not converted yet; their Akash labels are listed for "
                        "when they are (no node carries them)")
    for amd_card in {c.pci_id + c.revision: c for c in rig.amd if not c.known}.values():
        warnings.append(f"unknown AMD card {amd_card.pci_id} revision {amd_card.revision}: labelled as "
                        f"{amd_card.slug!r}; add it to m2p's list (facts/amd.py, from libdrm's amdgpu.ids)")
    models = sorted({c.slug for c in cards})
    if len(models) > 1:
        warnings.append(f"mixed GPU models on one node ({', '.join(models)}): {ONE_MODEL_PER_NODE}; "
                        "split the cards or exclude the node")
    for card in {c.pci_id: c for c in cards}.values():
        if not card.known:
            warnings.append(f"unknown card {card.pci_id} ({card.name}): labelled as {card.slug!r}, derived from "
                            "its name; add it to m2p's database (market/gpus.yml)")
        elif not card.listed:
            warnings.append(f"{card.pci_id} ({card.name}) is not in Akash's gpus.json: the Akash inventory operator "
                            f"skips it until upstream adds {entry_line(card)}")
    labels = {**node_labels(rig.gpus, rig.cuda, rig.labels_extra), **amd_labels(rig.amd)}
    return RigAttributes(rig.name, labels, tuple(warnings))


def fleet_attributes(rigs: list[RigGpus], region: str | None = None) -> FleetAttributes:
    per_rig = tuple(rig_attributes(r) for r in rigs)
    # Every rig's cards as that rig names them: a card m2p's database does not know is named by its own rig, so
    # the first rig to report a device ID may not name the same device on the others.
    all_cards = {(c.pci_id, c.slug, c.memory, c.interface): c for r in rigs for c in cards_of(r.gpus)}
    warnings: list[str] = disputes(rigs)
    attrs: list[tuple[str, str]] = []
    amd = {("amd", slug, ram, iface) for r in rigs for slug, ram, iface in amd_combos(r.amd)}
    if all_cards or amd:
        attrs.append(("capabilities/gpu", "nvidia" if all_cards else "amd"))
    combos = sorted({(c.vendor, c.slug, c.memory, c.interface) for c in all_cards.values()} | amd)
    for vendor, slug in sorted({(v, s) for v, s, _, _ in combos}):
        base = f"capabilities/gpu/vendor/{vendor}/model/{slug}"
        mine = [(m, i) for v, s, m, i in combos if (v, s) == (vendor, slug)]
        attrs.append((base, "true"))
        attrs += [(f"{base}/ram/{m}", "true") for m in sorted({m for m, _ in mine if m})]
        attrs += [(f"{base}/interface/{i}", "true") for i in sorted({i for _, i in mine})]
        attrs += [(f"{base}/ram/{m}/interface/{i}", "true") for m, i in sorted(set(mine)) if m]
    cudas = [r.cuda for r in rigs if cards_of(r.gpus) and r.cuda]
    if cudas:
        lowest = min(cudas, key=_version_key)
        attrs.append(("cuda", lowest))
        if len(set(cudas)) > 1:
            listed = ", ".join(sorted(set(cudas), key=_version_key))
            warnings.append(f"drivers differ across the fleet (CUDA {listed}): "
                            f"advertising cuda {lowest}, what every rig can serve")
    regions = {r.region for r in rigs if r.region}
    chosen = region or (next(iter(regions)) if len(regions) == 1 else None)
    if region is None and len(regions) > 1:
        warnings.append("rigs name different m2p_location_region values: one provider has one region; "
                        "pass --region or split the fleet")
    if chosen:
        attrs.append(("location-region", chosen))
    unknown = tuple(sorted({entry_line(c) for c in all_cards.values() if not c.listed}))
    return FleetAttributes(per_rig, tuple(attrs), tuple(warnings), unknown, GPUS_JSON_WHERE)
