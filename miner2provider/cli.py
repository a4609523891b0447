"""The ``m2p`` command line: the only module that prints.

Expected failures (``M2PError``) become one red line and a stable exit code; anything
else is a bug: its traceback goes to a debug log and the line says where.

Exit codes: 0 ok; 1 changes pending / generic; 2 usage; 3 inventory; 4 connection;
5 sandbox; 10+N: N rigs failed (capped at 99); 70 internal error.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import sys
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from miner2provider import __version__, inventory
from miner2provider.attributes.provider import RigGpus, fleet_attributes
from miner2provider.attributes.report import load_report
from miner2provider.detect import RigReport, detect, detect_local
from miner2provider.bundle import pins
from miner2provider.bundle.download import make_bundle
from miner2provider.bundle.manifest import Bundle, load_bundle
from miner2provider.convert import RigOutcome, run_fleet
from miner2provider.errors import ChangesPending, M2PError, RigFailures, UsageError
from miner2provider.plan import reasons_to_run
from miner2provider.runner import Event
from miner2provider.schedule import model as schedule_model
from miner2provider.schedule import policy as schedule_policy
from miner2provider.ssh import DEFAULT_POOL, SshOptions
from miner2provider.timeshare import schedule_files

INTERNAL_ERROR = 70
TEMPLATES = Path(__file__).parent / "templates"


class Context:
    def __init__(self, verbosity: int) -> None:
        self.verbosity = verbosity

    def info(self, text: str) -> None:
        if self.verbosity >= 0:
            click.echo(text)

    def note(self, text: str) -> None:
        """Progress and notes: on stderr, so that --json output stays clean."""
        if self.verbosity >= 0:
            click.echo(text, err=True)

    def detail(self, text: str) -> None:
        if self.verbosity > 0:
            click.echo(text, err=True)


pass_ctx = click.make_pass_decorator(Context)

# -- options defined once, stacked where needed --------------------------------------

inventory_option = click.option(
    "-i", "--inventory", "inventory_file", required=True, type=click.Path(dir_okay=False),
    envvar="M2P_INVENTORY", help="Rig inventory (Ansible YAML).  [env M2P_INVENTORY]")
limit_option = click.option("--limit", "-l", help="Only these hosts or groups (comma-separated).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
vault_option = click.option(
    "--vault-password-file", type=click.Path(exists=True, dir_okay=False), envvar="M2P_VAULT_PASSWORD_FILE",
    help="Decrypts !vault values in the inventory.  [env M2P_VAULT_PASSWORD_FILE]")


def ssh_options(f: Any) -> Any:
    options = [
        click.option("--accept-new", is_flag=True,
                     help="Trust and record host keys seen for the first time (a changed key is always refused)."),
        click.option("--known-hosts", type=click.Path(dir_okay=False), envvar="M2P_KNOWN_HOSTS",
                     default=str(Path.home() / ".ssh" / "known_hosts"), show_default=True,
                     help="Known-hosts file.  [env M2P_KNOWN_HOSTS]"),
        click.option("--forks", type=click.IntRange(1, 500), default=DEFAULT_POOL, show_default=True,
                     envvar="M2P_FORKS", help="Rigs handled at once.  [env M2P_FORKS]"),
        click.option("--connect-timeout", type=click.FloatRange(0.5, 600), default=10.0, show_default=True,
                     help="Seconds to wait for a rig to answer."),
        click.option("--command-timeout", type=click.FloatRange(1, 3600), default=60.0, show_default=True,
                     help="Seconds the probe may run on a rig."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _ssh_opts(accept_new: bool, known_hosts: str, forks: int, connect_timeout: float,
              command_timeout: float) -> SshOptions:
    return SshOptions(known_hosts=Path(known_hosts).expanduser(), accept_new=accept_new,
                      connect_timeout=connect_timeout, command_timeout=command_timeout, pool_size=forks)


# -- commands -------------------------------------------------------------------------


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="m2p")
@click.option("-v", "--verbose", count=True, help="More detail (progress per rig).")
@click.option("-q", "--quiet", count=True, help="Only errors and the summary.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: int) -> None:
    """m2p: turn GPU mining rigs into Kubernetes GPU providers, keeping mining."""
    ctx.obj = Context(verbose - quiet)


@cli.command()
@click.argument("file", default="rigs.yml", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@pass_ctx
def init(ctx: Context, file: str, force: bool) -> None:
    """Write a commented starter inventory to FILE (default rigs.yml)."""
    target = Path(file)
    if target.exists() and not force:
        raise UsageError(f"{file} exists; use --force to overwrite it")
    target.write_text((TEMPLATES / "inventory.yml").read_text())
    ctx.info(f"wrote {file}: edit the hosts, then run `m2p inventory check {file}`")


@cli.group("inventory")
def inventory_group() -> None:
    """Work with rig inventories."""


@inventory_group.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@vault_option
@json_option
@pass_ctx
def inventory_check(ctx: Context, file: str, vault_password_file: str | None, as_json: bool) -> None:
    """Validate an inventory: syntax, addresses, duplicates, m2p_ variables and types."""
    inv = inventory.load(file, vault_password_file)
    groups = sorted({g for h in inv.hosts for g in h.groups})
    if as_json:
        click.echo(json.dumps({"file": file, "ok": True, "groups": groups, "hosts": [
            {"name": h.name, "address": h.address, "port": h.port, "user": h.user, "groups": list(h.groups),
             "password": "set" if h.password else None} for h in inv.hosts]}, indent=2))
        return
    ctx.info(f"{file}: OK, {len(inv.hosts)} rigs in {len(groups)} groups ({', '.join(groups)})")
    for h in inv.hosts:
        ctx.detail(f"  {h.name}: {h.user or '(current user)'}@{h.address}:{h.port}"
                   f"{' password set' if h.password else ''}")


@cli.command("detect")
@click.option("-i", "--inventory", "inventory_file", type=click.Path(dir_okay=False), envvar="M2P_INVENTORY",
              help="Rig inventory (Ansible YAML).  [env M2P_INVENTORY]")
@limit_option
@click.option("--local", is_flag=True, help="Detect this machine, without SSH (GPUs via pynvml when installed).")
@vault_option
@ssh_options
@json_option
@pass_ctx
def detect_command(ctx: Context, inventory_file: str | None, limit: str | None, local: bool,
                   vault_password_file: str | None, accept_new: bool, known_hosts: str, forks: int,
                   connect_timeout: float, command_timeout: float, as_json: bool) -> None:
    """Show what each rig is and whether it is ready to become a GPU node.  Changes nothing."""
    if local:
        reports = [detect_local()]
    else:
        if not inventory_file:
            raise UsageError("detect needs -i/--inventory FILE (or --local for this machine)")
        hosts = inventory.load(inventory_file, vault_password_file).select(limit)
        opts = _ssh_opts(accept_new, known_hosts, forks, connect_timeout, command_timeout)
        ctx.detail(f"probing {len(hosts)} rigs, {min(forks, len(hosts))} at a time")
        reports = detect(hosts, opts, on_done=lambda r: ctx.detail(
            f"  {r.name}: {'ok' if r.ok else 'FAILED: ' + (r.error or '')}"))
    if as_json:
        click.echo(json.dumps([report_json(r) for r in reports], indent=2))
    else:
        for report in reports:
            _print_report(ctx, report)
        _print_summary(reports)
    failed = sum(1 for r in reports if not r.ok)
    if failed:
        raise RigFailures(failed, len(reports))


def report_json(report: RigReport) -> dict[str, Any]:
    data = asdict(report)
    data["status"] = "failed" if not report.ok else report.verdict.status if report.verdict else "unknown"
    if report.facts:
        data["facts"]["mining_os"]["label"] = report.facts.mining_os.label
    return data


def _print_report(ctx: Context, r: RigReport) -> None:
    if not r.ok:
        click.echo(click.style(f"{r.name} ({r.address}): FAILED: {r.error}", fg="red"))
        for w in r.warnings:
            click.echo(click.style(f"  ! {w}", fg="yellow"))
        return
    f, v = r.facts, r.verdict
    assert f is not None and v is not None
    colour = {"ready": "green", "ready with warnings": "yellow", "not ready": "red"}[v.status]
    mos = f.mining_os
    head = f"{r.name} ({r.address}): {mos.label}{' ' + mos.version if mos.version else ''}"
    click.echo(click.style(head, bold=True) + " - " + click.style(v.status, fg=colour))
    if ctx.verbosity >= 0:
        cg = f"cgroup v{f.cgroup.version}{' (hybrid)' if f.cgroup.hybrid else ''}"
        rows = [
            ("system", f"{f.os_release.pretty_name}, kernel {f.kernel.release} {f.kernel.machine}, {cg}"),
            ("cpu/ram", f"{f.cpu.cores} cores {f.cpu.model}, {f.memory.total_mb} MB RAM"),
            ("disks", "; ".join(f"{m.mountpoint} {m.size_gb:g} GB ({m.free_gb:g} GB free)" for m in f.disks) or "-"),
            ("python3", f"{f.python.version or 'missing'}   sudo: {f.sudo.state}"),
            ("gpus", _gpus_line(f)),
            ("miner", ("running (" + ", ".join(f.miner.sessions) + ")") if f.miner.running else "not running"),
            ("stack", f"container toolkit: {f.installed.container_toolkit or '-'}, k3s: {f.installed.k3s or '-'}"
                      f"{' (' + f.installed.k3s_service + ' active)' if f.installed.k3s_service else ''}, "
                      f"m2p agent: {f.installed.agent or '-'}"),
        ]
        for label, value in rows:
            click.echo(f"  {label:<8} {value}")
    for b in v.blockers:
        click.echo(click.style(f"  x {b}", fg="red"))
    for w in (*v.warnings, *r.warnings):
        click.echo(click.style(f"  ! {w}", fg="yellow"))


def _gpus_line(f: Any) -> str:
    g = f.gpus
    if g.state != "ok":
        return {"no-nvidia-smi": "none (no nvidia-smi)", "no-gpu": "none found",
                "driver-error": f"driver error: {g.error}"}[g.state]
    counts: dict[str, int] = {}
    for gpu in g.gpus:
        key = f"{gpu.name} ({gpu.pci_id}, {gpu.memory_mib} MiB)"
        counts[key] = counts.get(key, 0) + 1
    cards = ", ".join(f"{n} x {k}" for k, n in counts.items())
    return f"{cards}; driver {g.driver_version}, CUDA {f.cuda or '?'}"


def _print_summary(reports: list[RigReport]) -> None:
    counts: dict[str, int] = {}
    for r in reports:
        key = "failed" if not r.ok else r.verdict.status if r.verdict else "unknown"
        counts[key] = counts.get(key, 0) + 1
    order = ["ready", "ready with warnings", "not ready", "failed"]
    parts = [f"{counts[k]} {k}" for k in order if k in counts]
    click.echo(f"{len(reports)} rigs: " + ", ".join(parts))


@cli.command("attributes")
@click.option("-i", "--inventory", "inventory_file", type=click.Path(dir_okay=False), envvar="M2P_INVENTORY",
              help="Probe these rigs now.  [env M2P_INVENTORY]")
@click.option("--from", "report", type=click.Path(dir_okay=False),
              help="Use a saved `m2p detect --json` report instead of probing.")
@click.option("--region", help="Provider attribute location-region (default: the rigs' m2p_location_region).")
@limit_option
@vault_option
@ssh_options
@json_option
@pass_ctx
def attributes_command(ctx: Context, inventory_file: str | None, report: str | None, region: str | None,
                       limit: str | None, vault_password_file: str | None, accept_new: bool, known_hosts: str,
                       forks: int, connect_timeout: float, command_timeout: float, as_json: bool) -> None:
    """GPU node labels per rig and Akash provider attributes for the fleet.  Changes nothing."""
    if bool(inventory_file) == bool(report):
        raise UsageError("attributes needs exactly one of -i/--inventory FILE or --from REPORT.json")
    if report:
        rigs, failed = load_report(report)
    else:
        hosts = inventory.load(inventory_file, vault_password_file).select(limit)  # type: ignore[arg-type]
        by_name = {h.name: h for h in hosts}
        reports = detect(hosts, _ssh_opts(accept_new, known_hosts, forks, connect_timeout, command_timeout))
        failed = [r.name for r in reports if not r.ok]
        for r in reports:
            if not r.ok:
                click.echo(click.style(f"{r.name}: FAILED: {r.error}", fg="red"), err=True)
        rigs = [RigGpus(r.name, r.facts.gpus, r.facts.cuda, by_name[r.name].var("m2p_location_region"),
                        _schedule_label(by_name[r.name].var("m2p_schedule")))
                for r in reports if r.ok and r.facts]
    fleet = fleet_attributes(rigs, region)
    if as_json:
        click.echo(json.dumps({
            "rigs": {r.name: {"labels": r.labels, "warnings": list(r.warnings)} for r in fleet.rigs},
            "attributes": [{"key": k, "value": v} for k, v in fleet.attributes],
            "warnings": list(fleet.warnings), "akash_gpus_json_additions": list(fleet.unknown_entries),
            "failed": failed}, indent=2))
    else:
        import yaml

        click.echo("# Node labels per rig (m2p's gpu_attributes role applies them)")
        click.echo(yaml.safe_dump({"rigs": {r.name: r.labels for r in fleet.rigs}}, sort_keys=False).rstrip())
        click.echo("# Akash provider attributes for this fleet (paste into your provider config)")
        click.echo(yaml.safe_dump({"attributes": [{"key": k, "value": v} for k, v in fleet.attributes]},
                                  sort_keys=False).rstrip())
        for r in fleet.rigs:
            for w in r.warnings:
                click.echo(click.style(f"! {r.name}: {w}", fg="yellow"), err=True)
        for w in fleet.warnings:
            click.echo(click.style(f"! fleet: {w}", fg="yellow"), err=True)
        if fleet.unknown_entries:
            click.echo("# Entries missing from Akash's devices/pcie/gpus.json (under \"10de\" -> \"devices\"):",
                       err=True)
            for entry in fleet.unknown_entries:
                click.echo(f"#   {entry}", err=True)
    if failed:
        raise RigFailures(len(failed), len(failed) + len(rigs))


def _schedule_label(schedule: str | None) -> dict[str, str]:
    return {"schedule": Path(schedule).stem} if schedule else {}


# -- conversion: plan, convert, revert, status ------------------------------------------

bundle_option = click.option(
    "--bundle", type=click.Path(file_okay=False), envvar="M2P_BUNDLE",
    help="Install from this offline bundle (made by `m2p bundle`) instead of the vendors' sites.  [env M2P_BUNDLE]")


def fleet_options(f: Any, bundle: bool = True) -> Any:
    for option in reversed([
        inventory_option, limit_option, *([bundle_option] if bundle else []), vault_option,
        click.option("--batch", help="Convert N rigs (or N%) at a time, the whole playbook per batch."),
        click.option("--max-fail", type=click.IntRange(0, 100), default=100, show_default=True,
                     help="Stop starting new batches once more than this % of rigs failed."),
        click.option("--keep-artifacts", type=click.Path(file_okay=False),
                     help="Copy ansible-runner's artifacts (events, stdout) here, for audits."),
    ]):
        f = option(f)
    return ssh_options(json_option(f))


full_option = click.option(
    "--full", is_flag=True,
    help="Run the playbook on every rig, also on rigs whose fingerprint says they are converged and undrifted.")


def _load_bundle(ctx: Context, path: str | None) -> Bundle | None:
    if not path:
        return None
    bundle = load_bundle(path)
    if bundle.standin:
        ctx.note(click.style(f"note: {path} is m2p's TEST bundle: k3s and the NVIDIA toolkit in it are "
                             "stand-ins for sandbox rigs, not the real software", fg="yellow"))
    return bundle


def _progress(ctx: Context) -> Any:
    def show(event: Event) -> None:
        if event.kind == "task":
            ctx.detail(f"  . {event.task}")
        elif event.kind in {"changed", "failed", "unreachable"} and ctx.verbosity >= 0:
            colour = {"changed": "yellow", "failed": "red", "unreachable": "red"}[event.kind]
            tail = f": {event.message}" if event.message else ""
            ctx.note(click.style(f"  {event.host}: {event.kind}", fg=colour) + f"  {event.task}{tail}")
    return show


def _run_fleet(ctx: Context, playbook: str, check: bool, inventory_file: str, limit: str | None,
               bundle: str | None, vault_password_file: str | None, batch: str | None, max_fail: int,
               keep_artifacts: str | None, accept_new: bool, known_hosts: str, forks: int,
               connect_timeout: float, command_timeout: float, yes: bool = True,
               full: bool = False, extravars: dict[str, Any] | None = None,
               hosts: list[inventory.Host] | None = None) -> list[RigOutcome]:
    """``hosts``: already loaded and selected by the caller; else from the inventory file."""
    if batch and not (batch.rstrip("%").isdigit() and int(batch.rstrip("%")) > 0):
        raise UsageError(f"--batch {batch}: give a number of rigs (5) or a percentage (10%)")
    if hosts is None:
        hosts = inventory.load(inventory_file, vault_password_file).select(limit)
    loaded = _load_bundle(ctx, bundle)
    if not yes:
        click.confirm(f"{playbook} {len(hosts)} rigs ({', '.join(h.name for h in hosts[:5])}"
                      f"{', ...' if len(hosts) > 5 else ''})?", abort=True, err=True)
    return run_fleet(playbook, hosts, _ssh_opts(accept_new, known_hosts, forks, connect_timeout, command_timeout),
                     bundle=loaded, check=check, batch=batch, max_fail_pct=max_fail, on_event=_progress(ctx),
                     keep_artifacts=Path(keep_artifacts) if keep_artifacts else None, full=full,
                     extravars=extravars)


def _print_outcomes(outcomes: list[RigOutcome], as_json: bool, show_tasks: bool) -> None:
    if as_json:
        click.echo(json.dumps([asdict(o) for o in outcomes], indent=2))
        return
    colours = {"converged": "green", "changed": "yellow", "pending": "yellow"}
    width = max((len(o.name) for o in outcomes), default=3)
    click.echo(f"{'rig':<{width}}  {'result':<12} changed  detail")
    for o in outcomes:
        click.echo(f"{o.name:<{width}}  " + click.style(f"{o.result:<12}", fg=colours.get(o.result, "red"))
                   + f" {o.changed:>7}  {o.message}")
        if show_tasks:
            for task in o.tasks:
                click.echo(f"{'':<{width}}    ~ {task}")
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.result] = counts.get(o.result, 0) + 1
    click.echo(f"{len(outcomes)} rigs: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))


def _raise_failures(outcomes: list[RigOutcome]) -> None:
    failed = sum(o.failed for o in outcomes)
    if failed:
        raise RigFailures(failed, len(outcomes))


@cli.command("plan")
@fleet_options
@full_option
@pass_ctx
def plan_command(ctx: Context, as_json: bool, **kw: Any) -> None:
    """Show what convert would change on each rig (check mode with diff).  Exit 1: changes pending."""
    outcomes = _run_fleet(ctx, "convert", True, **kw)
    _print_outcomes(outcomes, as_json, show_tasks=True)
    _raise_pending(outcomes, "m2p convert")


def _raise_pending(outcomes: list[RigOutcome], command: str) -> None:
    _raise_failures(outcomes)
    pending = [o.name for o in outcomes if o.result == "pending"]
    if pending:
        raise ChangesPending(f"{len(pending)} of {len(outcomes)} rigs have changes pending: run `{command}`")


def _apply_command(playbook: str, doc: str) -> Any:
    """`m2p convert` and `m2p revert`: the same flow, a different playbook."""

    @fleet_options
    @click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
    @pass_ctx
    def command(ctx: Context, as_json: bool, yes: bool, **kw: Any) -> None:
        outcomes = _run_fleet(ctx, playbook, False, yes=yes, **kw)
        _print_outcomes(outcomes, as_json, show_tasks=ctx.verbosity > 0)
        _raise_failures(outcomes)

    command.__doc__ = doc
    if playbook == "convert":  # revert always runs in full: it removes what any convert left
        command = full_option(command)
    return cli.command(playbook)(command)


convert_command = _apply_command(
    "convert", "Make each rig a k3s GPU node (toolkit, k3s, device plugin, labels), keeping it a mining rig.")
revert_command = _apply_command(
    "revert", "Remove what convert added and give each rig back to mining (its mining config is never touched).")


@cli.command("status")
@inventory_option
@limit_option
@vault_option
@ssh_options
@json_option
@pass_ctx
def status_command(ctx: Context, inventory_file: str, limit: str | None, vault_password_file: str | None,
                   accept_new: bool, known_hosts: str, forks: int, connect_timeout: float,
                   command_timeout: float, as_json: bool) -> None:
    """Per rig: converged, drifted (and how) or not converged; k3s service, node name, GPUs; the
    time-share agent's mode, since when, next change and last error.  Changes nothing."""
    hosts = inventory.load(inventory_file, vault_password_file).select(limit)
    reports = detect(hosts, _ssh_opts(accept_new, known_hosts, forks, connect_timeout, command_timeout))
    rows = [status_row(r) for r in reports]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        width = max((len(r["rig"]) for r in rows), default=3)
        click.echo(f"{'rig':<{width}}  {'state':<13} {'k3s':<22} {'node':<16} gpus")
        for r in rows:
            colour = {"converged": "green", "not converged": "yellow", "drifted": "yellow"}.get(r["state"], "red")
            click.echo(f"{r['rig']:<{width}}  " + click.style(f"{r['state']:<13}", fg=colour)
                       + f" {r['k3s']:<22} {r['node']:<16} {r['gpus']}")
            if r["detail"]:
                click.echo(f"{'':<{width}}    {r['detail']}")
            if r["agent"]:
                click.echo(f"{'':<{width}}    agent: {_agent_line(r['agent'])}")
    failed = sum(r["state"] == "failed" for r in rows)
    if failed:
        raise RigFailures(failed, len(rows))


def status_row(report: RigReport) -> dict[str, Any]:
    """converged: the fingerprint convert left is there and nothing drifted since."""
    if not report.ok or report.facts is None:
        return {"rig": report.name, "state": "failed", "k3s": "-", "node": "-", "gpus": report.error or "",
                "detail": "", "agent": None}
    f = report.facts
    inst = f.installed
    drift = reasons_to_run(f.fingerprint, f.gpus, None)
    state = "not converged" if not f.fingerprint.present else "drifted" if drift else "converged"
    gpus = f"{len(f.gpus.gpus)} x {', '.join(f.gpus.models)}" if f.gpus.state == "ok" else f.gpus.state
    if inst.k3s_service:
        k3s = f"{inst.k3s_service} {inst.k3s}"
    else:
        k3s = f"{inst.k3s} (not running)" if inst.k3s else "-"
    agent = None
    if f.agent_status.present or inst.agent:
        agent = {"service": inst.agent or "not installed", **asdict(f.agent_status)}
        del agent["present"]
    return {"rig": report.name, "state": state, "k3s": k3s, "node": f.hostname if inst.k3s_service else "-",
            "gpus": gpus, "detail": "; ".join(drift) if f.fingerprint.present else "", "agent": agent}


def _agent_line(agent: dict[str, str]) -> str:
    """``leasing since 2026-11-22T21:14, next change 2026-11-23T06:00+01:00 (schedule night-lease)``."""
    if not agent["mode"]:
        return f"service {agent['service']}, no status yet"
    line = f"{agent['mode']} since {agent['since'][:16]}"
    line += f", next change {agent['next_change']}" if agent["next_change"] else ", no change ahead"
    line += f" (schedule {agent['schedule']})"
    if agent["service"] != "active":
        line += f"; service {agent['service']}"
    if agent["last_error"]:
        line += click.style(f"; last error: {agent['last_error']}", fg="red")
    return line


# -- time-share schedule -------------------------------------------------------------


@cli.group("schedule")
def schedule_group() -> None:
    """Time-share schedules: when each rig mines and when it leases its GPUs."""


@schedule_group.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
def schedule_check(file: str) -> None:
    """Validate a schedule file (file:line for every mistake)."""
    sched = schedule_model.load(file)
    click.echo(f"{file}: ok ({_schedule_summary(sched)})")


@schedule_group.command("show")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--days", type=click.IntRange(1, 31), default=7, show_default=True)
@click.option("--from", "start", help="Start (ISO 8601, e.g. 2026-03-29T00:00+01:00); default: now.")
def schedule_show(file: str, days: int, start: str | None) -> None:
    """A readable timeline of the modes the schedule asks for, in its timezone."""
    sched = schedule_model.load(file)
    try:
        begin = datetime.datetime.fromisoformat(start) if start else datetime.datetime.now(datetime.timezone.utc)
    except ValueError:
        raise UsageError(f"--from {start}: use ISO 8601, e.g. 2026-03-29T00:00+01:00") from None
    if begin.tzinfo is None:
        begin = begin.replace(tzinfo=sched.zone)
    click.echo(f"{file}: {_schedule_summary(sched)}")
    for a, b, desired in schedule_policy.timeline(sched, begin.replace(second=0, microsecond=0), days):
        la, lb = a.astimezone(sched.zone), b.astimezone(sched.zone)
        hours = (b - a).total_seconds() / 3600
        colour = "green" if desired.offered else "yellow"
        click.echo(f"  {la:%a %Y-%m-%d %H:%M %Z}  ->  {lb:%a %H:%M %Z}  {hours:5.1f} h  "
                   + click.style(desired.label, fg=colour))


@schedule_group.command("apply")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--api-server", envvar="M2P_AGENT_API_SERVER",
              help="The Kubernetes API the agents talk to (https://HOST:6443); default: each rig's k3s server "
                   "(m2p_agent_api_server, m2p_k3s_server_url).  [env M2P_AGENT_API_SERVER]")
@click.option("--check", is_flag=True, help="Show what would change on each rig, change nothing.  Exit 1: pending.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@functools.partial(fleet_options, bundle=False)
@pass_ctx
def schedule_apply(ctx: Context, file: str | None, api_server: str | None, check: bool, yes: bool, as_json: bool,
                   **kw: Any) -> None:
    """Install the time-share agent with FILE (or each rig's m2p_schedule) on every rig."""
    inv = inventory.load(kw["inventory_file"], kw["vault_password_file"])
    hosts = inv.select(kw["limit"])
    extravars: dict[str, Any] = {"m2p_schedule_files": schedule_files(hosts, file, inv.path)}
    if api_server:
        extravars["m2p_agent_api_server"] = api_server
    outcomes = _run_fleet(ctx, "schedule", check, yes=yes or check, bundle=None, extravars=extravars, hosts=hosts,
                          **kw)
    _print_outcomes(outcomes, as_json, show_tasks=check or ctx.verbosity > 0)
    if check:
        _raise_pending(outcomes, "m2p schedule apply")
    _raise_failures(outcomes)


def _schedule_summary(sched: schedule_model.Schedule) -> str:
    grace = "forever" if sched.lease_grace_s is None else f"{sched.lease_grace_s / 60:g} min"
    return (f"policy {sched.policy}, timezone {sched.timezone}, {len(sched.windows)} windows, "
            f"lease grace {grace}, min switch interval {sched.min_switch_interval_s / 60:g} min")


@cli.command("bundle")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--k3s-version", default=pins.K3S_VERSION, show_default=True, envvar="M2P_K3S_VERSION")
@click.option("--toolkit-version", default=pins.TOOLKIT_VERSION, show_default=True, envvar="M2P_TOOLKIT_VERSION",
              help="NVIDIA container toolkit version (packages <version>-1).")
@click.option("--k3s-release-url", default=pins.K3S_RELEASE_URL, show_default=True, envvar="M2P_K3S_RELEASE_URL",
              help="Where k3s releases are (a mirror works).")
@click.option("--toolkit-repo-url", default=pins.TOOLKIT_REPO_URL, show_default=True, envvar="M2P_TOOLKIT_REPO_URL",
              help="NVIDIA's flat apt repository ($(ARCH) is replaced by amd64; a mirror works).")
@pass_ctx
def bundle_command(ctx: Context, directory: str, k3s_version: str, toolkit_version: str, k3s_release_url: str,
                   toolkit_repo_url: str) -> None:
    """Download k3s and the NVIDIA toolkit once, checked by sha256, into DIRECTORY (new or empty).

    Run it on a connected machine; then `m2p convert --bundle DIRECTORY` installs from it over SSH.
    """
    ctx.info(f"downloading k3s {k3s_version} and NVIDIA container toolkit {toolkit_version} ...")
    manifest = make_bundle(directory, k3s_version=k3s_version, toolkit_version=toolkit_version,
                           k3s_release_url=k3s_release_url, toolkit_repo_url=toolkit_repo_url)
    bundle = load_bundle(directory)  # read back: the manifest and every file check out
    click.echo(f"bundle ready: {manifest} (k3s {bundle.k3s.version}, "
               f"{len(bundle.toolkit_packages)} toolkit packages {bundle.toolkit_version})")


@cli.command("demo")
@pass_ctx
def demo_command(ctx: Context) -> None:
    """Try m2p without rigs: detect, plan, convert, status and revert on a SANDBOX rig.

    Boots a HiveOS-layout sandbox rig here (systemd-nspawn; needs root and the packages
    scripts/install adds) and converts it with m2p's TEST bundle, whose k3s and NVIDIA
    toolkit are stand-ins.  Nothing outside this machine is touched.
    """
    import shutil
    import tempfile

    try:
        from m2p_sandbox import rig as sandbox
        from m2p_sandbox.bundle import build_test_bundle
    except ModuleNotFoundError:
        raise UsageError("m2p demo needs the sandbox harness, which a plain install leaves out: from a clone "
                         "of m2p's repository run scripts/install (as root), then .venv/bin/m2p demo") from None

    ctx.info(click.style("m2p demo: a SANDBOX rig (HiveOS layout, 2 stand-in RTX 3090s) and STAND-IN k3s and "
                         "NVIDIA toolkit packages; no real rig, GPU or vendor download is involved.", bold=True))
    work = Path(tempfile.mkdtemp(prefix="m2p-demo-"))
    rigs: list[Any] = []
    try:
        build_test_bundle(work / "bundle")
        ctx.info("booting the sandbox rig demo-hive ...")
        rigs = sandbox.boot([sandbox.RigSpec("demo-hive", "hiveos", ("rtx3090", "rtx3090"))], owner_pid=os.getpid())
        rig = rigs[0]
        inv = work / "rigs.yml"
        inv.write_text(f"all:\n  hosts:\n    demo-hive:\n      ansible_host: {rig.address}\n"
                       f"      ansible_user: {rig.user}\n      ansible_ssh_private_key_file: {rig.key_file}\n"
                       "      m2p_min_free_disk_gb: 5\n")
        ssh = ["--accept-new", "--known-hosts", str(work / "known_hosts")]
        bundle = ["--bundle", str(work / "bundle")]
        steps = [("detect: what is this rig?", ["detect", "-i", str(inv), *ssh]),
                 ("plan: what would convert change? (exit 1: changes pending)", ["plan", "-i", str(inv), *bundle, *ssh]),
                 ("convert", ["convert", "-i", str(inv), *bundle, *ssh, "--yes"]),
                 ("convert again: nothing to change", ["convert", "-i", str(inv), *bundle, *ssh, "--yes"]),
                 ("status", ["status", "-i", str(inv), *ssh]),
                 ("revert: a mining rig again", ["revert", "-i", str(inv), *bundle, *ssh, "--yes"])]
        for title, args in steps:
            ctx.info(click.style(f"\n$ m2p {' '.join(args[:1])}   # {title}", fg="cyan", bold=True))
            code = main(args)
            ctx.info(f"(exit {code})")
    finally:
        for r in rigs:
            sandbox.stop(r)
        shutil.rmtree(work, ignore_errors=True)


# -- entry point: expected errors are one line, bugs go to the debug log --------------


def debug_log_path() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "m2p" / "debug.log"
    return Path(os.environ.get("M2P_DEBUG_LOG", default))


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, prog_name="m2p", standalone_mode=False)
    except M2PError as exc:
        click.echo(click.style(f"m2p: error: {exc}", fg="red"), err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("m2p: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return UsageError.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - unexpected: keep the traceback for the bug report
        log = debug_log_path()
        try:
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a") as f:
                f.write(f"--- {datetime.datetime.now().isoformat()} m2p {__version__} {sys.argv!r}\n")
                f.write(traceback.format_exc())
            where = f"traceback saved to {log}"
        except OSError:
            where = "could not write the debug log"
        click.echo(click.style(f"m2p: internal error: {type(exc).__name__}: {exc} ({where})", fg="red"),
                   err=True)
        return INTERNAL_ERROR
    return 0


def entry() -> None:
    sys.exit(main())
