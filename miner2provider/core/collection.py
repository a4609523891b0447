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

from miner2provider.core.errors import M2PError

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


@functools.cache
def role_options() -> dict[str, dict[str, Any]]:
    """Every role variable's entry in its role's meta/argument_specs.yml (entry point main): type,
    description, default, choices.  Role variables carry their role's name, so one mapping holds all."""
    options: dict[str, dict[str, Any]] = {}
    for specs in sorted((root() / "roles").glob("*/meta/argument_specs.yml")):
        data = yaml.safe_load(specs.read_text()) or {}
        options.update(data.get("argument_specs", {}).get("main", {}).get("options", {}))
    return options


@functools.cache
def role_names() -> tuple[str, ...]:
    """The collection's roles, longest name first (``k3s_agent_x`` is looked up as role k3s's)."""
    names = (p.name for p in (root() / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())
    return tuple(sorted(names, key=lambda n: (-len(n), n)))
