"""Rig flavours: small overlays that give a sandbox rig a mining OS's layout.

STAND-INS.  A flavour is data kept in the repo (``flavours/<name>/``): a ``root/``
tree laid over the base, plus ``flavour.yml`` naming what cannot be a plain file
(login users, dpkg status entries).  The files mimic the markers, configs and
miner-control commands that each OS's own scripts define for the real
OS; they are not the real OS, and say so in their headers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from m2p_sandbox.errors import SandboxError

FLAVOURS_DIR = Path(__file__).parent / "flavours"


@dataclass(frozen=True)
class User:
    name: str
    password: str | None = None
    sudo: bool = False


@dataclass(frozen=True)
class Flavour:
    name: str
    description: str
    root: Path
    users: tuple[User, ...] = ()
    dpkg_status: tuple[Path, ...] = field(default=())


# The mining OS's own configuration on a rig of each flavour (a folder or a file): m2p never edits it.
# mmpOS's is not documented (its stand-in has none); RaveOS's neither.
MINING_CONFIG = {"hiveos": "/hive-config", "msos": "/media/storage", "smos": "/root/config.txt",
                 "nhos": "/mnt/nhos", "ethos": "/home/ethos"}


def pristine_config(flavour: str) -> dict[str, str]:
    """Path on the rig -> sha256 of every file of the flavour's mining configuration, as the
    flavour lays it down ({} for a flavour without one)."""
    if flavour not in MINING_CONFIG:
        return {}
    root = FLAVOURS_DIR / flavour / "root"
    top = root / MINING_CONFIG[flavour].lstrip("/")
    files = [top] if top.is_file() else sorted(top.rglob("*"))
    return {f"/{p.relative_to(root)}": hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


def config_changes(host: Any, flavour: str) -> list[str]:
    """The files of the flavour's mining configuration that are no longer byte-identical on
    ``host`` (a testinfra host): the tests assert this is empty after every m2p run."""
    with host.sudo():
        return [path for path, sha in pristine_config(flavour).items()
                if not host.file(path).exists or host.file(path).sha256sum != sha]


# How a rig of each flavour mines: the unit that starts its miner at boot, and the command (as root) that exits 0
# while its miner runs (HiveOS: a miner window's miner-run loop, not the screen session, which a start with no
# miner set leaves holding only a bash; anchored, so that the shell running the check never matches itself).
MINING = {"hiveos": ("hive.service", "pgrep -f '^bash /hive/bin/miner-run '"),
          "smos": ("smos.service", "runuser -u miner -- screen -ls miner")}


def mining_problems(host: Any, flavour: str) -> list[str]:
    """What keeps a rig of ``flavour`` (a testinfra host) from mining as before m2p came: its config
    changed, its boot unit disabled, or its miner's screen session gone; empty when none."""
    unit, running = MINING[flavour]
    problems = [f"changed: {path}" for path in config_changes(host, flavour)]
    if not host.service(unit).is_enabled:
        problems.append(f"{unit} is not enabled")
    with host.sudo():
        if host.run(running).rc != 0:
            problems.append("no miner runs")
    return problems


def available() -> list[str]:
    return sorted(p.name for p in FLAVOURS_DIR.iterdir() if (p / "flavour.yml").is_file())


def load(name: str) -> Flavour:
    folder = FLAVOURS_DIR / name
    spec_file = folder / "flavour.yml"
    if not spec_file.is_file():
        raise SandboxError(f"unknown rig flavour {name!r}; known: {', '.join(available())}")
    spec = yaml.safe_load(spec_file.read_text()) or {}
    users = tuple(
        User(u["name"], u.get("password"), bool(u.get("sudo", False))) for u in spec.get("users", [])
    )
    dpkg = tuple(folder / rel for rel in spec.get("dpkg_status", []))
    return Flavour(name, spec.get("description", ""), folder / "root", users, dpkg)
