"""Convert, plan and revert a fleet: detect over SSH, then the playbook in batches.

1. The detect probe (one SSH round trip per rig) finds the rigs that cannot be reached
   or logged into; they fail alone and never reach Ansible.
2. For convert (and plan), the probe also read each rig's fingerprint: a rig whose
   fingerprint matches what would be applied now, with no drift, is converged and skipped
   (``full`` runs the playbook everywhere).  A no-op Ansible play costs seconds per rig;
   the probe costs one round trip.
3. The rest run the playbook ``m2p.rigs.<name>`` through ansible-runner, ``batch`` rigs at a time
   (the whole playbook per batch: a rolling conversion); once more than ``max_fail_pct``
   of the rigs tried so far failed, the remaining batches are not started.
No printing here: progress goes to ``on_event``, results come back as ``RigOutcome``s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import miner2provider
from miner2provider import __version__
from miner2provider.core import collection, k8s_lines
from miner2provider.core.errors import BundleError, M2PError
from miner2provider.core.inventory import Host
from miner2provider.detect.drift import inputs_digest, reasons_to_run
from miner2provider.detect.facts.node import Lease
from miner2provider.detect.ssh import SshOptions
from miner2provider.detect.survey import RigReport, detect
from miner2provider.fleet import drain
from miner2provider.fleet import guards as leases
from miner2provider.fleet.bundle import pins
from miner2provider.fleet.bundle.manifest import Bundle
from miner2provider.fleet.role_vars import Rig, RunInputs, role_vars
from miner2provider.fleet.runner import Event, RunReport, run_playbook


def applied_code() -> dict[str, Path]:
    """What decides the rigs' end state (a change here makes every fingerprint stale): the whole
    installed collection, and the Python the action plugins run on the controller."""
    package = Path(miner2provider.__file__).parent
    return {collection.FQCN: collection.root(), "facts": package / "detect" / "facts",
            "market": package / "market"}


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
    full: bool = False,
    inventory_hosts: list[Host] | None = None,
    run_inputs: RunInputs | None = None,
    drain_timeout_s: float | None = None,
) -> list[RigOutcome]:
    """Run ``playbook`` on ``hosts``, chosen from ``inventory_hosts`` (default: the same rigs), whose
    settings decide the role variables of every rig (role_vars.py).  A rig whose agent reports a
    running lease is left alone (leases.py), unless ``drain_timeout_s`` says how long to wait for it."""
    if bundle is not None and playbook == "convert":
        check_bundle_images(bundle, hosts)
    outcomes: dict[str, RigOutcome] = {}
    reachable: list[Host] = []
    fleet = inventory_hosts or hosts
    derived = fleet_role_vars(fleet, run_inputs)
    fingerprinted = playbook == "convert"  # revert always runs: it removes what any convert left
    inputs = expected_inputs(hosts, derived, bundle) if fingerprinted else {}
    reasons: dict[str, tuple[str, ...]] = {}
    leased: list[tuple[Host, tuple[Lease, ...]]] = []
    notes: dict[str, str] = {}  # said beside the rig's outcome, whatever it is
    k3s_targets = {h.name: k3s_target(h, bundle) for h in fleet}
    for host, report in zip(hosts, detect(hosts, opts), strict=True):
        if not report.ok:
            outcomes[host.name] = RigOutcome(host.name, "unreachable", message=report.error or "")
            continue
        refusal = k3s_refusal(host, report, k3s_targets, derived[host.name]) if fingerprinted else None
        if refusal:
            outcomes[host.name] = RigOutcome(host.name, "failed", message=f"{host.name}: {refusal}; not touched")
            continue
        if report.facts is not None and not report.facts.mining_os.has_adapter:
            notes[host.name] = f"{report.facts.mining_os.label}: no miner adapter, k3s without time-share"
        if fingerprinted:
            reasons[host.name] = reasons_to_run_on(report, inputs[host.name])
        if fingerprinted and not full and not reasons[host.name]:
            outcomes[host.name] = RigOutcome(host.name, "converged",
                                             message=_with(notes, host.name, "fingerprint matches: skipped"))
        elif not check and report.facts is not None and report.facts.agent_status.leases:
            leased.append((host, report.facts.agent_status.leases))
        else:
            reachable.append(host)
    drained: list[Host] = []
    if leased and drain_timeout_s is None:
        now = datetime.now(UTC)
        for host, running in leased:
            outcomes[host.name] = RigOutcome(host.name, "failed", message=leases.refusal(host.name, running, now))
    elif leased and drain_timeout_s is not None:
        drained = [host for host, _ in leased]
        reachable += _drain(drained, opts, drain_timeout_s, outcomes, on_event)
    # Servers first, in runs of their own: agents join a server that is already up, and an
    # upgrade never runs an agent's kubelet newer than its API server (k3s's upgrade order).
    servers = [h for h in reachable if "k3s_server" in h.groups]
    agents = [h for h in reachable if "k3s_server" not in h.groups]
    for name, digest in inputs.items():
        derived[name]["fingerprint_inputs"] = digest
    extravars = {"m2p_bundle_dir": str(bundle.root)} if bundle is not None else {}
    tried = failed = 0
    for group in batches(servers, batch) + batches(agents, batch):
        if tried and failed * 100 > max_fail_pct * tried:
            for host in group:
                outcomes[host.name] = RigOutcome(host.name, "not-started",
                                                 message=f"stopped: {failed} of {tried} rigs failed")
            continue
        run = run_playbook(collection.playbook(playbook), fleet, extravars, role_vars=derived, check=check,
                           diff=check, forks=opts.pool_size, known_hosts=opts.known_hosts, on_event=on_event,
                           keep_artifacts=keep_artifacts, limit=[h.name for h in group])
        for host in group:
            outcome = outcome_of(host.name, run, check=check,
                                 why=_with(notes, host.name, "; ".join(reasons.get(host.name, ())[:2])),
                                 note=_with(notes, host.name, ""))
            outcomes[host.name] = outcome
            tried += 1
            failed += outcome.failed
    if drained:  # the agents uncordon the nodes they cordoned (revert removed them: nothing to do)
        drain.request(drained, opts, on=False)
    return [outcomes[h.name] for h in hosts]


def _with(notes: dict[str, str], name: str, message: str) -> str:
    """``message`` and the rig's note (a mining OS without a miner adapter), joined."""
    return "; ".join(part for part in (message, notes.get(name, "")) if part)


def _drain(hosts: list[Host], opts: SshOptions, timeout_s: float, outcomes: dict[str, RigOutcome],
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
        outcomes[name] = RigOutcome(name, "failed", message=leases.drain_timed_out(name, running, timeout_s, now))
    return cleared


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


def derive_role_vars(rigs: Sequence[Rig], run_inputs: RunInputs | None = None) -> dict[str, dict[str, Any]]:
    """role_vars over ``rigs`` with the installed k3s role's default data directory."""
    return role_vars(rigs, str(collection.role_defaults("k3s")["k3s_data_dir"]), run_inputs)


def outcome_of(name: str, run: RunReport, *, check: bool = False, why: str = "", note: str = "") -> RigOutcome:
    """What a playbook run did on one rig: ``why`` said beside a change, ``note`` beside no change."""
    stats = run.hosts.get(name)
    tasks = tuple(run.changed_tasks.get(name, ()))
    if stats is None or stats.failures or stats.unreachable or name in run.failures or not stats.ok:
        # No task ran at all (ok == 0): the playbook never reached the rig.
        message = run.failures.get(name) or f"the playbook did not run ({run.status}): {run.error}"
        # What it changed before it failed counts: the owner must know the rig is not as it was.
        return RigOutcome(name, "failed", stats.changed if stats else 0, message, tasks)
    if stats.changed:
        return RigOutcome(name, "pending" if check else "changed", stats.changed, why, tasks)
    return RigOutcome(name, "converged", message=note)


def check_bundle_images(bundle: Bundle, hosts: list[Host]) -> None:
    """Refuse, before any rig is touched, a bundle without the images these rigs' pods need:
    on a rig without internet they would wait in ImagePull for ever."""
    needed = sorted({str(h.var("nvidia_device_plugin_image") or pins.DEVICE_PLUGIN_IMAGE) for h in hosts})
    missing = bundle.missing_images(needed)
    if missing:
        wanted = " ".join(f"--image {ref}" for ref in needed)
        raise BundleError(f"the bundle lacks {', '.join(missing)} (rigs without internet could not start their "
                          f"pods): make it again with `m2p bundle DIR {wanted}`", where=str(bundle.root))


def k3s_target(host: Host, bundle: Bundle | None) -> str:
    """The k3s version convert would put on ``host``: the bundle's, the rig's own pin, or the role's."""
    if bundle is not None:
        return bundle.k3s.version
    return str(host.var("k3s_version") or pins.K3S_VERSION)


def k3s_refusal(host: Host, report: RigReport, targets: dict[str, str], derived: dict[str, Any]) -> str | None:
    """Why convert must not touch the rig's k3s: a skipped minor line from what runs there, or an
    agent whose server's line the version-skew policy does not let it join."""
    installed = report.facts.installed.k3s if report.facts is not None else ""
    if installed:
        skipped = k8s_lines.skipped_line(installed, targets[host.name])
        if skipped:
            return skipped
    server = derived.get("k3s_agent_server_host") or ""
    if "k3s_agent" in host.groups and server in targets and server != host.name:
        mix = k8s_lines.skew(targets[server], targets[host.name])
        if mix:
            return f"{mix} ({server}); pin one k3s_version for both"
    return None


def fleet_role_vars(fleet: list[Host], run_inputs: RunInputs | None = None) -> dict[str, dict[str, Any]]:
    """Every rig's role variables, derived from the whole inventory's settings."""
    return derive_role_vars([Rig(h.name, h.address, h.groups, h.vars) for h in fleet], run_inputs)


def expected_inputs(hosts: list[Host], derived: dict[str, dict[str, Any]], bundle: Bundle | None) -> dict[str, str]:
    code = code_digest(bundle)
    return {h.name: inputs_digest(code, h.vars, derived[h.name], h.groups) for h in hosts}


def reasons_to_run_on(report: RigReport, inputs: str) -> tuple[str, ...]:
    assert report.facts is not None  # reachable rigs have facts
    return reasons_to_run(report.facts.fingerprint, report.facts.gpus, inputs)
