"""``m2p detect``: what each rig is and whether it is ready to become a GPU node (its own module: the command a
fleet runs most often starts with the probe's imports only)."""

from __future__ import annotations

import click

from miner2provider.core.errors import RigFailures
from miner2provider.detect.report import report_json
from miner2provider.detect.ssh import SshOptions
from miner2provider.detect.survey import detect, detect_local

from . import render
from .app import Context, cli, pass_ctx
from .options import (
    find_inventory,
    inventory_option,
    json_option,
    limit_option,
    load_inventory,
    ssh_options,
    vault_option,
)


@cli.command("detect")
@inventory_option(required=False)
@limit_option
@click.option("--local", is_flag=True, help="Detect this machine, without SSH (GPUs via pynvml when installed).")
@vault_option
@ssh_options
@json_option
@pass_ctx
def detect_command(ctx: Context, inventory_file: str | None, limit: str | None, local: bool,
                   vault_password_file: str | None, ssh: SshOptions, as_json: bool) -> None:
    """Show what each rig is and whether it is ready to become a GPU node.  Changes nothing."""
    if local:
        reports = [detect_local()]
    else:
        hosts = load_inventory(find_inventory(inventory_file), vault_password_file).select(limit)
        ctx.detail(f"probing {render.counted(len(hosts), 'rig')}, {min(ssh.pool_size, len(hosts))} at a time")
        reports = detect(hosts, ssh, on_done=lambda r: ctx.detail(
            f"  {r.name}: {'ok' if r.ok else 'FAILED: ' + (r.error or '')}"))
    if as_json:
        render.echo_json([report_json(r) for r in reports])
    else:
        for report in reports:
            render.report(ctx, report)
        render.detect_summary(reports)
    failed = sum(1 for r in reports if not r.ok)
    if failed:
        raise RigFailures(failed, len(reports))
