"""The GPUs' truth: which processes hold a card (NVML, else nvidia-smi), which of them are outside every
container (a pod's cgroup), and the driver's own card map (device minor -> UUID, in PCI bus order)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _uuid(nvml: Any, handle: Any) -> str:
    uuid = nvml.nvmlDeviceGetUUID(handle)
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def _opened_nvml(nvml: Any = None) -> Any:
    """NVML initialised (``nvml``, else pynvml: nvidia-ml-py, the real path); None where there is none to open
    (no pynvml, as on a controller, or no libnvidia-ml: no driver loaded).  The caller shuts it down."""
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
    except Exception:
        return None
    return nvml


def _compute_apps(run: Callable[..., Any], fields: str) -> str:
    """``nvidia-smi --query-compute-apps=<fields>``'s rows (NVML's answer where pynvml is missing)."""
    proc = run(["nvidia-smi", f"--query-compute-apps={fields}", "--format=csv,noheader"],
               capture_output=True, text=True, timeout=20)
    if proc.returncode != 0:
        raise RuntimeError(
            f"nvidia-smi --query-compute-apps exited {proc.returncode}: {proc.stdout.strip()[-200:]}")
    out: str = proc.stdout
    return out


def gpu_processes(nvml: Any = None, run: Callable[..., Any] = subprocess.run) -> list[int]:
    """PIDs of compute processes on any GPU: through NVML (pynvml), else nvidia-smi.
    Graphics processes (Xorg on HiveOS) are not counted: they hold a few MiB and no lease needs them gone."""
    nvml = _opened_nvml(nvml)
    if nvml is None:
        return sorted({int(line) for line in _compute_apps(run, "pid").split() if line.strip().isdigit()})
    try:
        pids: set[int] = set()
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            pids.update(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        return sorted(pids)
    finally:
        nvml.nvmlShutdown()


def gpu_processes_by_card(nvml: Any = None, run: Callable[..., Any] = subprocess.run) -> dict[str, list[int]]:
    """Each card's compute processes, by the card's UUID (gpu_processes, card by card)."""
    nvml = _opened_nvml(nvml)
    if nvml is None:
        by_card: dict[str, list[int]] = {}
        for line in _compute_apps(run, "pid,gpu_uuid").splitlines():
            pid, _, uuid = (part.strip() for part in line.partition(","))
            if pid.isdigit() and uuid:
                by_card.setdefault(uuid, []).append(int(pid))
        return by_card
    try:
        out: dict[str, list[int]] = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            out[_uuid(nvml, handle)] = sorted(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        return out
    finally:
        nvml.nvmlShutdown()


GPU_INFO_DIR = "/proc/driver/nvidia/gpus"


def card_uuids(info_dir: str = GPU_INFO_DIR) -> dict[int, str]:
    """Each card's device minor (``/dev/nvidiaN``: what a container is given) to its UUID, from the driver's
    own ``<info_dir>/<PCI address>/information`` (lines ``Device Minor: 0``, ``GPU UUID: GPU-...``), in PCI
    bus order (the entries' names: fixed-width lower-case hex, so sorted as text is sorted by bus).  The
    minor is not nvidia-smi's index: the driver numbers cards as it probes them, nvidia-smi by PCI address,
    and rigs have been seen where nvidia-smi's index 3 is /dev/nvidia0.  Bus order is HiveOS's (gpu-detect,
    nvidia-oc's per-card lists, the dashboard's GPU numbers) and CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID:
    the order the agent names the cards in CUDA_VISIBLE_DEVICES.  {} where the driver says nothing."""
    out: dict[int, str] = {}
    try:
        entries = sorted(os.listdir(info_dir))
    except OSError:
        return out
    for entry in entries:
        try:
            text = Path(info_dir, entry, "information").read_text()
        except OSError:
            continue
        fields = dict((key.strip(), value.strip()) for key, _, value in
                      (line.partition(":") for line in text.splitlines()) if _)
        minor, uuid = fields.get("Device Minor", ""), fields.get("GPU UUID", "")
        if minor.isdigit() and uuid.startswith("GPU-"):
            out[int(minor)] = uuid
    return out


# kubelet's pod hierarchy at the cgroup root: /kubepods/... (cgroupfs driver), /kubepods.slice/... (systemd).
POD_CGROUP = re.compile(r"^\d+:[^:\n]*:/kubepods(?:\.slice)?(?:/|$)", re.MULTILINE)


def in_a_container(pid: int, proc: str = "/proc") -> bool:
    """The process runs in a Kubernetes pod: its cgroup path starts with kubelet's ``kubepods``
    hierarchy.  The first path component, not a substring: a user can name a cgroup of their own
    (``/user.slice/.../kubepods``) but only root makes one at the root.  A process that has ended
    counts as outside: it holds nothing, and NVML will say so."""
    try:
        return POD_CGROUP.search(Path(f"{proc}/{pid}/cgroup").read_text()) is not None
    except OSError:
        return False


def outside_containers(pids: list[int], proc: str = "/proc") -> list[int]:
    """GPU processes that are not a lease's: the miner, or anything else of the host's."""
    return [pid for pid in pids if not in_a_container(pid, proc)]
