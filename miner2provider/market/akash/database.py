"""The GPU database (gpus.yml): PCI vendor:device id -> slug, name, memory, interface, ...

A card that is not in it still gets a usable slug derived from its nvidia-smi name,
flagged as unknown, with an entry ready to paste into Akash's gpus.json.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from miner2provider.detect.facts.gpu import Gpu

DATABASE = Path(__file__).parent / "gpus.yml"
SLUG = re.compile(r"^[a-z0-9]+$")  # Akash model names: lower-case letters and digits
MEMORY = re.compile(r"^[0-9]+Gi$")
VENDOR_NAMES = {"10de": "nvidia"}


@dataclass(frozen=True)
class Card:
    pci_id: str  # "10de:2204"
    slug: str
    name: str
    memory: str  # "24Gi"
    interface: str  # pcie | sxm
    architecture: str
    compute_capability: str
    in_akash: bool  # Akash's own gpus.json lists this id
    known: bool = True  # False: derived from nvidia-smi, not in m2p's database

    @property
    def vendor(self) -> str:
        return VENDOR_NAMES.get(self.pci_id.split(":")[0], self.pci_id.split(":")[0])

    def akash_entry(self) -> str:
        """The entry to add under "10de" -> "devices" in Akash's devices/pcie/gpus.json."""
        device = self.pci_id.split(":")[1]
        body = {"name": self.slug, "interface": "PCIe" if self.interface == "pcie" else "SXM",
                "memory_size": self.memory}
        return f'"{device}": {json.dumps(body)}'


@functools.cache
def load(path: Path = DATABASE) -> dict[str, Card]:
    data = yaml.safe_load(path.read_text())
    cards = {}
    for vendor, spec in data["vendors"].items():
        for device, e in spec["devices"].items():
            pci_id = f"{vendor}:{device}"
            cards[pci_id] = Card(pci_id, e["slug"], e["name"], e["memory"], e["interface"], e["architecture"],
                                 str(e["compute_capability"]), bool(e["akash"]))
    return cards


def slug_from_name(name: str) -> str:
    """Akash-style model name from nvidia-smi's name: "NVIDIA GeForce RTX 3080 Ti" -> "rtx3080ti"."""
    words = [w for w in re.split(r"[\s_-]+", name.lower()) if w not in {"nvidia", "geforce", "tesla", "quadro"}]
    words = ["s" if w == "super" else w for w in words]
    return re.sub(r"[^a-z0-9]", "", "".join(words)) or "unknown"


def memory_from_mib(mib: int) -> str:
    return f"{max(1, round(mib / 1024))}Gi"


def card_for(gpu: Gpu) -> Card:
    """The database entry for this GPU, or a derived one flagged ``known=False``."""
    found = load().get(gpu.pci_id)
    if found:
        return found
    return Card(gpu.pci_id, slug_from_name(gpu.name), gpu.name, memory_from_mib(gpu.memory_mib), "pcie",
                "unknown", "", in_akash=False, known=False)
