"""``m2p alerts test``: one test message to every receiver of an alert file (alerts/config.py), ok or why not each;
the rules themselves are judged by ``m2p dashboard --alerts FILE`` on every sweep."""

from __future__ import annotations

import click

from miner2provider.alerts import config as alert_file
from miner2provider.alerts.service import send_test
from miner2provider.core.errors import M2PError

from . import render
from .app import cli


@cli.group("alerts")
def alerts_group() -> None:
    """Alerts: the receivers of an alert file (m2p dashboard --alerts FILE judges the rules on every sweep)."""


@alerts_group.command("test")
@click.argument("file", type=click.Path(dir_okay=False))
def alerts_test(file: str) -> None:
    """Send one test message to every receiver of the alert FILE and say, per receiver, ok or why it failed (no
    secret is ever shown).  Exit 1 when any receiver failed; 2 for a mistake in the file (file:line)."""
    config = alert_file.load(file)
    results = send_test(config.receivers)
    for receiver, why in results:
        verdict = click.style("ok", fg="green") if not why else click.style(f"failed: {why}", fg="red")
        render.echo(f"{receiver.name} ({receiver.kind}): {verdict}")
    failed = sum(1 for _, why in results if why)
    if failed:
        raise M2PError(f"{failed} of {render.counted(len(results), 'receiver')} failed")
