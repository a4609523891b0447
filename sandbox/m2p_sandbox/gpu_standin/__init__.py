"""STAND-IN GPUs for sandbox rigs: an ``nvidia-smi`` that prints rows of real cards.

Sandbox rigs have no GPU.  ``install`` puts the stand-in ``nvidia-smi`` on a rig's
root filesystem with the chosen cards; it answers ``--query-gpu``, ``-L``, ``--help``
and the plain table header the way the real tool does, from ``cards.yml``.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import yaml

from m2p_sandbox.errors import SandboxError

HERE = Path(__file__).parent
DRIVER_VERSION = "550.127.05"  # an R550 production driver, as HiveOS ships
CUDA_VERSION = "12.4"  # the CUDA line an R550 driver reports
RIG_FILE = "/etc/m2p-standin/gpus.json"  # on the rig: what the stand-in nvidia-smi reports
GPU_LOG = "/var/log/m2p-standin-gpu.log"  # on the rig: what the cards were asked, in order


def cards() -> dict[str, dict[str, str]]:
    data: dict[str, dict[str, str]] = yaml.safe_load((HERE / "cards.yml").read_text())
    return data


def rig_config(rig_name: str, card_names: list[str], driver: str = DRIVER_VERSION,
               cuda: str = CUDA_VERSION) -> dict[str, object]:
    known = cards()
    gpus = []
    for index, card in enumerate(card_names):
        if card not in known:
            raise SandboxError(f"unknown stand-in card {card!r}; known: {', '.join(sorted(known))}")
        row = {k: v for k, v in known[card].items() if k != "source"}
        row["index"] = str(index)
        row["uuid"] = "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{rig_name}.{index}.{card}"))
        row["pci.bus_id"] = f"00000000:{index + 1:02X}:00.0"
        gpus.append(row)
    return {"driver_version": driver, "cuda_version": cuda, "gpus": gpus}


def driver_info(config: dict[str, object], folder: Path, minors: list[int] | None = None) -> Path:
    """A STAND-IN of the NVIDIA driver's ``/proc/driver/nvidia/gpus``: one folder per card named by its PCI
    address, its ``information`` in the driver's own shape (the fields nvidia-container-cli info prints from
    it).  ``minors``: the device minor of each card (the driver numbers them as it probes; not always PCI order)."""
    gpus = config["gpus"]
    assert isinstance(gpus, list)
    for position, gpu in enumerate(gpus):
        pci = gpu["pci.bus_id"][4:].lower()  # nvidia-smi's 8-digit domain; the driver's folder has 4
        (folder / pci).mkdir(parents=True, exist_ok=True)
        minor = position if minors is None else minors[position]
        (folder / pci / "information").write_text(
            f"Model: \t\t {gpu['name']}\nIRQ:   \t\t {130 + position}\nGPU UUID: \t {gpu['uuid']}\n"
            f"Video BIOS: \t 94.02.42.00.a9\nBus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\n"
            f"Bus Location: \t {pci}\nDevice Minor: \t {minor}\nGPU Excluded:\t No\n")
    return folder


def card_nodes(minors: tuple[int, ...] | list[int]) -> list[dict[str, object]]:
    """A container's cards as its OCI spec lists them (``linux.devices``): the ``/dev/nvidiaN`` character
    devices, major 195, that CDI's device edits add for each card given (the STAND-IN tenant's and the tests'
    containers; runc creates them from these)."""
    return [{"path": f"/dev/nvidia{minor}", "type": "c", "major": 195, "minor": int(minor), "fileMode": 0o666,
             "uid": 0, "gid": 0} for minor in minors]


MINER_FILE = "/usr/lib/m2p-standin/standin-cuda"  # on the rig: the GPU miner stand-in the flavours' miners exec


def install_miner(root: Path) -> None:
    """The GPU miner stand-in (standin-cuda) and T-Rex's HTTP API stand-in (standin-trex-api, which a miner
    serves with ``--serve``), on every rig: the flavours' miner scripts become them."""
    folder = root / MINER_FILE.lstrip("/")
    folder.parent.mkdir(parents=True, exist_ok=True)
    for name in ("standin-cuda", "standin-trex-api"):
        target = folder.parent / name
        shutil.copy(HERE / name, target)
        target.chmod(0o755)


def install(root: Path, card_names: list[str], rig_name: str = "rig") -> None:
    target = root / "usr/bin/nvidia-smi"
    shutil.copy(HERE / "nvidia-smi", target)
    target.chmod(0o755)
    conf = root / RIG_FILE.lstrip("/")
    conf.parent.mkdir(parents=True, exist_ok=True)
    config = rig_config(rig_name, card_names)
    conf.write_text(json.dumps(config, indent=2))
    install_driver_info(root, config)
    # What the cards saw (nvidia-smi's clock and power calls, miners attaching): every stand-in miner
    # writes to it, whichever user runs it.
    log = root / GPU_LOG.lstrip("/")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    log.chmod(0o666)


DRIVER_INFO = "/usr/lib/m2p-standin/driver"  # on the rig: the stand-in's /proc/driver, bound there at boot
DRIVER_UNIT = """[Unit]
Description=STAND-IN of the NVIDIA driver's /proc/driver/nvidia (m2p sandbox rig: no GPU, no driver)
DefaultDependencies=no
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/mount -o bind,ro {folder} /proc/driver

[Install]
WantedBy=sysinit.target
"""


def install_driver_info(root: Path, config: dict[str, object]) -> None:
    """What the loaded driver shows in /proc/driver/nvidia/gpus (driver_info), on the rig: written under
    DRIVER_INFO read-only as procfs is, and bound over the rig's /proc/driver at each boot by a unit (procfs
    takes no files; the rig's /proc/driver is empty without a driver)."""
    folder = root / DRIVER_INFO.lstrip("/")
    driver_info(config, folder / "nvidia/gpus")
    for path in sorted(folder.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)
    unit = root / "etc/systemd/system/m2p-standin-nvidia-proc.service"
    unit.write_text(DRIVER_UNIT.format(folder=DRIVER_INFO))
    wants = root / "etc/systemd/system/sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / unit.name).symlink_to(f"../{unit.name}")
