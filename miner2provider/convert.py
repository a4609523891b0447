"""Convert, plan and revert a fleet: detect over SSH, then the playbook in batches.

1. The detect probe (one SSH round trip per rig) finds the rigs that cannot be reached
   or logged into; they fail alone and never reach Ansible.
2. The rest run ``playbooks/<name>.yml`` through ansible-runner, ``batch`` rigs at a time
   (the whole playbook per batch: a rolling conversion); once more than ``max_fail_pct``
   of the rigs tried so far failed, the remaining batches are not started.
No printing here: progress goes to ``on_event``, results come back as ``RigOutcome``s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miner2provider.bundle.manifest import Bundle
from miner2provider.detect import detect
from miner2provider.inventory import Host
from miner2provider.runner import ROOT, Event, run_playbook
from miner2provider.ssh import SshOptions

PLAYBOOKS = ROOT / "playbooks"


@dataclass(frozen=True)
class RigOutcome:
    name: str
    result: str  # converged | changed | pending | failed | unreachable | not-started
    changed: int = 0
    message: str = ""
    tasks: tuple[str, ...] = field(default=())  # the tasks that changed (plan: would change)

    @property
    def failed(self) -> bool:
        return self.result in {"failed", "unreachable", "not-started"}


def batches(hosts: list[Host], batch: str | None) -> list[list[Host]]:
    """``batch`` is N or N% of the rigs (at least 1); None: all at once."""
    if not batch:
        return [hosts] if hosts else []
    size = max(1, round(len(hosts) * int(batch[:-1]) / 100)) if batch.endswith("%") else int(batch)
    return [hosts[i:i + size] for i in range(0, len(hosts), size)]


def run_fleet(
    playbook: str,
    hosts: list[Host],
    opts: SshOptions,
    *,
    bundle: Bundle | None = None,
    check: bool = False,
    batch: str | None = None,
    max_fail_pct: int = 100,
    on_event: Callable[[Event], None] | None = None,
    keep_artifacts: Path | None = None,
) -> list[RigOutcome]:
    outcomes: dict[str, RigOutcome] = {}
    reachable: list[Host] = []
    for host, report in zip(hosts, detect(hosts, opts)):
        if report.ok:
            reachable.append(host)
        else:
            outcomes[host.name] = RigOutcome(host.name, "unreachable", message=report.error or "")
    # Servers first: agents in later batches join a server that is already up.
    reachable.sort(key=lambda h: "k3s_server" not in h.groups)
    extravars: dict[str, Any] = {}
    if bundle is not None:
        extravars["m2p_bundle_dir"] = str(bundle.root)
    tried = failed = 0
    for group in batches(reachable, batch):
        if tried and failed * 100 > max_fail_pct * tried:
            for host in group:
                outcomes[host.name] = RigOutcome(host.name, "not-started",
                                                 message=f"stopped: {failed} of {tried} rigs failed")
            continue
        report = run_playbook(PLAYBOOKS / f"{playbook}.yml", reachable, extravars, check=check, diff=check,
                              forks=opts.pool_size, known_hosts=opts.known_hosts, on_event=on_event,
                              keep_artifacts=keep_artifacts, limit=[h.name for h in group])
        for host in group:
            stats = report.hosts.get(host.name)
            tasks = tuple(report.changed_tasks.get(host.name, ()))
            if stats is None or stats.failures or stats.unreachable or host.name in report.failures or not stats.ok:
                # No task ran at all (ok == 0): the playbook never reached the rig.
                message = report.failures.get(host.name) or f"the playbook did not run ({report.status}): {report.error}"
                outcome = RigOutcome(host.name, "failed", message=message)
            elif stats.changed:
                outcome = RigOutcome(host.name, "pending" if check else "changed", stats.changed, tasks=tasks)
            else:
                outcome = RigOutcome(host.name, "converged")
            outcomes[host.name] = outcome
            tried += 1
            failed += outcome.failed
    return [outcomes[h.name] for h in hosts]
