"""``m2p sites``: the tunnels of a farm across sites (docs/sites.md).  The plan is fleet/tunnel.py; the runs
are fleet/sites.py; this module only reads options, asks and prints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from miner2provider.detect.ssh import SshOptions
from miner2provider.fleet import sites, tunnel

from . import render
from .app import Context, cli, pass_ctx
from .fleet import _progress, raise_pending
from .options import confirm, inventory_option, json_option, load_inventory, ssh_options, vault_option, yes_option

check_option = click.option("--check", is_flag=True, help="Show what would change; change nothing.  Exit 1: pending.")


def member_run_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """What both commands take: the inventory, --check, --yes, the vault, --json, SSH; and the context."""
    for option in reversed((inventory_option(), check_option, yes_option, vault_option, json_option, ssh_options,
                            pass_ctx)):
        f = option(f)
    return f


@cli.group("sites")
def sites_group() -> None:
    """A farm across sites: each rig's WireGuard tunnel to the farm's hub (its k3s server)."""


@sites_group.command("apply")
@member_run_options
def sites_apply(ctx: Context, inventory_file: str, check: bool, yes: bool, vault_password_file: str | None,
                as_json: bool, ssh: SshOptions) -> None:
    """Set up the tunnels of the inventory's plan: each member makes its own key (it never leaves the member),
    then runs its tunnel with m2p's configuration (public keys only).  A second run changes nothing."""
    hosts = list(load_inventory(inventory_file, vault_password_file).hosts)
    for line in tunnel.site_needs(sites.plan_of(hosts)):
        ctx.note(line)
    if not check and not yes:
        confirm(f"set up the tunnels of {render.counted(len(hosts), 'member')}?")
    outcomes = sites.apply(hosts, ssh, check=check, on_event=_progress(ctx))
    render.outcomes(outcomes, as_json, show_tasks=check)
    raise_pending(outcomes, "m2p sites apply")


@sites_group.command("remove")
@member_run_options
def sites_remove(ctx: Context, inventory_file: str, check: bool, yes: bool, vault_password_file: str | None,
                 as_json: bool, ssh: SshOptions) -> None:
    """Take every member's tunnel off: its unit, interface, configuration and keys."""
    hosts = list(load_inventory(inventory_file, vault_password_file).hosts)
    if not check and not yes:
        confirm(f"take the tunnels of {render.counted(len(hosts), 'member')} off?")
    outcomes = sites.remove(hosts, ssh, check=check, on_event=_progress(ctx))
    render.outcomes(outcomes, as_json, show_tasks=check)
    raise_pending(outcomes, "m2p sites remove")
