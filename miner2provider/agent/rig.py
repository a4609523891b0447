"""What the agent touches on the rig itself: the miner (through the mining OS's own
commands) and the GPUs' truth (NVML: which processes hold a GPU)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Miner:
    """The mining OS adapter: shell commands from roles/mining_os (HiveOS ``miner stop``,
    msOS ``core/stop``, a systemd unit on plain Ubuntu).  ``running`` exits 0 while it mines."""

    running_cmd: str
    start_cmd: str
    stop_cmd: str
    # A watchdog that acts on a rig without hashrate (HiveOS ``wd``: restarts the miner or
    # reboots on low hashrate or high load): kept stopped while the GPUs are leased.
    watchdog_running_cmd: str = ""
    watchdog_stop_cmd: str = ""
    timeout_s: float = 60.0

    def _sh(self, cmd: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:  # a hung mining-OS command fails like one that exits non-zero
            raise RuntimeError(f"{cmd} did not finish within {self.timeout_s:g} s") from None

    def running(self) -> bool:
        return bool(self.running_cmd) and self._sh(self.running_cmd).returncode == 0

    def start(self) -> None:
        self._checked(self.start_cmd, "start")

    def stop(self) -> None:
        self._checked(self.stop_cmd, "stop")

    def silence_watchdog(self) -> None:
        """Stop the watchdog if it runs (the mining OS starts it with the miner, at boot, on a
        dashboard push)."""
        if self.watchdog_running_cmd and self._sh(self.watchdog_running_cmd).returncode == 0:
            self._checked(self.watchdog_stop_cmd, "watchdog stop")

    def _checked(self, cmd: str, what: str) -> None:
        if not cmd:
            return
        proc = self._sh(cmd)
        if proc.returncode != 0:
            output = (proc.stderr or proc.stdout).strip()[-200:]
            raise RuntimeError(f"miner {what} ({cmd}) exited {proc.returncode}: {output}")


def gpu_processes(nvml: Any = None, run: Callable[..., Any] = subprocess.run) -> list[int]:
    """PIDs of compute processes on any GPU: through NVML (pynvml), else nvidia-smi.
    Graphics processes (Xorg on HiveOS) are not counted: they hold a few MiB and no lease needs them gone."""
    try:
        if nvml is None:
            import pynvml  # nvidia-ml-py: the real path; absent on a controller without it

            nvml = pynvml
        nvml.nvmlInit()
    except Exception:  # no pynvml, or no libnvidia-ml (no driver loaded): ask nvidia-smi
        proc = run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                   capture_output=True, text=True, timeout=20)
        if proc.returncode != 0:
            raise RuntimeError(  # noqa: B904 - nvidia-smi failing is the news, not NVML missing
                f"nvidia-smi --query-compute-apps exited {proc.returncode}: {proc.stdout.strip()[-200:]}")
        return sorted({int(line) for line in proc.stdout.split() if line.strip().isdigit()})
    try:
        pids: set[int] = set()
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            pids.update(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        return sorted(pids)
    finally:
        nvml.nvmlShutdown()


def in_a_container(pid: int, proc: str = "/proc") -> bool:
    """The process runs in a Kubernetes pod: its cgroup is under kubelet's ``kubepods``
    hierarchy (``kubepods/...`` with the cgroupfs driver, ``kubepods.slice/...`` with systemd's).
    A process that has ended counts as outside: it holds nothing, and NVML will say so."""
    try:
        return "kubepods" in Path(f"{proc}/{pid}/cgroup").read_text()
    except OSError:
        return False


def outside_containers(pids: list[int], proc: str = "/proc") -> list[int]:
    """GPU processes that are not a lease's: the miner, or anything else of the host's."""
    return [pid for pid in pids if not in_a_container(pid, proc)]
