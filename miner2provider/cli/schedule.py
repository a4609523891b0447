"""``m2p schedule check``, ``show`` and ``apply``: time-share schedules, and the agent that follows them on rigs."""

from __future__ import annotations

import datetime

import click

from miner2provider.core import checks, textfiles
from miner2provider.core.errors import UsageError
from miner2provider.fleet.role_vars import RunInputs
from miner2provider.market import pricing
from miner2provider.timeshare import model as schedule_model
from miner2provider.timeshare import policy as schedule_policy
from miner2provider.timeshare.apply import economics_files, schedule_files

from . import fleet as fleet_run
from . import render
from .app import Context, cli, pass_ctx
from .options import (
    STARTERS,
    FleetSettings,
    fleet_options,
    load_inventory,
    starter_arguments,
    write_starter,
    yes_option,
)


@cli.group("schedule")
def schedule_group() -> None:
    """Time-share schedules: when each rig mines and when it leases its GPUs."""


@schedule_group.command("init")
@starter_arguments("schedule.yml")
@pass_ctx
def schedule_init(ctx: Context, file: str, force: bool) -> None:
    """Write a commented starter schedule to FILE (default schedule.yml): policy lease-first, the rigs mining
    whenever no lease holds their GPUs."""
    text = (STARTERS / "schedule.yml").read_text()
    schedule_model.parse(text, "m2p's starter schedule.yml")  # the starter itself reads clean
    write_starter(file, text, force)
    ctx.info(f"wrote {file}: check it with m2p schedule check {file}")


@schedule_group.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
def schedule_check(file: str) -> None:
    """Validate a schedule file (file:line for every mistake)."""
    sched = schedule_model.load(file)
    render.warnings(sched.warnings)
    render.echo(f"{file}: ok ({render.schedule_summary(sched)})")


@schedule_group.command("show")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--days", type=click.IntRange(1, 31), default=7, show_default=True)
@click.option("--from", "start", help="Start (ISO 8601, e.g. 2026-03-29T00:00+01:00); default: now.")
def schedule_show(file: str, days: int, start: str | None) -> None:
    """A readable timeline of the modes the schedule asks for, in its timezone."""
    sched = schedule_model.load(file)
    render.warnings(sched.warnings)
    try:
        begin = datetime.datetime.fromisoformat(start) if start else datetime.datetime.now(datetime.UTC)
    except ValueError:
        raise UsageError(f"--from {textfiles.shown(start)}: use ISO 8601, e.g. 2026-03-29T00:00+01:00") from None
    if begin.tzinfo is None:
        begin = begin.replace(tzinfo=sched.zone)
    if not 1971 <= begin.year <= 9000:  # the timeline must end before datetime's year 9999
        raise UsageError(f"--from {textfiles.shown(start)}: give a date between 1971 and 9000")
    render.echo(f"{file}: {render.schedule_summary(sched)}")
    profit = sched.policy == "profit"
    if profit:
        render.echo("policy profit: the lease spans below are offered only while a lease pays more than mining "
                    "(the economics file); mine windows always mine")
    for a, b, desired in schedule_policy.timeline(sched, begin.replace(second=0, microsecond=0), days, profit):
        la, lb = a.astimezone(sched.zone), b.astimezone(sched.zone)
        hours = (b - a).total_seconds() / 3600
        colour = "green" if desired.offered else "yellow"
        render.echo(f"  {la:%a %Y-%m-%d %H:%M %Z}  ->  {lb:%a %H:%M %Z}  {hours:5.1f} h  "
                    + click.style(desired.label, fg=colour))


@schedule_group.command("apply")
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--api-server", envvar="M2P_AGENT_API_SERVER",
              help="The Kubernetes API the agents talk to (https://HOST:6443); default: each rig's k3s server "
                   "(m2p_agent_api_server, m2p_k3s_server_url).  [env M2P_AGENT_API_SERVER]")
@click.option("--economics", "economics_file", type=click.Path(dir_okay=False),
              help="Prices, mining revenue and power for policy profit (docs: the economics file); a rig's "
                   "m2p_economics overrides it.  The agents re-read it when it changes: apply again to update.")
@click.option("--check", is_flag=True, help="Show what would change on each rig, change nothing.  Exit 1: pending.")
@yes_option
@fleet_options(bundle=False, drain=True)
@pass_ctx
def schedule_apply(ctx: Context, file: str | None, api_server: str | None, economics_file: str | None, check: bool,
                   yes: bool, fleet: FleetSettings) -> None:
    """Install the time-share agent with FILE (or each rig's m2p_schedule) on every rig."""
    if api_server is not None and not checks.is_api_server(api_server):
        raise UsageError(f"--api-server {textfiles.shown(api_server)}: give https://HOST:PORT")
    inv = load_inventory(fleet.inventory_file, fleet.vault_password_file)
    hosts = inv.select(fleet.limit)
    schedules = schedule_files(hosts, file, inv.path)
    economics = economics_files(hosts, economics_file, inv.path, schedules)
    for path in sorted(set(economics.values())):  # a misspelt model is an error here too, before any rig changes
        pricing.load_checked(path)
    run_inputs = RunInputs(schedules, api_server or None, economics)
    outcomes = fleet_run.run(ctx, "schedule", fleet, check=check, confirm=not (yes or check), run_inputs=run_inputs,
                             inv=inv)
    render.outcomes(outcomes, fleet.as_json, show_tasks=check or ctx.verbosity > 0)
    if check:
        fleet_run.raise_pending(outcomes, "m2p schedule apply")
    fleet_run.raise_failures(outcomes)
