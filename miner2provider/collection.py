"""Where the Ansible collection m2p.rigs (roles, playbooks, plugins) is installed.

The miner2provider wheel installs it as ``site-packages/ansible_collections/m2p/rigs``; a
development checkout has it at ``ansible_collections/m2p/rigs`` (an editable install maps the
same name there).  m2p asks Python's import system where it is, never a path relative to
this file, so an installed m2p and a checkout behave the same.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

import yaml

from miner2provider.errors import M2PError

NAMESPACE, NAME = "m2p", "rigs"
FQCN = f"{NAMESPACE}.{NAME}"


@functools.cache
def root() -> Path:
    """The collection's folder (the one holding galaxy.yml)."""
    try:
        spec = importlib.util.find_spec(f"ansible_collections.{FQCN}")
    except ImportError:
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "galaxy.yml").is_file():
            return Path(location)
    raise M2PError(f"the Ansible collection {FQCN} is not installed beside m2p: reinstall miner2provider")


def collections_path() -> Path:
    """What ANSIBLE_COLLECTIONS_PATH names so that ansible finds m2p.rigs (the folder above ansible_collections)."""
    return root().parents[2]


def playbook(name: str) -> Path:
    return root() / "playbooks" / f"{name}.yml"


@functools.cache
def role_defaults(role: str) -> dict[str, Any]:
    """A role's defaults/main.yml, parsed once."""
    data = yaml.safe_load((root() / "roles" / role / "defaults" / "main.yml").read_text())
    return data if isinstance(data, dict) else {}
