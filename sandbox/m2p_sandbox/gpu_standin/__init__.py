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
    conf.write_text(json.dumps(rig_config(rig_name, card_names), indent=2))
    # What the cards saw (nvidia-smi's clock and power calls, miners attaching): every stand-in miner
    # writes to it, whichever user runs it.
    log = root / GPU_LOG.lstrip("/")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    log.chmod(0o666)
