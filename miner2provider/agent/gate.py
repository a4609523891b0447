"""The gate: the container runtime asks the agent before a container that gets GPUs starts.

The runtime runs ``m2p-agent gate`` as an OCI ``createRuntime`` hook: the hook m2p adds to
the rig's CDI spec (``/etc/cdi/nvidia.yaml``, roles/nvidia_container_toolkit), applied to
every container given those GPUs.  runc runs it on the host, after the container's process
exists and before it runs the image's program, with the container's state (id, pid,
annotations) on stdin.  The hook exits 0 to let the container start; any other exit makes
the runtime fail the container (kubelet retries it): **fail closed**.

The conversation is files in ``<state_dir>/gate`` (node-local: no API, no socket):

- the hook writes ``<id>.request`` (its own pid, the container's pid and its start time,
  the pod named in the CRI annotations) and waits;
- the agent renames it to ``<id>.granted`` once the miner is stopped and NVML shows no
  process outside a container on any GPU, or writes ``<id>.refused`` with the reason
  (the miner could not be stopped);
- the hook gives up after ``timeout_s`` (well under the kubelet's 2-minute runtime request
  timeout), removing its request; a grant that raced the timeout still counts (rename is
  atomic: either the hook's unlink or the agent's rename wins).

A granted record stays while the container's process lives: it is the rig's own record of
a lease, so the agent never starts the miner beside it even while the API is unreachable.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TIMEOUT_S = 90.0  # kubelet's runtime request timeout is 2 min: the hook must answer before it
POLL_S = 0.1
_SAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")
# CRI annotations containerd puts on a container's OCI spec (and so in the hook's state).
POD_NAME = "io.kubernetes.cri.sandbox-name"
POD_NAMESPACE = "io.kubernetes.cri.sandbox-namespace"
CONTAINER_NAME = "io.kubernetes.cri.container-name"


def start_time(pid: int) -> str:
    """The process's start time in clock ticks (/proc/PID/stat field 22): with the pid it names
    one process, so a pid reused after the container ended is not mistaken for it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19] if ")" in stat else ""


def alive(pid: int, started: str) -> bool:
    return pid > 0 and bool(started) and start_time(pid) == started


class GateDir:
    """The agent's side of the conversation."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.stale: list[Path] = []  # records read whose process is gone: sweep() removes them
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:  # a read-only disk: no hook can ask either (it fails closed); the agent runs on
            pass

    # -- reading (the agent's tick reads, then acts: no method here does both) ---------
    def _live(self, suffix: str, pid_key: str, started_key: str) -> list[tuple[Path, dict[str, Any]]]:
        """The records of this kind whose process (``pid_key``, ``started_key``) still runs; the others
        (their hook was killed, or their container ended) are noted in ``stale``."""
        out = []
        for entry in sorted(self.path.glob(f"*{suffix}")):
            try:
                record = json.loads(entry.read_text())
            except (OSError, ValueError):
                record = {}
            record = record if isinstance(record, dict) else {}
            if suffix == ".request" and isinstance(record.get("state"), dict):
                record = _from_the_shell_hook(entry, record)
            if alive(int(record.get(pid_key, 0) or 0), str(record.get(started_key, ""))):
                out.append((entry, record))
            else:
                self.stale.append(entry)
        return out

    def waiting_records(self) -> list[tuple[Path, dict[str, Any]]]:
        """Requests whose hook still waits."""
        return self._live(".request", "hook_pid", "hook_started")

    def any_waiting(self) -> bool:
        """Cheap (no reads, one directory scan, no pathlib): the agent's wake-up check, ten times a second."""
        try:
            with os.scandir(self.path) as entries:
                return any(entry.name.endswith(".request") for entry in entries)
        except OSError:
            return False

    def gated(self) -> list[dict[str, Any]]:
        """Containers let through that still run."""
        # A refusal the hook read and left (no request any more) is stale too.
        self.stale += [entry for entry in self.path.glob("*.refused") if not entry.with_suffix(".request").exists()]
        return [record for _, record in self._live(".granted", "pid", "started")]

    # -- answering --------------------------------------------------------------------
    def sweep(self) -> None:
        """Remove the stale records the last readings noted."""
        for entry in self.stale:
            entry.unlink(missing_ok=True)
        self.stale = []

    def grant(self, entries: list[Path]) -> int:
        """Let the waiting containers (``entries``, as read) start."""
        granted = 0
        for entry in entries:
            try:
                os.replace(entry, entry.with_suffix(".granted"))
                granted += 1
            except FileNotFoundError:  # the hook gave up at this instant: its container does not start
                pass
        return granted

    def refuse(self, reason: str, entries: list[Path]) -> None:
        """Whole or not at all (a temporary file renamed): the hook reads the reason as soon as the file exists,
        and a file written in place was once read empty (a refusal with no reason, seen under a loaded CI)."""
        for entry in entries:
            tmp = entry.with_name(f".{entry.stem}.refused.tmp")
            tmp.write_text(reason + "\n")
            os.replace(tmp, entry.with_suffix(".refused"))


def _from_the_shell_hook(entry: Path, raw: dict[str, Any]) -> dict[str, Any]:
    """The shell gate (roles/timeshare_agent templates/gate.sh.j2: no interpreter starts in the hand-over)
    leaves the runtime's state as it got it, with its own pid and start time.  Read once into the request's
    usual fields, the container's start time taken now (so a pid reused later is not mistaken for it), and
    written back so that the grant (a rename) carries them."""
    try:
        record = request(raw["state"], int(raw.get("hook_pid") or 0))
    except (TypeError, ValueError, AttributeError):  # not a runtime's state: never let through
        return {}
    record.update(hook_started=str(raw.get("hook_started", "")), since=raw.get("since", record["since"]))
    tmp = entry.with_name(f".{entry.name}.norm")
    try:
        tmp.write_text(json.dumps(record))
        os.replace(tmp, entry)
    except OSError:  # a read-only disk: the hook could not have written either; keep it in memory
        pass
    return record


def request(state: dict[str, Any], hook_pid: int) -> dict[str, Any]:
    annotations = state.get("annotations") or {}
    pid = int(state.get("pid") or 0)
    return {"id": str(state.get("id", "")), "pid": pid, "started": start_time(pid),
            "hook_pid": hook_pid, "hook_started": start_time(hook_pid),
            "pod": f"{annotations.get(POD_NAMESPACE, '')}/{annotations.get(POD_NAME, '')}",
            "container": str(annotations.get(CONTAINER_NAME, "")), "since": round(time.time(), 3),
            "gpus": gpu_minors(state)}


# The driver's character devices /dev/nvidiaN (nvidiactl is minor 255): the kernel's admin-guide/devices.txt.
NVIDIA_MAJOR = 195
_GPU_NODE = re.compile(r"^/dev/nvidia([0-9]+)$")


def gpu_minors(state: dict[str, Any]) -> list[int] | None:
    """The cards the container is given: the ``/dev/nvidiaN`` nodes in its OCI spec's ``linux.devices``
    (``<bundle>/config.json``; what CDI's device edits put there, and what the runtime lets it open), as
    minor numbers.  None where that cannot be read or names no card: the whole rig is the unit then."""
    try:
        spec = json.loads(Path(str(state["bundle"]), "config.json").read_text())
        devices = spec["linux"]["devices"]
    except (KeyError, TypeError, OSError, ValueError):
        return None
    minors = set()
    for device in devices if isinstance(devices, list) else []:
        match = _GPU_NODE.match(str(device.get("path", ""))) if isinstance(device, dict) else None
        if match and device.get("type", "c") == "c" and device.get("major", NVIDIA_MAJOR) == NVIDIA_MAJOR:
            minor = device.get("minor", int(match.group(1)))
            if not isinstance(minor, int) or isinstance(minor, bool):
                return None  # a spec m2p cannot read is no spec to hand a card over by
            minors.add(minor)
    return sorted(minors) or None


def wait_for_hand_over(gate_dir: Path, state: dict[str, Any], timeout_s: float = TIMEOUT_S,
                       clock: Callable[[], float] = time.monotonic) -> tuple[bool, str]:
    """The hook's side: (let through?, why not)."""
    gate_dir.mkdir(parents=True, exist_ok=True)
    name = _SAFE_ID.sub("_", str(state.get("id", "")))[:128] or f"pid{os.getpid()}"
    req, granted, refused = (gate_dir / f"{name}{s}" for s in (".request", ".granted", ".refused"))
    tmp = gate_dir / f".{name}.tmp"
    tmp.write_text(json.dumps(request(state, os.getpid())))
    os.replace(tmp, req)  # the agent never reads half a request
    deadline = clock() + timeout_s
    while True:
        if granted.exists():
            return True, ""
        if refused.exists():
            reason = refused.read_text().strip()
            req.unlink(missing_ok=True)
            refused.unlink(missing_ok=True)
            return False, reason
        if clock() >= deadline:
            try:
                req.unlink()
            except FileNotFoundError:  # renamed to .granted at this instant
                return True, ""
            return False, f"no hand-over from m2p-agent within {timeout_s:g} s (is m2p-agent.service running?)"
        time.sleep(POLL_S)


def main(argv: list[str], state_dir: str) -> int:
    """``m2p-agent gate [--timeout S]``: run by the container runtime, state on stdin."""
    timeout = TIMEOUT_S
    if argv[:1] == ["--timeout"] and len(argv) > 1:
        timeout = float(argv[1])
    try:
        state = json.loads(sys.stdin.read() or "{}")
        ok, why = wait_for_hand_over(Path(state_dir) / "gate", state if isinstance(state, dict) else {}, timeout)
    except (OSError, ValueError) as exc:
        ok, why = False, f"cannot ask m2p-agent: {exc}"
    if not ok:
        # stderr ends up in the runtime's error, and so in the pod's events.
        print(f"m2p gate: GPUs not handed over: {why}", file=sys.stderr)
    return 0 if ok else 1
