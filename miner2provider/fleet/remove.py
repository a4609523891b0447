"""``m2p remove``: forget rigs that are gone for good (dead, sold, re-imaged under another name).

Nothing is asked of the rig itself: its k3s server deletes what the rig left there (the
``forget`` playbook, every task delegated to the server: the agent's manifest, token Secret,
ServiceAccount and RBAC, its Node and k3s's node-password secret), then OpenSSH's own
``ssh-keygen -R`` drops the rig's host keys from the known_hosts file, so a replacement under
the same address is asked about as a new machine instead of refused as an impostor.
A k3s server is refused: its cluster would go with it.  In a farm across sites, the hub drops the rig's WireGuard
peer (fleet/sites.py's drop_peers).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from miner2provider.core import collection
from miner2provider.core.inventory import Host
from miner2provider.detect.ssh import SshOptions, known_hosts_name
from miner2provider.fleet import sites
from miner2provider.fleet.pipeline import RigOutcome, fleet_role_vars, outcome_of
from miner2provider.fleet.runner import Event, run_playbook


def remove_rigs(hosts: list[Host], fleet: list[Host], opts: SshOptions, *,
                on_event: Callable[[Event], None] | None = None,
                keep_artifacts: Path | None = None) -> list[RigOutcome]:
    derived = fleet_role_vars(fleet)
    outcomes: dict[str, RigOutcome] = {}
    on_server: list[Host] = []
    for host in hosts:
        own = derived[host.name]
        server = own.get("k3s_agent_server_host") or own.get("timeshare_agent_server_host") or ""
        if "k3s_server" in host.groups:
            outcomes[host.name] = RigOutcome(host.name, "failed", message=(
                f"{host.name} is a k3s server: its cluster would go with it; revert it, or make another "
                "rig the server first"))
        elif server and server != host.name:
            on_server.append(host)
    if on_server:
        run = run_playbook(collection.playbook("forget"), fleet, role_vars=derived, forks=opts.pool_size,
                           known_hosts=opts.known_hosts, on_event=on_event, keep_artifacts=keep_artifacts,
                           limit=[h.name for h in on_server])
        for host in on_server:
            outcomes[host.name] = outcome_of(host.name, run, note="nothing of it was left on its server")
    # A farm across sites: the hub forgets their peers, so a key gone for good keeps no way into the farm.
    peers = sites.drop_peers(fleet, [h for h in hosts if not (h.name in outcomes and outcomes[h.name].failed)], opts,
                             on_event=on_event, keep_artifacts=keep_artifacts)
    for host in hosts:
        outcome = outcomes.get(host.name) or RigOutcome(host.name, "converged", message="it has no k3s server")
        if host.name in peers:
            outcome = _joined(outcome, peers[host.name])
        if not outcome.failed:
            forgotten = forget_host_key(host, opts.known_hosts)
            outcome = RigOutcome(outcome.name, "changed" if forgotten else outcome.result,
                                 outcome.changed + int(bool(forgotten)),
                                 "; ".join(m for m in (outcome.message, forgotten) if m), outcome.tasks)
        outcomes[host.name] = outcome
    return [outcomes[h.name] for h in hosts]


def _joined(first: RigOutcome, then: RigOutcome) -> RigOutcome:
    """Two steps' outcomes on one rig as one: failed if either failed, changed if either changed."""
    result = next((r for r in ("failed", "changed") if r in (first.result, then.result)), first.result)
    return RigOutcome(first.name, result, first.changed + then.changed,
                      "; ".join(m for m in (first.message, then.message) if m), first.tasks + then.tasks)


def forget_host_key(host: Host, known_hosts: Path) -> str:
    """Drop ``host``'s keys from ``known_hosts`` (ssh-keygen keeps the old file as ``.old``);
    returns what was done, empty when there was nothing to drop."""
    name = known_hosts_name(host)
    keygen = shutil.which("ssh-keygen")
    if not known_hosts.is_file() or keygen is None:
        return ""
    found = subprocess.run([keygen, "-F", name, "-f", str(known_hosts)], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        return ""
    dropped = subprocess.run([keygen, "-R", name, "-f", str(known_hosts)], capture_output=True, text=True,
                             check=False)
    if dropped.returncode != 0:
        return f"host key of {name} NOT dropped from {known_hosts}: {dropped.stderr.strip()}"
    return f"host key of {name} dropped from {known_hosts}"
