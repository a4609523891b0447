"""One record per mining OS: how to recognise it, what it is called, where its version is, whether m2p
converts it (or refuses it, with the sentence), how its miner is controlled and how its driver upgrades.

The record is the mining_os role's ``vars/<kind>.yml`` (in the installed collection): the role loads it
as its adapter (the miner's commands, watchdog, autostart units, protected configuration, OC, stats),
and detect (facts/mining_os.py), readiness, the ``m2p_facts`` plugin and the preflight and nvidia_driver
roles read the rest from here.  Adding a mining OS is one record, one sandbox flavour and one golden
case.  Plain Ubuntu/Debian are not mining OSes and have no record: ``vars/default.yml`` is their adapter
(the owner's own miner unit, if any).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from miner2provider.core import collection

# Not records: /etc/os-release's ID when no mining OS's markers are there.
PLAIN = {"ubuntu": "plain Ubuntu", "debian": "plain Debian"}
UNKNOWN = "unknown"
PLAIN_DRIVER_UPGRADE = {"ubuntu": "apt"}  # roles/nvidia_driver/tasks/upgrade_apt.yml; Debian: the owner's
NOT_RECORDS = {"default"}  # vars/default.yml: plain Linux's adapter
PREFIX = "mining_os_"
# How m2p stops and starts a miner:
#   verified: the OS's own stop/start commands, read in the OS's own scripts;
#   generic (unverified): the OS's own hold (a pause flag, its agent stopped) read in third-party copies
#   or user scripts, then the miner's processes ended by m2p itself (TERM, then KILL);
#   none: no adapter (k3s without time-share).
MINER_CONTROLS = ("verified", "generic (unverified)", "none")
# What each says to an owner: "verified" is the record's word for "read in the OS's own scripts", never "run on a
# real rig" (nothing of m2p's has run on a real mining OS yet; its tests run on sandbox containers).
CONTROLS_SHOWN = {"verified": "the OS's own commands (read in its scripts)",
                  "generic (unverified)": "generic (from third-party copies)", "none": "none"}
DRIVER_UPGRADES = ("hiveos", "apt", "none")


class RecordError(ValueError):
    """A record that cannot be read: a bug in the collection, said with its file."""


@dataclass(frozen=True)
class VersionSource:
    line: str  # the probe's line key (``dpkg`` in ``dpkg hive 0.6-229``)
    strip: str = ""  # a prefix to cut from its value
    after: str = ""  # keep what follows this separator only


@dataclass(frozen=True)
class Refusal:
    code: str  # readiness code (stable; playbooks and tests read it)
    sentence: str  # ``{os}``: the OS's label and version

    def said(self, os_name: str) -> str:
        return self.sentence.replace("{os}", os_name)


@dataclass(frozen=True)
class OsRecord:
    kind: str
    label: str
    order: int  # detection order: the most specific markers first
    markers_all: tuple[str, ...] = ()  # recognised when all of these exist
    markers_any: tuple[str, ...] = ()  # or any of these
    markers_seen: tuple[str, ...] = ()  # probed and shown, decide nothing
    disk_label: str = ""  # or a partition with this label (/dev/disk/by-label)
    python_module_globs: tuple[str, ...] = ()  # or one of these folders
    version_probes: tuple[str, ...] = ()  # shell lines that print ``<key> <value>``
    version_from: tuple[VersionSource, ...] = ()  # the first that has a value
    version_suffix: tuple[str, str] | None = None  # (line key, joiner)
    miner_control: str = "none"
    refusal: Refusal | None = None
    driver_upgrade: str = "none"

    @property
    def markers(self) -> tuple[str, ...]:
        return (*self.markers_all, *self.markers_any, *self.markers_seen)

    @property
    def has_adapter(self) -> bool:
        return self.miner_control != "none"

    def matches(self, markers: set[str], info: Mapping[str, str]) -> bool:
        return bool((self.markers_all and set(self.markers_all) <= markers)
                    or markers & set(self.markers_any)
                    or (self.disk_label and info.get("label") == self.disk_label)
                    or (self.python_module_globs and info.get("module", "").endswith(self._module_tail())))

    def _module_tail(self) -> str:
        return "/" + self.python_module_globs[0].rsplit("/", 1)[-1]

    def version(self, info: Mapping[str, str]) -> str:
        value = ""
        for source in self.version_from:
            value = info.get(source.line, "")
            if source.strip and value.startswith(source.strip):
                value = value[len(source.strip):]
            if source.after:
                value = value.partition(source.after)[2].strip("\"'")
            if value:
                break
        if value and self.version_suffix and info.get(self.version_suffix[0]):
            value = f"{value}{self.version_suffix[1]}{info[self.version_suffix[0]]}"
        return value


@functools.cache  # records() and by_kind() ask for it for every rig's facts and findings: find the collection once
def folder() -> Path:
    return collection.root() / "roles" / "mining_os" / "vars"


def records(where: Path | None = None) -> tuple[OsRecord, ...]:
    """Every mining OS's record, in detection order."""
    return _load(where or folder())


@functools.cache
def _load(where: Path) -> tuple[OsRecord, ...]:
    found = [parse(path.stem, yaml.safe_load(path.read_text()) or {}, str(path))
             for path in sorted(where.glob("*.yml")) if path.stem not in NOT_RECORDS]
    return tuple(sorted(found, key=lambda r: (r.order, r.kind)))


def by_kind(kind: str, where: Path | None = None) -> OsRecord | None:
    return _index(records(where)).get(kind)


@functools.cache
def _index(found: tuple[OsRecord, ...]) -> dict[str, OsRecord]:
    return {r.kind: r for r in found}


def parse(kind: str, doc: Mapping[str, Any], where: str) -> OsRecord:
    """The record in a vars file (its ``mining_os_*`` keys; the rest of the adapter is the role's)."""
    raw = {k[len(PREFIX):]: v for k, v in doc.items() if isinstance(k, str) and k.startswith(PREFIX)}
    try:
        suffix = raw.get("version_suffix")
        refusal = raw.get("refusal")
        record = OsRecord(
            kind=kind, label=str(raw["label"]), order=int(raw["detect_order"]),
            markers_all=_paths(raw.get("markers_all")), markers_any=_paths(raw.get("markers_any")),
            markers_seen=_paths(raw.get("markers_seen")), disk_label=str(raw.get("disk_label") or ""),
            python_module_globs=_paths(raw.get("python_module_globs")),
            version_probes=tuple(str(p) for p in raw.get("version_probes") or ()),
            version_from=tuple(VersionSource(**s) for s in raw.get("version_from") or ()),
            version_suffix=(str(suffix["line"]), str(suffix["joiner"])) if suffix else None,
            miner_control=str(raw.get("miner_control", "none")),
            refusal=Refusal(str(refusal["code"]), " ".join(str(refusal["sentence"]).split())) if refusal else None,
            driver_upgrade=str(raw.get("driver_upgrade", "none")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{where}: not a mining-OS record ({type(exc).__name__}: {exc})") from None
    if not (record.markers_all or record.markers_any or record.disk_label or record.python_module_globs):
        raise RecordError(f"{where}: a record needs markers, a disk label or a Python module to be recognised by")
    if record.miner_control not in MINER_CONTROLS or record.driver_upgrade not in DRIVER_UPGRADES:
        raise RecordError(f"{where}: miner_control is one of {MINER_CONTROLS}, driver_upgrade one of "
                          f"{DRIVER_UPGRADES}")
    return record


def _paths(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(p, str) and p.startswith("/") for p in value):
        raise ValueError(f"a list of absolute paths, not {value!r}")
    return tuple(value)
