"""Commands that run a playbook on the fleet: plan, convert, revert, remove (schedule apply uses the same run)."""

from __future__ import annotations

from collections.abc import Callable

import click

from miner2provider.core import inventory
from miner2provider.core.errors import ChangesPending, RigFailures, UsageError
from miner2provider.fleet.bundle.manifest import Bundle, load_bundle
from miner2provider.fleet.pipeline import RigOutcome, RunOptions, run_fleet
from miner2provider.fleet.remove import remove_rigs
from miner2provider.fleet.role_vars import RunInputs
from miner2provider.fleet.runner import Event

from . import render
from .app import Context, cli, pass_ctx
from .options import FleetSettings, fleet_options, full_option, load_inventory, yes_option
from .options import confirm as ask_yes


def _load_bundle(ctx: Context, path: str | None) -> Bundle | None:
    if not path:
        return None
    bundle = load_bundle(path)
    if bundle.standin:
        ctx.note(click.style(f"note: {path} is m2p's TEST bundle: k3s and the NVIDIA toolkit in it are "
                             "stand-ins for sandbox rigs, not the real software", fg="yellow"))
    return bundle


def _progress(ctx: Context, listed: bool = False) -> Callable[[Event], None]:
    """Each task as it runs (-v), and what changed or failed as it happens.  ``listed``: the table at the end lists
    every changed task (plan, --check, -v), so a change is not said twice."""
    def show(event: Event) -> None:
        if event.kind == "task":
            ctx.detail(f"  . {event.task}")
        elif event.kind == "changed" and listed:
            return
        elif event.kind in {"changed", "failed", "unreachable"} and ctx.verbosity >= 0:
            colour = {"changed": "yellow", "failed": "red", "unreachable": "red"}[event.kind]
            tail = f": {event.message}" if event.message else ""
            ctx.note(click.style(f"  {event.host}: {event.kind}", fg=colour) + f"  {event.task}{tail}")
    return show


def run(ctx: Context, playbook: str, fleet: FleetSettings, *, check: bool = False, confirm: bool = False,
        full: bool = False, run_inputs: RunInputs | None = None,
        inv: inventory.Inventory | None = None) -> list[RigOutcome]:
    """Run ``playbook`` on the rigs ``--limit`` selects; ``inv``: already loaded, else from the inventory file."""
    if inv is None:
        inv = load_inventory(fleet.inventory_file, fleet.vault_password_file)
    hosts = inv.select(fleet.limit)
    bundle = _load_bundle(ctx, fleet.bundle)
    if confirm:
        ask_yes(f"{playbook} {render.counted(len(hosts), 'rig')} ({', '.join(h.name for h in hosts[:5])}"
                f"{', ...' if len(hosts) > 5 else ''})?")
    progress = _progress(ctx, listed=check or ctx.verbosity > 0)
    how = RunOptions(bundle=bundle, check=check, batch=fleet.batch, max_fail_pct=fleet.max_fail,
                     on_event=progress, keep_artifacts=fleet.keep_artifacts, full=full, run_inputs=run_inputs,
                     drain_timeout_s=fleet.drain_timeout_s)
    return run_fleet(playbook, hosts, fleet.ssh, how, inventory_hosts=list(inv.hosts))


def raise_failures(outcomes: list[RigOutcome]) -> None:
    failed = sum(o.failed for o in outcomes)
    if failed:
        raise RigFailures(failed, len(outcomes))


def raise_pending(outcomes: list[RigOutcome], command: str) -> None:
    raise_failures(outcomes)
    pending = [o.name for o in outcomes if o.result == "pending"]
    if pending:
        raise ChangesPending(f"changes pending on {len(pending)} of {render.counted(len(outcomes), 'rig')}: "
                             f"run `{command}`")


@cli.command("plan")
@fleet_options()
@full_option
@pass_ctx
def plan_command(ctx: Context, fleet: FleetSettings, full: bool) -> None:
    """Show what convert would change on each rig (check mode with diff).  Exit 1: changes pending."""
    outcomes = run(ctx, "convert", fleet, check=True, full=full)
    render.outcomes(outcomes, fleet.as_json, show_tasks=True)
    raise_pending(outcomes, "m2p convert")


@cli.command("convert")
@fleet_options(drain=True)
@full_option
@yes_option
@pass_ctx
def convert_command(ctx: Context, fleet: FleetSettings, full: bool, yes: bool) -> None:
    """Make each rig a k3s GPU node (toolkit, k3s, device plugin, labels), keeping it a mining rig."""
    outcomes = run(ctx, "convert", fleet, confirm=not yes, full=full)
    render.outcomes(outcomes, fleet.as_json, show_tasks=ctx.verbosity > 0)
    raise_failures(outcomes)


@cli.command("revert")
@fleet_options(drain=True)
@yes_option
@pass_ctx
def revert_command(ctx: Context, fleet: FleetSettings, yes: bool) -> None:
    """Remove what convert added and give each rig back to mining (its mining config is never touched).

    Revert always runs on every selected rig: it removes what any convert left."""
    outcomes = run(ctx, "revert", fleet, confirm=not yes)
    render.outcomes(outcomes, fleet.as_json, show_tasks=ctx.verbosity > 0)
    raise_failures(outcomes)


@cli.command("remove")
@fleet_options()
@yes_option
@pass_ctx
def remove_command(ctx: Context, fleet: FleetSettings, yes: bool) -> None:
    """Forget rigs that are gone for good (--limit them): their k3s server deletes their node and
    agent identity, and their host keys leave the known_hosts file.  The rigs are never contacted;
    a rig that still runs is reverted instead."""
    if not fleet.limit:
        raise UsageError("remove forgets rigs for good: name them with --limit")
    inv = load_inventory(fleet.inventory_file, fleet.vault_password_file)
    hosts = inv.select(fleet.limit)
    if not yes:
        ask_yes(f"forget {render.counted(len(hosts), 'rig')} for good ({', '.join(h.name for h in hosts[:5])}"
                f"{', ...' if len(hosts) > 5 else ''})?")
    outcomes = remove_rigs(hosts, list(inv.hosts), fleet.ssh, on_event=_progress(ctx, listed=ctx.verbosity > 0),
                           keep_artifacts=fleet.keep_artifacts)
    render.outcomes(outcomes, fleet.as_json, show_tasks=ctx.verbosity > 0)
    raise_failures(outcomes)
