"""Convert, plan and revert a fleet: detect over SSH, then the playbook in batches.

Each rig goes screen -> guard -> fingerprint -> batch -> outcome:

1. Screen: the detect probe (one SSH round trip per rig) finds the rigs that cannot be reached
   or logged into; they fail alone and never reach Ansible.
2. Guard (guards.py): a k3s the run would break, or a running lease (unless ``--drain`` waits
   for it: drain.py), leaves the rig untouched with one sentence.
3. Fingerprint (fingerprint.py): for convert (and plan), the probe also read each rig's fingerprint: a rig whose
   fingerprint matches what would be applied now, with no drift, is converged and skipped
   (``full`` runs the playbook everywhere).  A no-op Ansible play costs seconds per rig;
   the probe costs one round trip.
4. Batch: the rest run the playbook ``m2p.rigs.<name>`` through ansible-runner, ``batch`` rigs at a time
   (the whole playbook per batch: a rolling conversion); once more than ``max_fail_pct``
   of the rigs tried so far failed, the remaining batches are not started.
No printing here: progress goes to ``on_event``, results come back as ``RigOutcome``s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from miner2provider.core import collection
from miner2provider.core.inventory import Host
from miner2provider.detect.report import RigReport, status_rows
from miner2provider.detect.ssh import SshOptions
from miner2provider.detect.survey import detect
from miner2provider.fleet import drain, fingerprint, guards, tunnel
from miner2provider.fleet.bundle.manifest import Bundle
from miner2provider.fleet.role_vars import Rig, RunInputs, role_vars
from miner2provider.fleet.runner import Event, RunReport, run_playbook
from miner2provider.rigside.status import Lease


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


@dataclass(frozen=True)
class RunOptions:
    """How a fleet run goes: the CLI's options for convert, plan, revert and schedule apply."""
    bundle: Bundle | None = None  # air-gapped: k3s and images from this bundle
    check: bool = False  # plan: Ansible's check mode, nothing changes
    batch: str | None = None  # N or N% of the rigs per run of the playbook; None: all at once
    max_fail_pct: int = 100  # no further batch once more than this share of the rigs tried failed
    on_event: Callable[[Event], None] | None = None
    keep_artifacts: Path | None = None
    full: bool = False  # run the playbook on converged rigs too
    run_inputs: RunInputs | None = None  # schedule apply's files
    drain_timeout_s: float | None = None  # --drain: wait this long for running leases to end


@dataclass(frozen=True)
class Triage:
    """What becomes of one rig before any playbook runs: an outcome already, its leases to guard,
    or a run of the playbook; ``note`` and ``reasons`` are said beside what it did."""
    outcome: RigOutcome | None = None
    leases: tuple[Lease, ...] = ()
    note: str = ""
    reasons: tuple[str, ...] = ()

    @property
    def runs(self) -> bool:
        return self.outcome is None and not self.leases


def run_fleet(playbook: str, hosts: list[Host], opts: SshOptions, how: RunOptions = RunOptions(),
              inventory_hosts: list[Host] | None = None) -> list[RigOutcome]:
    """Run ``playbook`` on ``hosts``, chosen from ``inventory_hosts`` (default: the same rigs), whose
    settings decide the role variables of every rig (role_vars.py)."""
    converting = playbook == "convert"  # revert always runs: it removes what any convert left
    if how.bundle is not None and converting:
        guards.check_bundle_images(how.bundle, hosts)
    fleet = inventory_hosts or hosts
    derived = fleet_role_vars(fleet, how.run_inputs)
    inputs = fingerprint.expected_inputs(hosts, derived, how.bundle) if converting else {}
    targets = {h.name: guards.k3s_target(h, how.bundle) for h in fleet}
    # A control node (a VPS) has no GPUs to time-share: schedule apply leaves it as it is.
    skipped = {h.name: RigOutcome(h.name, "converged", message="control node: no GPUs to time-share; not touched")
               for h in hosts if playbook == "schedule" and h.control_node}
    hosts_on = [h for h in hosts if h.name not in skipped]
    triage = {host.name: triage_rig(host, report, how, derived[host.name], inputs.get(host.name), targets)
              for host, report in zip(hosts_on, detect(hosts_on, opts), strict=True)}
    outcomes = {name: rig.outcome for name, rig in triage.items() if rig.outcome is not None} | skipped
    leased = [(host, triage[host.name].leases) for host in hosts_on if triage[host.name].leases]
    drained = [host for host, _ in leased] if how.drain_timeout_s is not None else []
    to_run = [host for host in hosts_on if triage[host.name].runs]
    to_run += guard_leases(leased, opts, how, outcomes)
    for name, digest in inputs.items():
        derived[name]["fingerprint_inputs"] = digest
    outcomes.update(run_batches(playbook, to_run, fleet, derived, triage, opts, how))
    if drained:  # the agents uncordon the nodes they cordoned (revert removed them: nothing to do)
        drain.request(drained, opts, on=False)
    return [outcomes[h.name] for h in hosts]


def triage_rig(host: Host, report: RigReport, how: RunOptions, derived: dict[str, Any], inputs: str | None,
               targets: dict[str, str]) -> Triage:
    """Screen -> guard -> fingerprint for one rig (``inputs`` None: a playbook that always runs)."""
    if not report.ok:
        return Triage(RigOutcome(host.name, "unreachable", message=report.error or ""))
    note = guards.no_adapter(report, host.control_node)
    reasons: tuple[str, ...] = ()
    if inputs is not None:
        refusal = guards.k3s_refusal(host, report, targets, derived) or guards.tunnel_refusal(report, derived)
        if refusal:
            return Triage(RigOutcome(host.name, "failed", message=f"{host.name}: {refusal}; not touched"))
        reasons = fingerprint.reasons_to_run_on(report, inputs)
        if not how.full and not reasons:
            return Triage(RigOutcome(host.name, "converged", message=_with(note, "fingerprint matches: skipped")))
    if not how.check and report.facts is not None and report.facts.agent_status.leases:
        return Triage(leases=report.facts.agent_status.leases, note=note, reasons=reasons)
    return Triage(note=note, reasons=reasons)


def guard_leases(leased: list[tuple[Host, tuple[Lease, ...]]], opts: SshOptions, how: RunOptions,
                 outcomes: dict[str, RigOutcome]) -> list[Host]:
    """Rigs with running leases: refused (the default), or drained; returns those that may go on."""
    if how.drain_timeout_s is None:
        now = datetime.now(UTC)
        for host, running in leased:
            outcomes[host.name] = RigOutcome(host.name, "failed", message=guards.refusal(host.name, running, now))
        return []
    return drain_rigs([host for host, _ in leased], opts, how.drain_timeout_s, outcomes, how.on_event) if leased else []


def run_batches(playbook: str, to_run: list[Host], fleet: list[Host], derived: dict[str, dict[str, Any]],
                triage: dict[str, Triage], opts: SshOptions, how: RunOptions) -> dict[str, RigOutcome]:
    """The playbook on every rig in one run, or ``how.batch`` rigs at a time with servers in runs of their
    own before agents.  Either way agents join a server that is already up, and an upgrade never runs an
    agent's kubelet newer than its API server (k3s's upgrade order): in one run the playbook's plays keep
    that order (the servers' k3s play ends before the agents' starts) while the rest, the mining OS and the
    GPU stack, runs on servers and agents side by side.  Once more than ``max_fail_pct`` of the rigs tried
    failed, the rest are not started."""
    servers = [h for h in to_run if "k3s_server" in h.groups]
    agents = [h for h in to_run if "k3s_server" not in h.groups]
    extravars = {"m2p_bundle_dir": str(how.bundle.root)} if how.bundle is not None else {}
    outcomes: dict[str, RigOutcome] = {}
    tried = failed = 0
    groups = batches(servers, how.batch) + batches(agents, how.batch) if how.batch else batches(to_run, None)
    for group in groups:
        if tried and failed * 100 > how.max_fail_pct * tried:
            for host in group:
                outcomes[host.name] = RigOutcome(host.name, "not-started",
                                                 message=f"stopped: {failed} of {tried} rigs failed")
            continue
        run = run_playbook(collection.playbook(playbook), fleet, extravars, role_vars=derived, check=how.check,
                           diff=how.check, forks=opts.pool_size, known_hosts=opts.known_hosts,
                           on_event=how.on_event, keep_artifacts=how.keep_artifacts, limit=[h.name for h in group])
        for host in group:
            rig = triage[host.name]
            outcome = outcome_of(host.name, run, check=how.check, why=_with("; ".join(rig.reasons[:2]), rig.note),
                                 note=rig.note)
            outcomes[host.name] = outcome
            tried += 1
            failed += outcome.failed
    return outcomes


def _with(message: str, note: str) -> str:
    """``message`` and ``note`` (the rig's note: a mining OS without a miner adapter), joined."""
    return "; ".join(part for part in (message, note) if part)


def drain_rigs(hosts: list[Host], opts: SshOptions, timeout_s: float, outcomes: dict[str, RigOutcome],
           on_event: Callable[[Event], None] | None) -> list[Host]:
    """Cordon, wait for the leases to end; returns the rigs that may go on (the others get an outcome)."""
    for name, error in drain.request(hosts, opts).items():
        outcomes[name] = RigOutcome(name, "failed", message=f"{name}: --drain: {error}")
    asked = [h for h in hosts if h.name not in outcomes]
    for host in asked:
        if on_event:
            on_event(Event("task", host.name, f"--drain: waiting for the leases on {host.name} to end"))
    cleared, still = drain.wait(asked, opts, timeout_s)
    now = datetime.now(UTC)
    for name, running in still.items():
        outcomes[name] = RigOutcome(name, "failed", message=guards.drain_timed_out(name, running, timeout_s, now))
    return cleared


def derive_role_vars(rigs: Sequence[Rig], run_inputs: RunInputs | None = None,
                     sites: tunnel.TunnelPlan | None = None) -> dict[str, dict[str, Any]]:
    """role_vars over ``rigs`` with the installed k3s role's default data directory."""
    return role_vars(rigs, str(collection.role_defaults("k3s")["k3s_data_dir"]), run_inputs, sites)


def outcome_of(name: str, run: RunReport, *, check: bool = False, why: str = "", note: str = "") -> RigOutcome:
    """What a playbook run did on one rig: ``why`` said beside a change, ``note`` beside no change, and the
    playbook's own warnings for the rig before either (what the owner must act on first)."""
    stats = run.hosts.get(name)
    tasks = tuple(run.changed_tasks.get(name, ()))
    warned = "; ".join(run.warnings.get(name, ()))
    if stats is None or stats.failures or stats.unreachable or name in run.failures or not stats.ok:
        # No task ran at all (ok == 0): the playbook never reached the rig.
        message = run.failures.get(name) or f"the playbook did not run ({run.status}): {run.error}"
        # What it changed before it failed counts: the owner must know the rig is not as it was.
        return RigOutcome(name, "failed", stats.changed if stats else 0, message, tasks)
    if stats.changed:
        return RigOutcome(name, "pending" if check else "changed", stats.changed, _with(warned, why), tasks)
    return RigOutcome(name, "converged", message=_with(warned, note))


def farm_status(reports: list[RigReport], hosts: list[Host]) -> list[dict[str, Any]]:
    """The status rows of ``hosts``' reports: each rig's node named as k3s names it, the hub's silent peers named
    by the farm's tunnel plan."""
    rows = status_rows(reports, {h.name: h.node_name for h in hosts}, tunnel.member_names(hosts))
    control = {h.name for h in hosts if h.control_node}
    for row in rows:  # no nvidia-smi is what a control node is, not a fault
        if row["rig"] in control and row["state"] != "failed":
            row["gpus"] = "none (control node)"
    return rows


def fleet_role_vars(fleet: list[Host], run_inputs: RunInputs | None = None) -> dict[str, dict[str, Any]]:
    """Every rig's role variables, derived from the whole inventory's settings."""
    return derive_role_vars([Rig(h.name, h.address, h.groups, h.vars) for h in fleet], run_inputs, tunnel.plan(fleet))
