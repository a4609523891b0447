"""Which mining OS a rig runs, its version, and whether its miner is running.

Markers and version sources: each OS's own scripts (minershive/hiveos-linux,
recolic/minerstat-os, nicehash/NHOS on GitHub), plus, where no OS publishes its scripts,
what third-party tools for it read (README's mining-OS table names each source and how sure
it is).  Detection goes from the cheapest and most specific marker down to /etc/os-release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from miner2provider.detect.facts.base import Fact, Output

MARKERS = (
    "/hive/bin",
    "/hive/etc/environment",
    "/hive-config/rig.conf",
    "/hive/etc/VERSION",  # the ASIC client only
    "/home/minerstat/minerstat-os",
    "/media/storage/config.js",
    "/opt/ethos/etc/version",
    "/opt/mmp/bin/agent",
    "/root/utils/stats_rig.sh",
    "/var/log/nhos",
    # NiceHash OS keeps its configuration.txt there (nicehash/NHOS's local-access guide).
    "/mnt/nhos/configuration.txt",
)
# RaveOS publishes no scripts: no file of its own was found documented.  Every RaveOS miner
# package imports the OS's Python module `ravinos` (raveos-foundation/custom_mining, README ENG.md),
# so the module is on every RaveOS rig; where it is installed is inferred (python3's package dirs).
RAVEOS_MODULE_GLOBS = (
    "/usr/lib/python3/dist-packages/ravinos",
    "/usr/lib/python3*/site-packages/ravinos",
    "/usr/local/lib/python3*/dist-packages/ravinos",
    "/usr/local/lib/python3*/site-packages/ravinos",
)

HIVEOS, MSOS, ETHOS, MMPOS, SMOS, NHOS, RAVEOS = (
    "hiveos", "msos", "ethos", "mmpos", "smos", "nhos", "raveos")
LABELS = {
    HIVEOS: "HiveOS", MSOS: "minerstat msOS", ETHOS: "ethOS", MMPOS: "mmpOS",
    SMOS: "Simple Mining OS", NHOS: "NiceHash OS", RAVEOS: "RaveOS",
    "ubuntu": "plain Ubuntu", "debian": "plain Debian", "unknown": "unknown",
}
# The mining OSes whose miner m2p can stop and start (roles/mining_os/vars/<kind>.yml; a unit test
# keeps the two equal), and how sure m2p is of the way it does it:
#   verified: the OS's own stop/start commands, read in the OS's own scripts;
#   generic (unverified): the OS's own hold (a pause flag, its agent stopped) read in third-party
#   copies or user scripts, then the miner's processes ended by m2p itself (TERM, then KILL).
# The others get no time-share agent: RaveOS (no shell command known), and ethOS and NiceHash OS,
# which convert refuses outright.
VERIFIED, GENERIC = "verified", "generic (unverified)"
MINER_CONTROL = {HIVEOS: VERIFIED, MSOS: VERIFIED, MMPOS: GENERIC, SMOS: GENERIC}
ADAPTED = tuple(MINER_CONTROL)


@dataclass(frozen=True)
class MiningOs:
    kind: str  # hiveos | msos | ethos | mmpos | smos | nhos | raveos | ubuntu | debian | unknown
    version: str
    markers: tuple[str, ...]

    @property
    def label(self) -> str:
        return LABELS.get(self.kind, self.kind)

    @property
    def is_mining_os(self) -> bool:
        return self.kind not in {"ubuntu", "debian", "unknown"}

    @property
    def has_adapter(self) -> bool:
        """m2p can stop and start this rig's miner: a mining OS with an adapter, or plain Linux (whose
        miner, if any, is the owner's systemd unit)."""
        return self.kind in ADAPTED or not self.is_mining_os

    @property
    def miner_control(self) -> str:
        """How m2p stops and starts this rig's miner (detect shows it)."""
        if not self.is_mining_os:
            return "the owner's systemd unit (mining_os_miner_unit), if any"
        return MINER_CONTROL.get(self.kind, "none")


class MiningOsFact(Fact[MiningOs]):
    """Marker paths present (``marker /hive/bin``), plus the version sources:

    ``dpkg hive 0.6-229`` (GPU HiveOS's package), ``repover 20241231`` (/hive-config/RepoVer),
    ``asic 0.1-05`` (/hive/etc/VERSION), ``lsb DISTRIB_RELEASE=1.8.6`` (msOS writes its
    release there), ``ethos 1.3.3``, ``label NHOS`` (NiceHash OS's USB partition),
    ``osid ubuntu``.
    """

    name = "mining_os"
    command = (
        "for p in " + " ".join(m for m in MARKERS if not m.startswith("/root/")) + "; do "
        '[ -e "$p" ] && echo "marker $p"; done; '
        # /root is closed to other users: sudo only for the marker that lives there.
        "for p in " + " ".join(m for m in MARKERS if m.startswith("/root/")) + "; do "
        '{ [ -e "$p" ] || sudo -n test -e "$p" 2>/dev/null; } && echo "marker $p"; done; '
        # Version sources only where their OS's markers are (dpkg-query alone costs ~6 ms).
        "[ -d /hive/bin ] && dpkg-query -W -f='dpkg hive ${Version}\\n' hive 2>/dev/null; "
        '[ -r /hive-config/RepoVer ] && echo "repover $(head -n1 /hive-config/RepoVer)"; '
        '[ -r /hive/etc/VERSION ] && echo "asic $(head -n1 /hive/etc/VERSION)"; '
        '[ -r /opt/ethos/etc/version ] && echo "ethos $(head -n1 /opt/ethos/etc/version)"; '
        "[ -r /etc/lsb-release ] && sed -n 's/^DISTRIB_RELEASE=/lsb DISTRIB_RELEASE=/p' /etc/lsb-release; "
        # NiceHash OS boots from a USB stick with a partition labelled NHOS (udev names it).
        "[ -e /dev/disk/by-label/NHOS ] && echo 'label NHOS'; "
        # A glob that matches nothing stays as written, and -d is false for it.
        "for p in " + " ".join(RAVEOS_MODULE_GLOBS) + '; do [ -d "$p" ] && echo "module $p"; done; '

        "sed -n 's/^ID=/osid /p' /etc/os-release 2>/dev/null; true"
    )

    @staticmethod
    def parse(out: Output) -> MiningOs:
        markers = tuple(m.group(1) for m in re.finditer(r"^marker (\S+)$", out.text, re.M))
        info: dict[str, str] = {}
        for line in out.text.splitlines():
            key, _, value = line.partition(" ")
            if key != "marker" and value:
                info.setdefault(key, value.strip().strip("\"'"))
        has = set(markers).__contains__
        if has("/hive/bin") and has("/hive/etc/environment"):
            version = info.get("dpkg", "").replace("hive ", "", 1) or info.get("asic", "")
            if version and info.get("repover"):
                version = f"{version}@{info['repover']}"  # as HiveOS's hello reports it
            return MiningOs(HIVEOS, version, markers)
        if has("/home/minerstat/minerstat-os"):
            return MiningOs(MSOS, info.get("lsb", "").partition("=")[2].strip("\"'"), markers)
        if has("/opt/ethos/etc/version"):
            return MiningOs(ETHOS, info.get("ethos", ""), markers)
        if has("/opt/mmp/bin/agent"):
            return MiningOs(MMPOS, "", markers)
        if has("/root/utils/stats_rig.sh"):
            return MiningOs(SMOS, "", markers)
        if has("/var/log/nhos") or has("/mnt/nhos/configuration.txt") or info.get("label") == "NHOS":
            return MiningOs(NHOS, "", markers)
        if info.get("module", "").endswith("/ravinos"):
            return MiningOs(RAVEOS, "", (*markers, info["module"]))
        osid = info.get("osid", "unknown").strip("\"'")
        return MiningOs(osid if osid in {"ubuntu", "debian"} else "unknown", "", markers)


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


class MinerFact(Fact[MinerState]):
    """``ps -eo args=`` (visible to any user), cut on the rig to lines that start with
    ``screen``, a known miner binary, or a program (or an interpreter's script) under a miner
    folder, so a busy rig does not ship its whole process list."""

    name = "miner"
    command = (
        "ps -eo args= | grep -iE '^([^ ]*/)?(screen|screen\\.real|"
        + "|".join(sorted(b for b in MINER_BINARIES if b != "miner")) + ")( |$)|^([^ ]*/)?(ba|da)?sh "
        + "|".join(MINER_FOLDERS) + "|^(" + "|".join(MINER_FOLDERS) + ")'; true"
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
                program = args[1] if prog in {"sh", "bash", "dash"} and len(args) > 1 else args[0]
                if program.startswith(MINER_FOLDERS):
                    found.append(program.rsplit("/", 1)[-1])
        return MinerState(bool(found), tuple(dict.fromkeys(found)))


def _screen_name(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg.startswith("-") and "S" in arg[1:] and not arg.startswith("--"):
            # "-dmS miner" or "-S miner"; the name is the next word.
            if i + 1 < len(args):
                return args[i + 1]
    return ""
