"""The root group imports a command's module when the command is asked for (cli/app.py COMMAND_MODULES)."""

from __future__ import annotations

import subprocess
import sys

import click

from miner2provider.cli import app


def test_every_command_is_mapped_to_the_module_that_registers_it():
    ctx = click.Context(app.cli)
    listed = app.cli.list_commands(ctx)  # imports every module
    assert set(listed) == set(app.COMMAND_MODULES), set(listed) ^ set(app.COMMAND_MODULES)
    for name in listed:
        command = app.cli.get_command(ctx, name)
        assert command is not None and command.callback is not None
        if name != "demo":  # demo: the sandbox harness's own module, or harness.py's fallback
            assert command.callback.__module__ == f"miner2provider.cli.{app.COMMAND_MODULES[name]}", name


def test_m2p_detect_starts_without_the_runner_the_markets_or_the_dashboard():
    """What `m2p detect` costs at start on a fleet's controller: the probe's imports only (run in a fresh Python)."""
    script = ("import sys\nfrom miner2provider.cli import main\n"
              "assert main(['detect', '--help']) == 0\n"
              "print(' '.join(sorted(m for m in sys.modules if m.startswith('miner2provider.'))))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = set(proc.stdout.split())
    assert "miner2provider.cli.detect" in loaded
    heavy = {m for m in loaded if m.startswith(("miner2provider.market", "miner2provider.fleet.pipeline",
                                                "miner2provider.fleet.runner", "miner2provider.dashboard",
                                                "miner2provider.cli.rigs"))}
    assert not heavy, heavy
