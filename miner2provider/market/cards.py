"""m2p's GPU card database (gpus.yml): PCI vendor:device id -> model name, card name, memory, interface, ...

Model names and memory sizes are written as the first marketplace writes them, and ``listed``
says whether its own card list has the id.  A card that is not in the database still gets a usable
model name derived from its nvidia-smi name, flagged as unknown.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from miner2provider.detect.facts.amd import AmdGpu
from miner2provider.detect.facts.gpu import Gpu, Gpus

DATABASE = Path(__file__).parent / "gpus.yml"
SLUG = re.compile(r"^[a-z0-9]+$")  # model names: lower-case letters and digits
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
    listed: bool  # the marketplace's own card list (its gpus.json) has this id
    known: bool = True  # False: derived from nvidia-smi, not in m2p's database

    @property
    def vendor(self) -> str:
        return VENDOR_NAMES.get(self.pci_id.split(":")[0], self.pci_id.split(":")[0])


@functools.cache
def load(path: Path = DATABASE) -> dict[str, Card]:
    data = yaml.safe_load(path.read_text())
    cards = {}
    for vendor, spec in data["vendors"].items():
        for device, e in spec["devices"].items():
            pci_id = f"{vendor}:{device}"
            cards[pci_id] = Card(pci_id, e["slug"], e["name"], e["memory"], e["interface"], e["architecture"],
                                 str(e["compute_capability"]), bool(e["listed"]))
    return cards


# The longest model name whose marketplace label keys stay legal: a key's name part is at most 63 characters
# (Kubernetes), and "capabilities.gpu.vendor.nvidia.model.<slug>.interface.pcie" spends 52 of them.  The
# longest slug in gpus.yml is 11 characters too.
MAX_SLUG = 11


def slug_from_name(name: str) -> str:
    """A model name from nvidia-smi's name: "NVIDIA GeForce RTX 3080 Ti" -> "rtx3080ti".  A longer name than
    MAX_SLUG (a card the database does not know, or a rig reporting anything) is cut and given a hash of the
    whole name, so two long names stay apart and every label key made from it stays legal."""
    words = [w for w in re.split(r"[\s_-]+", name.lower()) if w not in {"nvidia", "geforce", "tesla", "quadro"}]
    words = ["s" if w == "super" else w for w in words]
    slug = re.sub(r"[^a-z0-9]", "", "".join(words)) or "unknown"
    if len(slug) > MAX_SLUG:
        slug = slug[: MAX_SLUG - 5] + hashlib.sha256(name.encode()).hexdigest()[:5]
    return slug


def memory_from_mib(mib: int) -> str:
    return f"{max(1, round(mib / 1024))}Gi"


def card_for(gpu: Gpu) -> Card:
    """The database entry for this GPU, or a derived one flagged ``known=False``."""
    found = load().get(gpu.pci_id)
    if found:
        return found
    return Card(gpu.pci_id, slug_from_name(gpu.name), gpu.name, memory_from_mib(gpu.memory_mib), "pcie",
                "unknown", "", listed=False, known=False)


def cards_of(gpus: Gpus) -> list[Card]:
    return [card_for(g) for g in gpus.gpus] if gpus.state == "ok" else []


def amd_combos(amd: tuple[AmdGpu, ...]) -> list[tuple[str, str, str]]:
    """(slug, memory as the card database writes it, interface) per AMD card.  A card whose VRAM sysfs does not
    report (no amdgpu driver) has no memory key."""
    return [(c.slug, f"{c.vram_gib}Gi" if c.vram_bytes else "", "pcie") for c in amd]
