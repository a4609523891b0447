"""``m2p miner adopt`` and ``m2p miner release``: a miner without an adapter in m2p's own unit (fleet/miner.py);
this module reads options, asks and prints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from miner2provider.core.errors import UsageError
from miner2provider.core.inventory import Host
from miner2provider.detect.ssh import SshOptions
from miner2provider.detect.survey import detect
from miner2provider.fleet import miner

from . import render
from .app import Context, cli, pass_ctx
from .fleet import raise_failures
from .options import confirm, inventory_option, json_option, load_inventory, ssh_options, vault_option, yes_option


@cli.group("miner")
def miner_group() -> None:
    """A miner m2p has no adapter for (a hand-run miner, an owner's wrapper): adopt it, release it."""


def rig_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """What both commands take after RIG: the inventory, --yes, the vault, --json, SSH; and the context."""
    for option in reversed((inventory_option(), yes_option, vault_option, json_option, ssh_options, pass_ctx)):
        f = option(f)
    return f


def _rig(inventory_file: str, vault_password_file: str | None, name: str) -> Host:
    hosts = [h for h in load_inventory(inventory_file, vault_password_file).hosts if h.name == name]
    if not hosts:
        raise UsageError(f"{name} is not in {inventory_file}")
    return hosts[0]


@miner_group.command("adopt")
@click.argument("rig")
@click.option("--pid", type=click.IntRange(2), help="The GPU process to adopt (needed for one m2p does not know as "
              "a miner).")
@click.option("--hashrate-window", "window_s", type=click.FloatRange(5, 1800), default=miner.HASHRATE_WINDOW_S,
              show_default=True, help="Seconds the miner in m2p's unit has to reach 90% of its hashrate before "
              "(read from T-Rex's API: m2p_trex_api_port, or 4067 for T-Rex); longer for a miner with a big DAG.")
@rig_options
def miner_adopt(ctx: Context, rig: str, pid: int | None, window_s: float, inventory_file: str, yes: bool,
                vault_password_file: str | None, as_json: bool, ssh: SshOptions) -> None:
    """Run RIG's miner in m2p's own unit (m2p-miner.service), exactly as it ran: same program, arguments, folder,
    user and environment, captured into a root-only file on the rig (never shown).  Its wrapper, screen or tmux
    is stopped with it; if the miner does not come back in the unit, or comes back slower (where its hashrate
    can be read), it is started again as before.  Then `m2p_miner_unit: m2p-miner.service` lets the time-share
    stop and start it."""
    host = _rig(inventory_file, vault_password_file, rig)
    report = detect([host], ssh)[0]
    if not report.ok or report.facts is None:
        raise UsageError(f"{rig}: {report.error or 'no answer'}")
    chosen = miner.choose(report.facts.holders, pid)
    ctx.note(f"{rig}: adopt {miner.said(chosen)} into {miner.UNIT}")
    if not yes:
        confirm(f"stop it and start it again in {miner.UNIT} on {rig}?")
    port = miner.stats_port(host, chosen)
    outcome = miner.run_on_rig(host, ssh, "adopt", str(chosen.pid), str(port), f"{window_s:g}", window_s=window_s)
    render.outcomes([outcome], as_json, show_tasks=False)
    if outcome.result == "changed" and not as_json:
        ctx.note(f"For the time-share, under {rig} in the inventory: m2p_miner_unit: {miner.UNIT}")
    raise_failures([outcome])


@miner_group.command("release")
@click.argument("rig")
@rig_options
def miner_release(ctx: Context, rig: str, inventory_file: str, yes: bool, vault_password_file: str | None,
                  as_json: bool, ssh: SshOptions) -> None:
    """Give RIG's adopted miner back: m2p's unit goes, and its wrapper, screen or the miner itself starts again
    exactly as it was captured."""
    host = _rig(inventory_file, vault_password_file, rig)
    if not yes:
        confirm(f"give {rig}'s miner back to how it ran before m2p?")
    outcome = miner.run_on_rig(host, ssh, "release")
    render.outcomes([outcome], as_json, show_tasks=False)
    if outcome.result == "changed" and not as_json:
        ctx.note(f"Take m2p_miner_unit away from {rig} in the inventory (the unit is gone).")
    raise_failures([outcome])
