"""Akash's rules for what it sells, which the seam (market/base.py) exposes to the rest of m2p.  Pure.

- One GPU model per node (Akash's provider hardware requirements: "Each node must have only one type of GPU"):
  a lease asking for one model may be given another.
- A card missing from Akash's gpus.json (its card database) is skipped by its inventory operator.
- Time slices sold as whole GPUs: time-slicing makes the device plugin advertise each GPU N times, and Akash's
  inventory sells each advertised GPU as a whole one to tenants who lease whole GPUs (their pods crash when
  slices outnumber the cards: NVIDIA/k8s-device-plugin#461).
"""

from __future__ import annotations

ONE_MODEL_PER_NODE = "Akash supports one model per node"
SLICES_SOLD_WHOLE = "Akash would sell each slice as a whole GPU"
# Where a missing card's entry goes in Akash's card list (provider-configs).
GPUS_JSON_WHERE = 'Akash: devices/pcie/gpus.json, under "10de" -> "devices"'


def unlisted_card(pci_id: str) -> str:
    """What becomes of a card Akash's gpus.json lacks (the preflight role's sentence)."""
    return (f"GPU {pci_id} is not in Akash's database: the marketplace will not see it (m2p attributes prints the "
            "entry to add)")
