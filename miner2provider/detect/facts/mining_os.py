"""Which mining OS a rig runs, its version, and whether its miner is running.

A generic matcher over the mining-OS records (detect/os_records.py: one per OS, with its markers and
version sources and where each was read; docs/mining-os.md names each source and how sure it
is).  Detection goes through the records from the most specific markers down, then /etc/os-release.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from miner2provider.detect import os_records
from miner2provider.detect.facts.base import Fact, Output
from miner2provider.detect.os_records import OsRecord


@dataclass(frozen=True)
class MiningOs:
    kind: str  # a record's kind (hiveos, msos, ...) | ubuntu | debian | unknown
    version: str
    markers: tuple[str, ...]

    @property
    def record(self) -> OsRecord | None:
        return os_records.by_kind(self.kind)

    @property
    def label(self) -> str:
        record = self.record
        return record.label if record else os_records.PLAIN.get(self.kind, self.kind)

    @property
    def is_mining_os(self) -> bool:
        return self.kind not in {*os_records.PLAIN, os_records.UNKNOWN}

    @property
    def has_adapter(self) -> bool:
        """m2p can stop and start this rig's miner: a mining OS with an adapter, or plain Linux (whose
        miner, if any, is the owner's systemd unit)."""
        record = self.record
        return record.has_adapter if record else not self.is_mining_os

    @property
    def miner_control(self) -> str:
        """How m2p stops and starts this rig's miner (detect shows it)."""
        if not self.is_mining_os:
            return "the owner's systemd unit (mining_os_miner_unit), if any"
        record = self.record
        return record.miner_control if record else "none"

    @property
    def named(self) -> str:
        """The label with the version, as sentences name the OS."""
        return f"{self.label} {self.version}" if self.version else self.label

    @property
    def refusal(self) -> tuple[str, str] | None:
        """(code, sentence) when m2p does not convert this OS."""
        record = self.record
        return (record.refusal.code, record.refusal.said(self.named)) if record and record.refusal else None

    @property
    def driver_upgrade(self) -> str:
        record = self.record
        return record.driver_upgrade if record else os_records.PLAIN_DRIVER_UPGRADE.get(self.kind, "none")


def probe_command(records: Sequence[OsRecord]) -> str:
    """Marker paths present (``marker /hive/bin``), plus each record's version sources
    (``dpkg hive 0.6-229``, ``lsb DISTRIB_RELEASE=1.8.6``, ...), a disk label (``label NHOS``), a Python
    module's folder (``module /usr/lib/python3/dist-packages/ravinos``) and ``osid ubuntu``."""
    markers = list(dict.fromkeys(m for r in records for m in r.markers))
    labels = sorted({r.disk_label for r in records if r.disk_label})
    globs = [g for r in records for g in r.python_module_globs]
    return (
        "for p in " + " ".join(m for m in markers if not m.startswith("/root/")) + "; do "
        '[ -e "$p" ] && echo "marker $p"; done; '
        # /root is closed to other users: sudo only for the markers that live there.
        + ("for p in " + " ".join(m for m in markers if m.startswith("/root/")) + "; do "
           '{ [ -e "$p" ] || sudo -n test -e "$p" 2>/dev/null; } && echo "marker $p"; done; '
           if any(m.startswith("/root/") for m in markers) else "")
        # Version sources only where their OS's markers are (dpkg-query alone costs ~6 ms).
        + "".join(f"{probe}; " for r in records for probe in r.version_probes)
        # A USB stick's partition label (udev names it).
        + "".join(f"[ -e /dev/disk/by-label/{label} ] && echo 'label {label}'; " for label in labels)
        # A glob that matches nothing stays as written, and -d is false for it.
        + ("for p in " + " ".join(globs) + '; do [ -d "$p" ] && echo "module $p"; done; ' if globs else "")
        + "sed -n 's/^ID=/osid /p' /etc/os-release 2>/dev/null; true"
    )


def recognise(out: Output, records: Sequence[OsRecord]) -> MiningOs:
    markers = tuple(m.group(1) for m in re.finditer(r"^marker (\S+)$", out.text, re.M))
    info: dict[str, str] = {}
    for line in out.text.splitlines():
        key, _, value = line.partition(" ")
        if key != "marker" and value:
            info.setdefault(key, value.strip().strip("\"'"))
    present = set(markers)
    for record in records:
        if record.matches(present, info):
            module = info.get("module", "")
            shown = (*markers, module) if record.python_module_globs and module else markers
            return MiningOs(record.kind, record.version(info), shown)
    osid = info.get("osid", os_records.UNKNOWN).strip("\"'")
    return MiningOs(osid if osid in os_records.PLAIN else os_records.UNKNOWN, "", markers)


class MiningOsFact(Fact[MiningOs]):
    """The mining-OS records' markers and version sources (probe_command), matched by recognise()."""

    name = "mining_os"
    command = probe_command(os_records.records())

    @staticmethod
    def parse(out: Output) -> MiningOs:
        return recognise(out, os_records.records())


@dataclass(frozen=True)
class MinerState:
    running: bool
    sessions: tuple[str, ...]  # screen sessions or processes that look like a miner


# Screen sessions the mining OSes run their miners in, and common miner binaries.
MINER_SCREENS = {"miner", "minew", "minerstat-console"}
MINER_BINARIES = {
    "t-rex", "lolminer", "nbminer", "gminer", "miner", "teamredminer", "xmrig", "excavator",
    "ethminer", "bzminer", "rigel", "onezerominer", "srbminer-multi",
}


# Folders a mining OS runs its miners from, whatever their name (mmpOS: /opt/mmp/miners/<miner>/).
MINER_FOLDERS = ("/opt/mmp/miners/",)
# A mining OS's loop that runs one miner, named by its first argument: HiveOS's `miner start` opens a window per
# miner in the session its screenrc names (`screen -dm -c /hive/etc/screenrc.miner bash`: no -S to read), each
# running `miner-run <miner> <n>` (hiveos-linux hive/bin/miner @fae42644).  A session holding only a bash (a start
# with no miner set) runs none: no miner.
MINER_LOOPS = ("/hive/bin/miner-run",)
SCRIPT_RUNNERS = {"sh", "bash", "dash", "python", "python3", "perl"}  # their script is the program


# The lines of ``ps -eo args=`` the miner fact keeps: a program named like a miner (or screen), an interpreter running
# a miner loop or a script in a miner folder, or a program in a miner folder (case-insensitive).
MINER_LINES = (
    "^([^ ]*/)?(screen|screen\\.real|" + "|".join(sorted(b for b in MINER_BINARIES if b != "miner")) + ")( |$)"
    "|^([^ ]*/)?((ba|da)?sh|python3?|perl) (" + "|".join((*MINER_FOLDERS, *MINER_LOOPS)) + ")"
    "|^(" + "|".join(MINER_FOLDERS) + ")"
)


def _unmatched_by_itself(word: str) -> str:
    """``word`` as an ERE that matches it but not its own text (``x[m]rig``): the grep below never finds itself."""
    at = next(i for i, c in enumerate(word) if c.isalnum())
    return "".join(f"[{c}]" if i == at else "\\" + c if c in ".[]()*+?{}|^$\\" else c for i, c in enumerate(word))


# Every command line a MINER_LINES line can come from holds one of these words (the name, the folder or the loop;
# the letters ps shows are the process's own, and a process without a command line shows as [name], which
# MINER_LINES cannot match).
MINER_WORDS = "|".join(_unmatched_by_itself(w) for w in ("screen", *sorted(MINER_BINARIES - {"miner"}),
                                                              *MINER_FOLDERS, *MINER_LOOPS))
# /proc/<pid>/cmdline in the order of the pids (ps's order): the shell sorts a glob's names as text, so one glob per
# length (pid_max is at most 4194304, 7 digits).
PROC_CMDLINES = " ".join(f"/proc/{'[0-9]' * n}/cmdline" for n in range(1, 8))


class MinerFact(Fact[MinerState]):
    """``ps -eo args=`` (visible to any user), cut on the rig to lines that start with
    ``screen``, a known miner binary, or a program (or an interpreter's script) under a miner
    folder, so a busy rig does not ship its whole process list.

    ps reads four files of every process (~15 ms on a rig, more on a busy controller's loopback rigs: the probe's
    costliest fact), so the rig first finds the processes whose command line holds a miner's word (one grep over
    their command lines), and ps shows those alone (``-q``: it reads nothing else), in pid order as ``-e`` would;
    the same grep then keeps the same lines.  Without a candidate neither runs; where ``ps -q`` shows nothing
    (an old ps, or the candidates ended) the whole list is read as before."""

    name = "miner"
    command = (
        "P=; for f in $(grep -a -l -i -E '" + MINER_WORDS + "' " + PROC_CMDLINES + " 2>/dev/null); do "
        'p=${f#/proc/}; P="$P,${p%/cmdline}"; done; '
        '[ -z "$P" ] || { L=$(ps -o args= -q "${P#,}" 2>/dev/null) || [ -n "$L" ] || L=$(ps -eo args=); '
        "printf '%s\\n' \"$L\" | grep -iE '" + MINER_LINES + "'; }; true"
    )

    @staticmethod
    def parse(out: Output) -> MinerState:
        found: list[str] = []
        for line in out.text.splitlines():
            args = line.split()
            if not args:
                continue
            prog = args[0].rsplit("/", 1)[-1].lower()
            if prog in {"screen", "screen.real"}:
                name = _screen_name(args)
                if name in MINER_SCREENS:
                    found.append(f"screen:{name}")
            elif prog in MINER_BINARIES and prog != "miner":
                found.append(prog)
            else:
                program = args[1] if prog in SCRIPT_RUNNERS and len(args) > 1 else args[0]
                if program in MINER_LOOPS and len(args) > 2:
                    found.append(f"{program.rsplit('/', 1)[-1]} {args[2]}")
                elif program.startswith(MINER_FOLDERS):
                    found.append(program.rsplit("/", 1)[-1])
        return MinerState(bool(found), tuple(dict.fromkeys(found)))


def _screen_name(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg.startswith("-") and "S" in arg[1:] and not arg.startswith("--"):
            # "-dmS miner" or "-S miner"; the name is the next word.
            if i + 1 < len(args):
                return args[i + 1]
    return ""
