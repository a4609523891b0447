"""Finding the sandbox's own processes in /proc.

Pid files go stale; ``/proc/*/cmdline`` and ``/proc/*/ns/net`` do not.  Everything
here only ever matches processes the harness started: a supervisor whose command
line names one rig's directory, or a process inside one rig's network namespace.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

SUPERVISOR_MODULE = "m2p_sandbox.supervisor"


def _pids() -> Iterator[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def supervisor_pids(rig_dir: Path) -> list[int]:
    wanted = str(rig_dir)
    found = []
    for pid in _pids():
        args = cmdline(pid)
        if SUPERVISOR_MODULE in args and wanted in args:
            found.append(pid)
    return found


def pids_in_netns(inode: int) -> list[int]:
    found = []
    for pid in _pids():
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino == inode:
                found.append(pid)
        except OSError:
            continue
    return found


def start_time(pid: int) -> int | None:
    """Clock ticks since boot when ``pid`` started: with the pid, it names one process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces; fields after it are plain.
    return int(stat.rsplit(")", 1)[1].split()[19])


def is_alive(pid: int, started: int | None) -> bool:
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if Path(f"/proc/{p}").exists() and not _is_zombie(p)]
        if left:
            time.sleep(0.1)
    return left


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def kill_all(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
