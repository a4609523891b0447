"""Which mining OS a rig runs, its version, and whether its miner is running.

Markers and version sources: each OS's own scripts (minershive/hiveos-linux,
recolic/minerstat-os, nicehash/NHOS on GitHub).  Detection goes from
the cheapest and most specific marker down to /etc/os-release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from miner2provider.facts.base import Fact, Output

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
)

HIVEOS, MSOS, ETHOS, MMPOS, SMOS, NHOS, RAVEOS = (
    "hiveos", "msos", "ethos", "mmpos", "smos", "nhos", "raveos")
LABELS = {
    HIVEOS: "HiveOS", MSOS: "minerstat msOS", ETHOS: "ethOS", MMPOS: "mmpOS",
    SMOS: "Simple Mining OS", NHOS: "NiceHash OS", RAVEOS: "RaveOS",
    "ubuntu": "plain Ubuntu", "debian": "plain Debian", "unknown": "unknown",
}
# The mining OSes whose miner m2p can stop and start (roles/mining_os/vars/<kind>.yml; a unit test
# keeps the two equal).  The others get no time-share agent until they have one (issue 15).
ADAPTED = (HIVEOS, MSOS)


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
        if has("/var/log/nhos") or info.get("label") == "NHOS":
            return MiningOs(NHOS, "", markers)
        osid = info.get("osid", "unknown").strip("\"'")
        # RaveOS: no verified filesystem marker yet (reference §1.7); it reports as its base.
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


class MinerFact(Fact[MinerState]):
    """``ps -eo args=`` (visible to any user), cut on the rig to lines that start with
    ``screen`` or a known miner binary, so a busy rig does not ship its whole process list."""

    name = "miner"
    command = (
        "ps -eo args= | grep -iE '^([^ ]*/)?(screen|screen\\.real|"
        + "|".join(sorted(b for b in MINER_BINARIES if b != "miner")) + ")( |$)'; true"
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
        return MinerState(bool(found), tuple(dict.fromkeys(found)))


def _screen_name(args: list[str]) -> str:
    for i, arg in enumerate(args):
        if arg.startswith("-") and "S" in arg[1:] and not arg.startswith("--"):
            # "-dmS miner" or "-S miner"; the name is the next word.
            if i + 1 < len(args):
                return args[i + 1]
    return ""
