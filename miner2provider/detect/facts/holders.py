"""Who holds the rig's GPUs, on any OS: each process NVML lists, what it is and what keeps it running (issue 38).

Read-only.  For each PID ``nvidia-smi --query-compute-apps`` lists (NVML's compute processes; a container's are
listed too), the rig says its program (``/proc/PID/exe``), its systemd unit (the last ``.service`` or ``.scope``
of ``/proc/PID/cgroup``) and its ancestors up to PID 1 (each one's ``comm``, and for a shell or an interpreter
the script it runs).  Never its arguments or environment: a miner's command line holds wallets and pool
passwords.  Another user's ``exe`` needs root (``sudo -n`` where the login user may; otherwise the program is
``comm``).  A program m2p knows as a miner is named as one; anything else is an unknown GPU process, which m2p
names and never touches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from miner2provider.detect.facts.base import Fact, Output, whole
from miner2provider.detect.facts.mining_os import MINER_BINARIES, SCRIPT_RUNNERS

# Supervisors a process may run under, named by an ancestor's comm (what restarts or holds it).
SCREENS = {"screen": "screen", "SCREEN": "screen", "tmux: server": "tmux", "tmux": "tmux"}
CRONS = {"cron", "crond", "CRON"}
# Units that are a login's, not a supervisor's: a miner started by hand from an SSH session lives in one (a
# session scope where logind runs, else sshd's own unit: seen on a sandbox rig, nohup from an SSH login).
_SESSION = re.compile(r"^(session-[0-9]+\.scope|user@[0-9]+\.service|init\.scope|sshd?\.service)$")
_UNIT = re.compile(r"^[A-Za-z0-9@._\\:-]{1,200}\.(service|scope)$")
_UUID = re.compile(r"^GPU-[0-9a-fA-F-]{8,60}$")
# Stats APIs a miner serves without being asked (its documented default), which m2p can read: T-Rex's HTTP API
# (github.com/trexminer/T-Rex/wiki/API: --api-bind-http, default 127.0.0.1:4067).  The others' APIs are off
# unless a flag turns them on (lolMiner --apiport, GMiner --api, NBMiner --api-bind, xmrig --http-port), and
# m2p never reads a miner's arguments (they hold wallets): an owner names such a port (m2p_trex_api_port).
DEFAULT_APIS = {"t-rex": "127.0.0.1:4067"}


@dataclass(frozen=True)
class Ancestor:
    comm: str
    script: str = ""  # the script a shell or an interpreter runs (its file name), or ""


@dataclass(frozen=True)
class Holder:
    pid: int
    program: str  # the executable's file name (or comm when it cannot be read)
    gpus: tuple[str, ...]  # GPU UUIDs
    unit: str = ""  # its systemd unit, or "" (none, or a login session's)
    ancestors: tuple[Ancestor, ...] = ()  # parent first, up to (not including) PID 1
    in_container: bool = False  # a container's process (kubepods, containerd): a lease's, not a miner's

    @property
    def miner(self) -> str:
        """The known miner it is (mining_os.MINER_BINARIES), or "" for an unknown GPU process."""
        name = self.program.lower()
        return name if name in MINER_BINARIES and name != "miner" else ""

    @property
    def api(self) -> str:
        """Where its stats API listens by default (DEFAULT_APIS), or "" when m2p knows none."""
        return DEFAULT_APIS.get(self.miner, "")

    @property
    def supervisors(self) -> tuple[str, ...]:
        """What keeps it running, nearest first: ``wrapper SCRIPT`` (a shell or an interpreter running a script),
        ``screen``, ``tmux``, ``cron``, then ``unit NAME``; empty when m2p sees none (started by hand)."""
        found: list[str] = []
        for ancestor in self.ancestors:
            # A script run by its shebang is named after itself (comm: its first 15 characters).
            if ancestor.script and (ancestor.comm in SCRIPT_RUNNERS or ancestor.script.startswith(ancestor.comm)):
                found.append(f"wrapper {ancestor.script}")
            elif ancestor.comm in SCREENS:
                found.append(SCREENS[ancestor.comm])
            elif ancestor.comm in CRONS:
                found.append("cron")
        return tuple(dict.fromkeys([*found, *([f"unit {self.unit}"] if self.unit else [])]))


class HoldersFact(Fact[tuple[Holder, ...]]):
    """``holder PID UUID`` per GPU a process holds, then per PID: ``exe PID NAME``, ``unit PID UNIT``,
    ``container PID``, and ``parent PID COMM<TAB>SCRIPT`` from its parent up."""

    name = "holders"
    command = (
        "command -v nvidia-smi >/dev/null 2>&1 || exit 0; "
        "S=; [ \"$(id -u)\" = 0 ] || ! sudo -n true 2>/dev/null || S='sudo -n'; "
        "H=$(nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader 2>/dev/null | head -n 256 "
        "| tr -d ' '); "
        "echo \"$H\" | while IFS=, read -r pid uuid; do [ -n \"$pid\" ] && echo \"holder $pid $uuid\"; done; "
        "for pid in $(echo \"$H\" | cut -d, -f1 | sort -un); do "
        "case $pid in *[!0-9]*|'') continue;; esac; [ -d /proc/$pid ] || continue; "
        "exe=$($S readlink /proc/$pid/exe 2>/dev/null) || exe=; "
        "[ -n \"$exe\" ] && echo \"exe $pid ${exe##*/}\" || echo \"exe $pid $(cat /proc/$pid/comm 2>/dev/null)\"; "
        "echo \"unit $pid $(sed -n 's#.*/\\([^/]*\\.\\(service\\|scope\\)\\)$#\\1#p' /proc/$pid/cgroup 2>/dev/null "
        "| tail -n 1)\"; "
        "grep -qE 'kubepods|containerd|docker' /proc/$pid/cgroup 2>/dev/null && echo \"container $pid\"; "
        "p=$(awk '/^PPid:/{print $2}' /proc/$pid/status 2>/dev/null); n=0; "
        "while [ -n \"$p\" ] && [ \"$p\" -gt 1 ] && [ $n -lt 16 ]; do n=$((n+1)); "
        "c=$(cat /proc/$p/comm 2>/dev/null); s=$(tr '\\0' '\\n' < /proc/$p/cmdline 2>/dev/null | sed -n 2p); "
        "case $s in -*|'') s=;; *) case $s in /*) f=$s;; *) f=/proc/$p/cwd/$s;; esac; "
        "if $S test -f \"$f\"; then s=${s##*/}; else s=; fi;; esac; "
        "printf 'parent %s %s\\t%s\\n' \"$pid\" \"$c\" \"$s\"; "
        "p=$(awk '/^PPid:/{print $2}' /proc/$p/status 2>/dev/null); done; done; true"
    )

    @staticmethod
    def parse(out: Output) -> tuple[Holder, ...]:
        gpus: dict[int, list[str]] = {}
        program: dict[int, str] = {}
        units: dict[int, str] = {}
        containers: set[int] = set()
        ancestors: dict[int, list[Ancestor]] = {}
        for line in out.text.splitlines():
            kind, _, rest = line.partition(" ")
            pid_text, _, value = rest.partition(" ")
            pid = whole(pid_text)
            if pid is None:
                continue
            if kind == "holder" and _UUID.match(value.strip()):
                gpus.setdefault(pid, []).append(value.strip())
            elif kind == "exe" and value.strip() and pid not in program:
                program[pid] = value.strip()[:64]
            elif kind == "unit" and _UNIT.match(value.strip()) and not _SESSION.match(value.strip()):
                units[pid] = value.strip()
            elif kind == "container":
                containers.add(pid)
            elif kind == "parent":
                comm, _, script = value.partition("\t")
                ancestors.setdefault(pid, []).append(Ancestor(comm.strip()[:32], script.strip()[:64]))
        return tuple(Holder(pid, program.get(pid, "?"), tuple(dict.fromkeys(found)), units.get(pid, ""),
                            tuple(ancestors.get(pid, ())), pid in containers)
                     for pid, found in sorted(gpus.items()))
