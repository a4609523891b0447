"""What convert would apply now, as one digest per rig, and whether a rig's fingerprint matches it.

A rig's fingerprint (written by the fingerprint role, read by the detect probe) records the digest
of the inputs its last convert applied; a rig whose digest, GPUs and watched state all match is
converged and the playbook skips it (detect/drift.py judges the match, purely).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import miner2provider
from miner2provider import __version__
from miner2provider.core import collection
from miner2provider.core.errors import M2PError
from miner2provider.core.inventory import Host
from miner2provider.detect.drift import reasons_to_run
from miner2provider.detect.report import RigReport
from miner2provider.fleet.bundle.manifest import Bundle


def applied_code() -> dict[str, Path]:
    """What decides the rigs' end state (a change here makes every fingerprint stale): the whole
    installed collection, and the Python the action plugins run on the controller."""
    package = Path(miner2provider.__file__).parent
    return {collection.FQCN: collection.root(), "facts": package / "detect" / "facts",
            "market": package / "market"}


def code_digest(bundle: Bundle | None) -> str:
    """sha256 over m2p's version, every file of ``applied_code()`` and the bundle's manifest."""
    digest = hashlib.sha256(f"m2p {__version__}\n".encode())
    for label, top in applied_code().items():
        files = sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        if not files:  # a digest without the roles would call every rig converged
            raise M2PError(f"{label}: no files under {top}; reinstall miner2provider")
        for path in files:
            digest.update(f"{label}/{path.relative_to(top).as_posix()}\n".encode())
            digest.update(path.read_bytes())
    digest.update(f"bundle {bundle.digest if bundle else 'online'}\n".encode())
    return digest.hexdigest()


def inputs_digest(code: str, settings: Mapping[str, Any], role_vars: Mapping[str, Any], groups: Iterable[str]) -> str:
    """sha256 over the code digest, the rig's inventory variables, the role variables m2p derived for
    it (which carry what other rigs' settings mean for it) and its groups.  Connection variables
    (``ansible_*``) decide how to reach the rig, not what it becomes; secrets never enter."""
    doc = {
        "code": code,
        "settings": {k: v for k, v in settings.items() if not k.startswith("ansible_")},
        "role_vars": dict(role_vars),
        "groups": sorted(set(groups)),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def expected_inputs(hosts: list[Host], derived: dict[str, dict[str, Any]], bundle: Bundle | None) -> dict[str, str]:
    code = code_digest(bundle)
    return {h.name: inputs_digest(code, h.vars, derived[h.name], h.groups) for h in hosts}


def reasons_to_run_on(report: RigReport, inputs: str) -> tuple[str, ...]:
    assert report.facts is not None  # reachable rigs have facts
    return reasons_to_run(report.facts.fingerprint, report.facts.gpus, inputs)
