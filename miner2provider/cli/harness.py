"""Commands other distributions add to ``m2p`` (entry points ``miner2provider.commands``): the sandbox
harness adds ``m2p demo``.  Without it, ``m2p demo`` says how to get it."""

from __future__ import annotations

from importlib.metadata import entry_points

import click

from miner2provider.core.errors import UsageError

from .app import cli

GROUP = "miner2provider.commands"


def load() -> None:
    for entry in entry_points(group=GROUP):
        try:
            entry.load()  # the module registers its commands on ``cli``
        except ImportError:
            continue  # a broken or partial install of the harness: the fallback below says what to do
    if "demo" not in cli.commands:
        cli.add_command(demo_missing, "demo")


@click.command("demo")
def demo_missing() -> None:
    """Try m2p without rigs on a SANDBOX rig (needs the sandbox harness, m2p-sandbox)."""
    raise UsageError("m2p demo needs the sandbox harness (m2p-sandbox), which a plain install leaves out: from a "
                     "clone of m2p's repository run scripts/install as root, then .venv/bin/m2p demo")
