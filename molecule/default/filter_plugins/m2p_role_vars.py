"""Test glue: the role variables m2p's runner would hand each rig, for Molecule's inventory.

m2p computes them with miner2provider.fleet.role_vars (pure) and writes them into the inventory it
generates for ansible-runner; Molecule has its own inventory, so role_vars.yml writes them
beside it through this filter.  Nothing here decides a value: it only adapts hostvars.
"""

from __future__ import annotations

from typing import Any

from miner2provider.core import collection
from miner2provider.fleet.pipeline import derive_role_vars
from miner2provider.fleet.role_vars import Rig


def m2p_role_vars(hostnames: list[str], hostvars: Any) -> dict[str, dict[str, Any]]:
    names = set(collection.role_options())
    rigs = []
    for name in hostnames:
        # Untemplated: a setting may be a template that needs the play's context (hostvars of
        # another rig); it goes on into the role variable as it is and is templated where it is used.
        hv = hostvars.raw_get(name)
        settings = {k: v for k, v in hv.items() if k.startswith("m2p_") or k in names}
        rigs.append(Rig(name, str(hv.get("ansible_host", name)), tuple(hv["group_names"]), settings))
    return derive_role_vars(rigs)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"m2p_role_vars": m2p_role_vars}
