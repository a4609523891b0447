"""Facts preflight needs beyond detect's: host name, default route, NVIDIA Xid errors."""

from __future__ import annotations

import re
from dataclasses import dataclass

from miner2provider.detect.facts.base import Fact, Output


class HostnameFact(Fact[str]):
    """``hostname``: k3s refuses two nodes with the same name."""

    name = "hostname"
    command = "hostname 2>/dev/null || uname -n"

    @staticmethod
    def parse(out: Output) -> str:
        lines = out.text.split()
        return lines[0] if lines else ""


@dataclass(frozen=True)
class DefaultRoute:
    present: bool
    device: str  # interface of the default route, "" when none


class DefaultRouteFact(Fact[DefaultRoute]):
    """``ip -4 route show default`` (``default via 192.168.1.1 dev eth0 ...``); k3s needs a default route."""

    name = "default_route"
    command = ("ip -4 route show default 2>/dev/null"
               " || route -n 2>/dev/null | awk '$1==\"0.0.0.0\"{print \"default dev \" $8}'")

    @staticmethod
    def parse(out: Output) -> DefaultRoute:
        for line in out.text.splitlines():
            if line.startswith("default"):
                m = re.search(r"\bdev\s+(\S+)", line)
                return DefaultRoute(True, m.group(1) if m else "")
        return DefaultRoute(False, "")


@dataclass(frozen=True)
class XidErrors:
    readable: bool  # False when the kernel log could not be read
    count: int
    codes: tuple[int, ...]  # distinct Xid codes seen, sorted (79 = GPU fell off the bus)
    last: str  # the last Xid line, for the warning


class XidFact(Fact[XidErrors]):
    """NVRM Xid lines of the kernel log (``NVRM: Xid (PCI:0000:01:00): 79, pid=...``), at most 50.

    ``dmesg`` as the login user, else as root where sudo needs no password (Ubuntu's ``kernel.dmesg_restrict=1``
    keeps the ring buffer from other users), else the journal's kernel lines where the user may read the system
    journal (root, or the groups systemd's journalctl documents: systemd-journal, adm, wheel); otherwise unreadable.
    journalctl exits 0 with nothing for a user who may not read the system journal, so "no Xid" is never said
    from its silence."""

    name = "xid"
    command = ("{ dmesg 2>/dev/null || sudo -n dmesg 2>/dev/null"
               " || { { [ \"$(id -u)\" = 0 ] || id -Gn 2>/dev/null | grep -qwE 'systemd-journal|adm|wheel'; }"
               " && journalctl -k -b -q --no-pager 2>/dev/null; } || echo @@unreadable; } "
               "| grep -E 'NVRM: Xid|@@unreadable' | tail -n 50")

    @staticmethod
    def parse(out: Output) -> XidErrors:
        lines = [line for line in out.text.splitlines() if line.strip()]
        if any("@@unreadable" in line for line in lines):
            return XidErrors(False, 0, (), "")
        xids = [line for line in lines if "NVRM: Xid" in line]
        codes = sorted({int(m.group(1)) for line in xids if (m := re.search(r"Xid \([^)]*\): ([0-9]{1,9})\b", line))})
        return XidErrors(True, len(xids), tuple(codes), xids[-1].strip() if xids else "")
