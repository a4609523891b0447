"""``m2p sites apply|remove``: the WireGuard tunnels of a farm across sites (plan: tunnel.py; role: tunnel).

Two runs of the ``tunnel`` playbook, because a member's key is made on the member and never leaves it:

1. every member makes its key pair (a second apply finds it and changes nothing);
2. m2p reads each member's public key (``PUBLIC_KEY``, 0644), writes every member's configuration from the plan,
   and the members run their tunnels.

A member whose key cannot be read (it did not answer, or ``--check`` made none) gets no configuration, and the
hub no peer for it: the others go on.  This reaches members the controller can reach today (directly, or through
``m2p_jump_host``); ``m2p join`` for a member behind NAT comes later (docs/sites.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from miner2provider.core import collection
from miner2provider.core.errors import UsageError
from miner2provider.core.inventory import Host
from miner2provider.detect.facts.tunnel import PUBLIC_KEY
from miner2provider.detect.ssh import SshOptions, fan_out
from miner2provider.detect.survey import detect
from miner2provider.fleet import tunnel
from miner2provider.fleet.pipeline import RigOutcome, outcome_of
from miner2provider.fleet.runner import Event, run_playbook


def plan_of(hosts: list[Host]) -> tunnel.TunnelPlan:
    found = tunnel.plan(hosts)
    if found is None:
        raise UsageError("no rig of the inventory names an m2p_site: it is one LAN, with no tunnel to set up "
                         "(docs/sites.md)")
    return found


def apply(hosts: list[Host], opts: SshOptions, *, check: bool = False, on_event: Callable[[Event], None] | None = None,
          keep_artifacts: Path | None = None) -> list[RigOutcome]:
    found = plan_of(hosts)
    # One SSH look first: it learns new host keys (--accept-new) as every m2p command does before Ansible runs,
    # and a member that does not answer is said once and left out of both runs.
    _, _, silent = public_keys(hosts, opts)
    live = [h for h in hosts if h.name not in silent]
    base = {h.name: _member_vars(found, h.name) for h in live}
    keys_run = run_playbook(collection.playbook("tunnel"), live, role_vars=base, check=check,
                            known_hosts=opts.known_hosts, on_event=on_event, keep_artifacts=keep_artifacts)
    keyed = {h.name: outcome_of(h.name, keys_run, check=check, why="key pair made") for h in live}
    keyed.update({name: RigOutcome(name, "unreachable", message=error) for name, error in silent.items()})
    keys, odd, _ = public_keys([h for h in live if keyed[h.name].result != "failed"], opts)
    if found.hub.name not in keys:
        why = ("the hub's key is not made yet (--check makes none)" if check
               else f"the hub {found.hub.name}'s public key could not be read")
        return [o if o.failed else RigOutcome(o.name, "pending" if check else "failed", o.changed, why)
                for o in (keyed[h.name] for h in hosts)]
    ready = [h for h in live if h.name in keys]
    configured = {h.name: {**base[h.name], "tunnel_config": tunnel.wg_config(found, h.name, keys)} for h in ready}
    run = run_playbook(collection.playbook("tunnel"), ready, role_vars=configured, check=check,
                       known_hosts=opts.known_hosts, on_event=on_event, keep_artifacts=keep_artifacts)
    out = []
    for h in hosts:
        first = keyed[h.name]
        if h.name not in keys:
            said = (f"{PUBLIC_KEY} is not a WireGuard public key" if h.name in odd
                    else f"its public key ({PUBLIC_KEY}) could not be read")
            out.append(first if first.failed else
                       RigOutcome(h.name, "failed", first.changed, f"{said}: no tunnel for it this run"))
            continue
        second = outcome_of(h.name, run, check=check, why="tunnel set up or updated")
        out.append(second if second.failed or not first.changed else
                   RigOutcome(h.name, "pending" if check else "changed", first.changed + second.changed,
                              second.message or first.message, first.tasks + second.tasks))
    return out


def remove(hosts: list[Host], opts: SshOptions, *, check: bool = False,
           on_event: Callable[[Event], None] | None = None, keep_artifacts: Path | None = None) -> list[RigOutcome]:
    plan_of(hosts)
    # The probe first (it learns host keys too): a member that does not answer is said, and one whose k3s runs
    # on the tunnel is refused, since taking the tunnel off would cut its node, and any lease on it, off the
    # cluster.  The others go on.
    refused: dict[str, RigOutcome] = {}
    for report in detect(hosts, opts):
        if not report.ok or report.facts is None:
            refused[report.name] = RigOutcome(report.name, "unreachable", message=report.error or "no answer")
        elif report.facts.installed.k3s_service:
            refused[report.name] = RigOutcome(report.name, "failed", message=(
                f"{report.name}: {report.facts.installed.k3s_service} runs on its tunnel: `m2p revert` it first "
                "(the tunnel's loss would cut its node and any lease on it off the cluster); not touched"))
    live = [h for h in hosts if h.name not in refused]
    run = run_playbook(collection.playbook("tunnel"), live, role_vars={h.name: {"tunnel_state": "absent"}
                                                                         for h in live},
                       check=check, known_hosts=opts.known_hosts, on_event=on_event, keep_artifacts=keep_artifacts)
    return [refused.get(h.name) or outcome_of(h.name, run, check=check, why="tunnel and keys removed",
                                              note="no tunnel was there")
            for h in hosts]


def public_keys(hosts: list[Host], opts: SshOptions) -> tuple[dict[str, str], set[str], dict[str, str]]:
    """member -> its public key, for those that answered with one; the members whose file holds something else
    (a rig's root can write anything there: it never reaches another member's configuration); and member -> why,
    for those that did not answer."""
    found, odd, silent = {}, set(), {}
    for result in fan_out(hosts, f"cat {PUBLIC_KEY} 2>/dev/null || true\n", opts):
        key = (result.stdout or "").strip()
        if not result.ok:
            silent[result.host.name] = result.error or "no answer"
        elif tunnel.is_public_key(key):
            found[result.host.name] = key
        elif key:
            odd.add(result.host.name)
    return found, odd, silent


def _member_vars(found: tunnel.TunnelPlan, name: str) -> dict[str, Any]:
    member = found.member(name)
    return {"tunnel_state": "present", "tunnel_address": f"{member.address}/{found.network.prefixlen}",
            "tunnel_mtu": found.mtu, "tunnel_config": "", "tunnel_forward": name == found.hub.name}
