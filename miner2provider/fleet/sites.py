"""``m2p sites apply`` and ``m2p sites remove``: the WireGuard tunnels of a farm across sites (plan: tunnel.py;
role: tunnel).

Two runs of the ``tunnel`` playbook, because a member's key is made on the member and never leaves it:

1. every member makes its key pair (a second apply finds it and changes nothing);
2. m2p reads each member's public key (``PUBLIC_KEY``, 0644), writes every member's configuration from the plan,
   and the members run their tunnels.

A member whose key cannot be read (it did not answer, or ``--check`` made none) gets no configuration, and the
hub no peer for it: the others go on.  A member behind NAT that the controller cannot reach before its tunnel is
up joins from its site (fleet/join.py): the hub gets its key from the inventory (``m2p_tunnel_public_key``), and
once it dials in, it is reached through the hub (``m2p_jump_host``) like any member.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from miner2provider.core import collection
from miner2provider.core.errors import UsageError
from miner2provider.core.inventory import Host
from miner2provider.detect.facts.base import Output
from miner2provider.detect.facts.tunnel import PUBLIC_KEY, TunnelFact
from miner2provider.detect.ssh import SshOptions, fan_out
from miner2provider.detect.survey import detect
from miner2provider.fleet import tunnel
from miner2provider.fleet.pipeline import RigOutcome, outcome_of
from miner2provider.fleet.runner import Event, RunReport, run_playbook

JOIN_WAIT_S = tunnel.KEEPALIVE_S + 15.0  # a joined rig's next handshake: its keepalive, a retry (5 s), margin


def plan_of(hosts: list[Host]) -> tunnel.TunnelPlan:
    found = tunnel.plan(hosts)
    if found is None:
        raise UsageError("no rig of the inventory names an m2p_site: it is one LAN, with no tunnel to set up "
                         "(docs/sites.md)")
    return found


def apply(hosts: list[Host], opts: SshOptions, *, check: bool = False, on_event: Callable[[Event], None] | None = None,
          keep_artifacts: Path | None = None, join_wait_s: float = JOIN_WAIT_S) -> list[RigOutcome]:
    found = plan_of(hosts)
    declared = tunnel.declared_keys(hosts)
    # One SSH look first: it learns new host keys (--accept-new) as every m2p command does before Ansible runs,
    # and a member that does not answer is said once and left out of both runs.
    _, _, silent = public_keys(hosts, opts)
    live = [h for h in hosts if h.name not in silent]
    base = {h.name: _member_vars(found, h.name) for h in hosts}
    keys_run = run_playbook(collection.playbook("tunnel"), live, role_vars={h.name: base[h.name] for h in live},
                            check=check, known_hosts=opts.known_hosts, on_event=on_event, keep_artifacts=keep_artifacts)
    keyed = {h.name: outcome_of(h.name, keys_run, check=check, why="key pair made") for h in live}
    keyed.update({name: RigOutcome(name, "unreachable", message=error) for name, error in silent.items()})
    keys, odd, _ = public_keys([h for h in live if keyed[h.name].result != "failed"], opts)
    if found.hub.name not in keys:
        why = ("the hub's key is not made yet (--check makes none)" if check
               else f"the hub {found.hub.name}'s public key could not be read")
        return [o if o.failed else RigOutcome(o.name, "pending" if check else "failed", o.changed, why)
                for o in (keyed[h.name] for h in hosts)]
    # A rig that joined from its site: the owner's word (its key in the inventory) gives the hub its peer.
    differs = {name for name, key in declared.items() if name in keys and keys[name] != key}
    peers = {**keys, **{name: key for name, key in declared.items() if name != found.hub.name}}
    # A rig's root can write any key to its file, another member's too: one key, one member.
    hub_host = next(h for h in hosts if h.name == found.hub.name)
    shared = shared_keys(found, peers, declared,
                         _hub_peers(hub_host, opts) if len(set(peers.values())) < len(peers) else {})
    peers = {name: key for name, key in peers.items() if name not in shared}
    ready = [h for h in live if h.name in keys and h.name not in differs and h.name not in shared]
    run = _configure(found, ready, peers, base, opts, check, on_event, keep_artifacts)
    # Joined rigs that did not answer: the hub has their peer now, so they answer through it once they dial in.
    waiting = [h for h in hosts if h.name in silent and h.name in declared]
    late_keys = {} if check or not waiting else _answering(waiting, opts, join_wait_s)
    late = [h for h in waiting if late_keys.get(h.name) == declared[h.name]]
    late_run = _configure(found, late, peers, base, opts, check, on_event, keep_artifacts) if late else None
    out = []
    for h in hosts:
        first = keyed[h.name]
        if h.name in shared:
            out.append(RigOutcome(h.name, "failed", first.changed, shared[h.name]))
        elif h.name in differs or (h.name in late_keys and h.name not in {r.name for r in late}):
            out.append(RigOutcome(h.name, "failed", first.changed, (
                f"its public key ({PUBLIC_KEY}) is not the m2p_tunnel_public_key of {h.where}: did it join again? "
                "Put the key it printed in the inventory (the hub keeps the old one until then)")))
        elif late_run is not None and h in late:
            out.append(outcome_of(h.name, late_run, check=check, why="tunnel set up or updated",
                                  note="joined: reached through the hub"))
        elif h.name in silent and h.name in declared:
            out.append(RigOutcome(h.name, "unreachable", message=(
                f"its peer is on the hub (m2p_tunnel_public_key), but it did not answer through the tunnel in "
                f"{join_wait_s:.0f} s: was `m2p join` run at its site, and is its ansible_host its tunnel address "
                f"{found.member(h.name).address} with m2p_jump_host {found.hub.name}? ({first.message})")))
        elif h.name not in keys:
            said = (f"{PUBLIC_KEY} is not a WireGuard public key" if h.name in odd
                    else f"its public key ({PUBLIC_KEY}) could not be read")
            out.append(first if first.failed else
                       RigOutcome(h.name, "failed", first.changed, f"{said}: no tunnel for it this run"))
        else:
            second = outcome_of(h.name, run, check=check, why="tunnel set up or updated")
            out.append(second if second.failed or not first.changed else
                       RigOutcome(h.name, "pending" if check else "changed", first.changed + second.changed,
                                  second.message or first.message, first.tasks + second.tasks))
    return out


def shared_keys(found: tunnel.TunnelPlan, keys: dict[str, str], declared: dict[str, str],
                hub_peers: dict[str, str]) -> dict[str, str]:
    """member -> why it gets no tunnel, for members whose public key another member has too (``keys``: member ->
    its key, read or declared).  Two [Peer] sections with one key are one peer to wg(8): whoever holds the key would
    be allowed the other member's address.  So a key stays with the one
    member that has a claim to it: the hub, the member whose inventory line declares it (the owner's word), or the
    member at whose tunnel address the hub has it now (``hub_peers``: address -> key, what ``wg show`` lists);
    the others sharing it are refused.  A rig that copies another's key so only takes itself off the farm."""
    holders: dict[str, list[str]] = {}
    for name, key in keys.items():
        holders.setdefault(key, []).append(name)
    refused = {}
    for key, names in holders.items():
        if len(names) < 2:
            continue
        claims = [n for n in names if n == found.hub.name] or [n for n in names if declared.get(n) == key] or [
            n for n in names if hub_peers.get(str(found.member(n).address)) == key]
        keeper = claims[0] if len(claims) == 1 else None
        for name in names:
            if name != keeper:
                others = ", ".join(n for n in names if n != name)
                refused[name] = (f"its WireGuard public key ({PUBLIC_KEY}) is {others}'s too" if keeper is None else
                                 f"its WireGuard public key ({PUBLIC_KEY}) is {keeper}'s, whose key it stays") + (
                    ": no tunnel for it this run (a member's key must be its own: was its key file copied?)")
    return refused


def _hub_peers(hub: Host, opts: SshOptions) -> dict[str, str]:
    """tunnel address -> public key, as the hub has its peers now; {} when it does not say (sudo -n wg refused)."""
    (result,) = fan_out([hub], TunnelFact.command + "\n", opts)
    if not result.ok:
        return {}
    now = TunnelFact.parse(Output(result.stdout, result.rc or 0))
    return {p.address: p.peer for p in now.handshakes if p.address}


def _configure(found: tunnel.TunnelPlan, members: list[Host], peers: dict[str, str], base: dict[str, dict[str, Any]],
               opts: SshOptions, check: bool, on_event: Callable[[Event], None] | None,
               keep_artifacts: Path | None) -> RunReport:
    configured = {h.name: {**base[h.name], "tunnel_config": tunnel.wg_config(found, h.name, peers)} for h in members}
    return run_playbook(collection.playbook("tunnel"), members, role_vars=configured, check=check,
                        known_hosts=opts.known_hosts, on_event=on_event, keep_artifacts=keep_artifacts)


def _answering(hosts: list[Host], opts: SshOptions, wait_s: float) -> dict[str, str]:
    """member -> the key it reads out, for joined members that answer within ``wait_s`` (a rig retries its
    handshake at least every keepalive, 25 s, once the hub knows it)."""
    deadline = time.monotonic() + wait_s
    quick = dataclasses.replace(opts, connect_timeout=min(opts.connect_timeout, 5.0))
    answered: dict[str, str] = {}
    while True:
        keys, _, silent = public_keys([h for h in hosts if h.name not in answered], quick)
        answered.update(keys)
        if not silent or time.monotonic() >= deadline:
            return answered
        time.sleep(2)


def remove(hosts: list[Host], opts: SshOptions, *, check: bool = False,
           on_event: Callable[[Event], None] | None = None, keep_artifacts: Path | None = None) -> list[RigOutcome]:
    found = plan_of(hosts)
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
    # A member reached through its own tunnel (it joined from its site) takes it off after its run, not during it,
    # and before the hub's run: the hub's tunnel carries that member's connection.
    through = [h for h in live if _in_tunnel(found, h.address)]
    runs = {}
    for group in (through, [h for h in live if h not in through]):
        if group:
            run = run_playbook(collection.playbook("tunnel"), group,
                               role_vars={h.name: {"tunnel_state": "absent", "tunnel_leaves_by_itself": h in through}
                                          for h in group},
                               check=check, known_hosts=opts.known_hosts, on_event=on_event,
                               keep_artifacts=keep_artifacts)
            runs.update({h.name: run for h in group})
    gone = ("tunnel and keys removed; it was reached through its tunnel, so m2p can no longer reach it: run "
            "`m2p join` at its site to bring it back, or remove it from the inventory")
    return [refused.get(h.name) or outcome_of(h.name, runs[h.name], check=check, note="no tunnel was there",
                                              why=gone if h in through else "tunnel and keys removed")
            for h in hosts]


def drop_peers(hosts: list[Host], gone: list[Host], opts: SshOptions, *,
               on_event: Callable[[Event], None] | None = None,
               keep_artifacts: Path | None = None) -> dict[str, RigOutcome]:
    """``m2p remove`` of rigs in a farm across sites: the hub forgets their peers (a key that is gone for good
    must not keep a way into the farm's network).  The hub's other peers stay as the hub has them now, so a site
    that is down at the time keeps its peers too.  rig -> what happened, for the rigs that were members."""
    found = tunnel.plan(hosts)
    members = {m.name: m for m in found.rigs} if found is not None else {}
    leaving = [h for h in gone if h.name in members]
    if found is None or not leaving:
        return {}
    hub = next(h for h in hosts if h.name == found.hub.name)
    (result,) = fan_out([hub], TunnelFact.command + "\n", opts)
    if not result.ok:
        return {h.name: RigOutcome(h.name, "failed", message=(
            f"its peer is still on the hub {hub.name}, which did not answer ({result.error}): run `m2p remove` "
            "again once it does")) for h in leaving}
    now = TunnelFact.parse(Output(result.stdout, result.rc or 0))
    by_address = {str(m.address): m.name for m in found.rigs}
    peers = {by_address[p.address]: p.peer for p in now.handshakes if p.address in by_address}
    dropping = {h.name for h in leaving if h.name in peers}
    if not dropping:
        # The hub's peers need root to read (sudo -n): a hub that lists none may be one that did not let m2p look.
        none = (f"no peer of it on the hub {hub.name}" if now.handshakes else
                f"the hub {hub.name} lists no peers (or its login user may not run `sudo -n wg`): check with "
                "`wg show` there")
        return {h.name: RigOutcome(h.name, "converged", message=none) for h in leaving}
    kept = {name: key for name, key in peers.items() if name not in dropping}
    garbled = sorted(name for name, key in kept.items() if not tunnel.is_public_key(key))
    if garbled:  # the hub's own answer, not trusted: a configuration written from it could cut every peer off
        return {h.name: RigOutcome(h.name, "failed", message=(
            f"its peer is still on the hub {hub.name}: the hub lists {', '.join(garbled)} with a key that is not a "
            "WireGuard public key; nothing changed there (check `wg show` on the hub)")) for h in leaving}
    run = _configure(found, [hub], kept, {hub.name: _member_vars(found, hub.name)},
                     opts, False, on_event, keep_artifacts)
    hub_outcome = outcome_of(hub.name, run, why="peer dropped")
    return {h.name: (RigOutcome(h.name, "failed", message=f"its peer is still on the hub {hub.name}: "
                                                            f"{hub_outcome.message}") if hub_outcome.failed
                     else RigOutcome(h.name, "changed", 1, f"its peer dropped from the hub {hub.name}")
                     if h.name in dropping else
                     RigOutcome(h.name, "converged", message=f"no peer of it on the hub {hub.name}"))
            for h in leaving}


def _in_tunnel(found: tunnel.TunnelPlan, address: str) -> bool:
    try:
        return ipaddress.IPv4Address(address) in found.network
    except ValueError:  # a DNS name: reached some other way
        return False


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
            "tunnel_mtu": found.mtu, "tunnel_config": "", "tunnel_forward": name == found.hub.name,
            "tunnel_network": str(found.network), "tunnel_hub_address": str(found.hub.address)}
