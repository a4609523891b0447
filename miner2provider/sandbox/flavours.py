"""Rig flavours: small overlays that give a sandbox rig a mining OS's layout.

STAND-INS.  A flavour is data kept in the repo (``flavours/<name>/``): a ``root/``
tree laid over the base, plus ``flavour.yml`` naming what cannot be a plain file
(login users, dpkg status entries).  The files mimic the markers, configs and
miner-control commands that ``shared/reference/mining-os.md`` documents for the real
OS; they are not the real OS, and say so in their headers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from miner2provider.errors import SandboxError

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


def pristine_sha256(flavour: str, path: str) -> str:
    """sha256 of a file as the flavour lays it on a rig (``/hive-config/rig.conf``): the tests
    prove a rig's copy is still byte-identical (m2p never edits a mining OS's config)."""
    return hashlib.sha256((FLAVOURS_DIR / flavour / "root" / path.lstrip("/")).read_bytes()).hexdigest()


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
