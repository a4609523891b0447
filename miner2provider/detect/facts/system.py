"""System facts: distribution, kernel, cgroups, CPU, memory, disks, python3, sudo."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from miner2provider.detect.facts.base import Fact, Output, whole


@dataclass(frozen=True)
class OsRelease:
    id: str
    version_id: str
    pretty_name: str
    id_like: str = ""


class OsReleaseFact(Fact[OsRelease]):
    """``/etc/os-release``: ``ID=ubuntu`` / ``VERSION_ID="22.04"`` / ``PRETTY_NAME=...``."""

    name = "os_release"
    command = "cat /etc/os-release"

    @staticmethod
    def parse(out: Output) -> OsRelease:
        values = parse_env_file(out.text) if out.rc == 0 else {}
        return OsRelease(
            id=values.get("ID", "unknown"),
            version_id=values.get("VERSION_ID", ""),
            pretty_name=values.get("PRETTY_NAME", "unknown"),
            id_like=values.get("ID_LIKE", ""),
        )


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=value lines as os-release and lsb-release write them (shell quoting)."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        values[key.strip()] = _shell_value(raw)
    return values


_PLAIN_VALUE = re.compile(r"[^\s'\"\\]*|\"[^\"\\]*\"|'[^']*'")


def _shell_value(raw: str) -> str:
    """``raw``'s words as the shell reads them, joined by spaces.  The usual values (``22.04``, ``"Ubuntu 22.04"``,
    ``'x'``) are one word with nothing to undo but the quotes; anything else goes through shlex (parsing each line
    with it cost more than all of a rig's other facts together)."""
    if _PLAIN_VALUE.fullmatch(raw):
        return raw[1:-1] if raw[:1] in ("'", '"') else raw
    try:
        parts = shlex.split(raw)
    except ValueError:
        parts = [raw.strip("\"'")]
    return " ".join(parts)


@dataclass(frozen=True)
class Kernel:
    release: str
    machine: str


class KernelFact(Fact[Kernel]):
    """``uname -rm``: ``6.6.0-hiveos x86_64``."""

    name = "kernel"
    command = "uname -rm"

    @staticmethod
    def parse(out: Output) -> Kernel:
        parts = out.text.split()
        return Kernel(parts[0] if parts else "unknown", parts[1] if len(parts) > 1 else "unknown")


@dataclass(frozen=True)
class Cgroups:
    version: int  # 1 or 2
    hybrid: bool  # v1 with a v2 hierarchy mounted at /sys/fs/cgroup/unified


class CgroupFact(Fact[Cgroups]):
    """Filesystem type of /sys/fs/cgroup: ``cgroup2fs`` means v2; ``tmpfs`` means v1."""

    name = "cgroup"
    command = "stat -fc %T /sys/fs/cgroup; [ -d /sys/fs/cgroup/unified ] && echo unified"

    @staticmethod
    def parse(out: Output) -> Cgroups:
        lines = out.text.split()
        v2 = bool(lines) and lines[0] == "cgroup2fs"
        return Cgroups(2 if v2 else 1, hybrid=not v2 and "unified" in lines)


@dataclass(frozen=True)
class Cpu:
    cores: int
    model: str


class CpuFact(Fact[Cpu]):
    """``nproc`` then the first ``model name`` line of /proc/cpuinfo."""

    name = "cpu"
    command = "nproc; grep -m1 '^model name' /proc/cpuinfo"

    @staticmethod
    def parse(out: Output) -> Cpu:
        lines = out.text.splitlines()
        cores = (whole(lines[0]) if lines else None) or 0
        model = next((ln.split(":", 1)[1].strip() for ln in lines[1:] if ":" in ln), "unknown")
        return Cpu(cores, re.sub(r"\s+", " ", model))


@dataclass(frozen=True)
class Memory:
    total_mb: int  # MemTotal: what the kernel can use, always below what is installed
    available_mb: int

    @property
    def installed_mb(self) -> int:
        """RAM as its owner knows it: boards take whole gigabytes, and MemTotal is that less what firmware, the
        kernel's own image and reservations, and an onboard GPU keep (a 4 GB board shows about 3854 MB; 3-6 % on
        rigs' boards, never a whole GiB), so the next whole GiB at or above MemTotal."""
        return -(-self.total_mb // GIB_MB) * GIB_MB if self.total_mb > 0 else 0


GIB_MB = 1024


class MemoryFact(Fact[Memory]):
    """``MemTotal:  8053040 kB`` / ``MemAvailable: ...`` from /proc/meminfo."""

    name = "memory"
    command = "grep -E '^(MemTotal|MemAvailable):' /proc/meminfo"

    @staticmethod
    def parse(out: Output) -> Memory:
        kb = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+):[ \t]+([0-9]{1,18}) kB", out.text, re.M)}
        return Memory(kb.get("MemTotal", 0) // 1024, kb.get("MemAvailable", 0) // 1024)


@dataclass(frozen=True)
class Mount:
    device: str
    fstype: str
    mountpoint: str
    size_gb: float
    free_gb: float


# Filesystems that can never hold k3s data (RAM-backed, read-only images, pseudo).
_NOT_A_DISK = {"tmpfs", "devtmpfs", "squashfs", "ramfs", "proc", "sysfs", "efivarfs", "iso9660", "vfat"}


class DisksFact(Fact[tuple[Mount, ...]]):
    """``df -PkT``: the root filesystem, and every other filesystem that could hold k3s data.

    ``Filesystem Type 1024-blocks Used Available Capacity Mounted on``
    """

    name = "disks"
    command = "df -PkT 2>/dev/null"

    @staticmethod
    def parse(out: Output) -> tuple[Mount, ...]:
        mounts = []
        for line in out.text.splitlines()[1:]:
            parts = line.split(None, 6)
            if len(parts) < 7:
                continue
            device, fstype, size_text, _, avail_text, _, mountpoint = parts
            size, avail = whole(size_text), whole(avail_text)
            if size is None or avail is None:  # a header, or `-` where a FUSE mount knows no figure
                continue
            pseudo = fstype in _NOT_A_DISK or mountpoint.startswith(("/proc", "/sys", "/dev", "/run"))
            if mountpoint != "/" and pseudo:
                continue
            mounts.append(Mount(device, fstype, mountpoint, round(size / 1024**2, 1),
                                round(avail / 1024**2, 1)))
        return tuple(mounts)


@dataclass(frozen=True)
class Python:
    version: str | None  # "3.11.2"; None when python3 is missing

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.version.split(".")) if self.version else ()


class PythonFact(Fact[Python]):
    """``python3 -V``: ``Python 3.6.9``, or ``absent``.  (-V starts no site imports: fast.)
    ``$M2P_PYTHON``: the probe's python3 (``python3``, or the rig's m2p_python_interpreter)."""

    name = "python"
    command = 'if command -v "$M2P_PYTHON" >/dev/null 2>&1; then "$M2P_PYTHON" -V 2>&1; else echo absent; fi'

    @staticmethod
    def parse(out: Output) -> Python:
        match = re.fullmatch(r"Python ([0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4})\S*", out.text.strip())
        return Python(match.group(1) if match else None)


@dataclass(frozen=True)
class Sudo:
    state: str  # root | nopasswd | password | absent


class SudoFact(Fact[Sudo]):
    """Can the login user become root: already root, sudo without password, with one, or no sudo."""

    name = "sudo"
    command = (
        'if [ "$(id -u)" = 0 ]; then echo root; '
        "elif ! command -v sudo >/dev/null 2>&1; then echo absent; "
        "elif sudo -n true 2>/dev/null; then echo nopasswd; else echo password; fi"
    )

    @staticmethod
    def parse(out: Output) -> Sudo:
        state = out.text.strip()
        return Sudo(state if state in {"root", "nopasswd", "password", "absent"} else "absent")
