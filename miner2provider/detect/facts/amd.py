"""AMD cards, read from sysfs without ROCm (mining rigs rarely have it).

``/sys/class/drm/card<N>/device/`` holds the PCI IDs (``vendor``, ``device``, ``revision``,
``subsystem_vendor``, ``subsystem_device``) and, with the amdgpu driver, ``mem_info_vram_total``
in bytes.  The model comes from the device and revision IDs as libdrm's ``data/amdgpu.ids``
names them (mesa/drm: AMD's own list of marketing names, the one ``rocm-smi`` and Mesa show):
cards of one device ID differ by revision (67DF is every RX 470 to 590).  m2p converts no AMD
rig yet: these facts feed detect, attributes and the refusal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from miner2provider.detect.facts.base import Fact, Output

AMD_VENDOR = "1002"
# (device, revision) -> (model name, name as amdgpu.ids has it): the cards mining rigs run.  The model name is m2p's
# key for a card, as gpus.yml's for NVIDIA's (market/cards.py): the marketing model, lower-case letters and digits.
AMDGPU_IDS = {
    ("67df", "c1"): ("rx580", "AMD Radeon RX 580 Series"), ("67df", "c3"): ("rx580", "AMD Radeon RX 580 Series"),
    ("67df", "e7"): ("rx580", "AMD Radeon RX 580 Series"), ("67df", "c2"): ("rx570", "AMD Radeon RX 570 Series"),
    ("67df", "c6"): ("rx570", "AMD Radeon RX 570 Series"), ("67df", "ef"): ("rx570", "AMD Radeon RX 570 Series"),
    ("67df", "c4"): ("rx480", "AMD Radeon RX 480 Graphics"), ("67df", "c7"): ("rx480", "AMD Radeon RX 480 Graphics"),
    ("67df", "c5"): ("rx470", "AMD Radeon RX 470 Graphics"), ("67df", "cf"): ("rx470", "AMD Radeon RX 470 Graphics"),
    ("67df", "d7"): ("rx470", "AMD Radeon RX 470 Graphics"), ("67df", "e0"): ("rx470", "AMD Radeon RX 470 Series"),
    ("67df", "ff"): ("rx470", "AMD Radeon RX 470 Series"), ("67df", "e1"): ("rx590", "AMD Radeon RX 590 Series"),
    ("73bf", "c0"): ("rx6900xt", "AMD Radeon RX 6900 XT"), ("73bf", "c1"): ("rx6800xt", "AMD Radeon RX 6800 XT"),
    ("73bf", "c3"): ("rx6800", "AMD Radeon RX 6800"), ("73af", "c0"): ("rx6900xt", "AMD Radeon RX 6900 XT"),
    ("73a5", "c0"): ("rx6950xt", "AMD Radeon RX 6950 XT"), ("73df", "c1"): ("rx6700xt", "AMD Radeon RX 6700 XT"),
    ("73df", "c5"): ("rx6700xt", "AMD Radeon RX 6700 XT"), ("73df", "c0"): ("rx6750xt", "AMD Radeon RX 6750 XT"),
    ("73df", "df"): ("rx6700", "AMD Radeon RX 6700"), ("744c", "c8"): ("rx7900xtx", "AMD Radeon RX 7900 XTX"),
    ("744c", "cc"): ("rx7900xt", "AMD Radeon RX 7900 XT"), ("744c", "ce"): ("rx7900gre", "AMD Radeon RX 7900 GRE"),
    ("747e", "c8"): ("rx7800xt", "AMD Radeon RX 7800 XT"),
}


@dataclass(frozen=True)
class AmdGpu:
    pci_slot: str  # 0000:03:00.0
    device_id: str  # 744c
    revision: str  # c8
    subsystem_id: str  # 1da2:e471 (vendor:device of the board maker)
    vram_bytes: int  # 0 when the amdgpu driver is not loaded

    @property
    def pci_id(self) -> str:
        return f"{AMD_VENDOR}:{self.device_id}"

    @property
    def known(self) -> bool:
        return (self.device_id, self.revision) in AMDGPU_IDS

    @property
    def slug(self) -> str:
        """m2p's model name (``rx7900xtx``, market/cards.py's form); an unlisted card: ``amd-<device>-<revision>``."""
        return AMDGPU_IDS.get((self.device_id, self.revision), (f"amd-{self.device_id}-{self.revision}", ""))[0]

    @property
    def name(self) -> str:
        return AMDGPU_IDS.get((self.device_id, self.revision), ("", f"AMD GPU {self.pci_id} rev {self.revision}"))[1]

    @property
    def vram_gib(self) -> int:
        """Rounded to whole GiB, as a node's memory label is written (``24Gi``)."""
        return round(self.vram_bytes / (1 << 30))


class AmdGpusFact(Fact[tuple[AmdGpu, ...]]):
    """One line per AMD display controller: ``amd <slot> <device> <revision> <subvendor> <subdevice>
    <vram bytes or ->``, read from sysfs (no ROCm, no lspci needed)."""

    name = "amd_gpus"
    command = (
        # `[ -e ]` first: where a pattern matches no card (no GPU, or no card10+) it stays as written, and reading
        # its files would start processes for nothing.
        'for c in /sys/class/drm/card[0-9] /sys/class/drm/card[0-9][0-9]; do [ -e "$c" ] || continue; d=$c/device; '
        '[ "$(cat $d/vendor 2>/dev/null)" = 0x1002 ] || continue; '
        'case "$(cat $d/class 2>/dev/null)" in 0x03*) ;; *) continue ;; esac; '
        'echo "amd $(basename "$(readlink -f $d)") $(cat $d/device) $(cat $d/revision) '
        '$(cat $d/subsystem_vendor) $(cat $d/subsystem_device) $(cat $d/mem_info_vram_total 2>/dev/null || echo -)"; '
        "done; true"
    )

    @staticmethod
    def parse(out: Output) -> tuple[AmdGpu, ...]:
        cards: dict[str, AmdGpu] = {}
        for line in out.text.splitlines():
            m = re.fullmatch(r"amd (\S+) 0x([0-9a-fA-F]{4}) 0x([0-9a-fA-F]{2}) 0x([0-9a-fA-F]{4}) "
                             r"0x([0-9a-fA-F]{4}) (\d+|-)", line.strip())
            if not m:
                continue
            slot, device, revision, sub_vendor, sub_device, vram = m.groups()
            cards.setdefault(slot, AmdGpu(slot, device.lower(), revision.lower(),
                                          f"{sub_vendor.lower()}:{sub_device.lower()}",
                                          int(vram) if vram != "-" else 0))
        return tuple(sorted(cards.values(), key=lambda c: c.pci_slot))
