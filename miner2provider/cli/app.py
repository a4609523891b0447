"""The root ``m2p`` group and the entry point: expected errors are one line, bugs go to a debug log.

Expected failures (``M2PError``) become one red line and the exit code of their class
(``miner2provider.core.errors``); anything else is a bug: its traceback goes to a debug log and
the line says where.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import click

from miner2provider import __version__
from miner2provider.core.errors import ABORTED, INTERNAL_ERROR, ChangesPending, M2PError, UsageError
from miner2provider.core.inventory import Secret
from miner2provider.core.private import UnsafePath, open_private_append
from miner2provider.core.textfiles import printable
from miner2provider.detect.ssh import redact


class Context:
    """Verbosity, shared by every command: -v adds detail, -q keeps only errors and summaries."""

    def __init__(self, verbosity: int) -> None:
        self.verbosity = verbosity

    def info(self, text: str) -> None:
        if self.verbosity >= 0:
            click.echo(printable(text, keep_style=True))

    def note(self, text: str) -> None:
        """Progress and notes: on stderr, so that --json output stays clean."""
        if self.verbosity >= 0:
            click.echo(printable(text, keep_style=True), err=True)

    def detail(self, text: str) -> None:
        if self.verbosity > 0:
            click.echo(printable(text, keep_style=True), err=True)


pass_ctx = click.make_pass_decorator(Context)


# Which module of miner2provider.cli registers each top-level command ("demo": other distributions', through
# harness.py).  A command's module is imported when the command is asked for: `m2p detect` loads the probe and its
# report, not the dashboard, the charts and the runner (about 0.25 s of CPU for every m2p started, which at 200
# rigs was a quarter of detect's CPU per rig beyond the bare probe's; benchmarks/detect_fanout.py).
COMMAND_MODULES = {
    "init": "rigs", "inventory": "rigs", "attributes": "rigs", "pricing": "rigs", "status": "rigs", "history": "rigs",
    "detect": "detect", "plan": "fleet", "convert": "fleet", "revert": "fleet", "remove": "fleet",
    "bundle": "bundle", "dashboard": "dashboard", "economics": "economics", "keys": "keys", "miner": "miner",
    "provider": "provider", "schedule": "schedule", "sites": "sites", "join": "sites", "demo": "harness",
    "alerts": "alerts",
}


class LazyCommands(click.Group):
    """The root group: each command's module is imported the first time the command is looked up, and every one of
    them when the commands are listed (``m2p --help``, the command pages)."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            load_commands(COMMAND_MODULES[cmd_name])
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in sorted(set(COMMAND_MODULES.values())):
            load_commands(module)
        return super().list_commands(ctx)


def load_commands(module: str) -> None:
    """Import ``miner2provider.cli.<module>``, which registers its commands on ``cli``."""
    loaded = importlib.import_module(f"miner2provider.cli.{module}")
    if module == "harness":
        loaded.load()  # commands other distributions add (the sandbox harness: m2p demo)


@click.group(cls=LazyCommands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="m2p")
@click.option("-v", "--verbose", count=True, help="More detail (progress per rig).")
@click.option("-q", "--quiet", count=True, help="Only errors and the summary.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: int) -> None:
    """m2p: turn GPU mining rigs into Kubernetes GPU providers, keeping mining."""
    ctx.obj = Context(verbose - quiet)


def debug_log_path() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "m2p" / "debug.log"
    return Path(os.environ.get("M2P_DEBUG_LOG", default))


MAX_LINE = 300  # an error is one line a terminal shows whole


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args[: args.index("--")] if "--" in args else "--json" in args
    try:
        cli.main(args=args, prog_name="m2p", standalone_mode=False)
    except ChangesPending as exc:  # a result (exit 1, as diff's), not an error
        click.echo(click.style(one_line(f"m2p: {exc.message}"), fg="yellow"), err=True)
        return exc.exit_code
    except M2PError as exc:
        return _error(exc.message, exc.where, exc.exit_code, as_json and not exc.told_in_json)
    except click.exceptions.Abort:
        click.echo("m2p: aborted", err=True)
        return ABORTED
    except click.ClickException as exc:
        hint = f" (m2p {exc.ctx.command_path.partition(' ')[2]} --help)".replace("  ", " ") \
            if isinstance(exc, click.UsageError) and exc.ctx is not None else ""
        return _error(exc.format_message() + hint, None, UsageError.exit_code, as_json)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - unexpected: keep the traceback for the bug report
        log = debug_log_path()
        held = [Secret(s) for s in list(Secret.made)]  # every secret this process read: masked below
        try:
            # 0600 in a 0700 folder, secrets masked: a traceback may quote a rig's data or a password.
            entry = f"--- {datetime.datetime.now().isoformat()} m2p {__version__} {sys.argv!r}\n" \
                    + traceback.format_exc()
            with os.fdopen(open_private_append(log), "a") as f:
                f.write(redact(entry, held))
            where = f"traceback saved to {log}"
        except (OSError, UnsafePath) as why:
            where = f"could not write the debug log: {why}"
        said = redact(f"m2p: internal error: {type(exc).__name__}: {exc}", held)
        click.echo(click.style(one_line(said, f" ({where})"),
                               fg="red"), err=True)
        return INTERNAL_ERROR
    return 0


def one_line(text: str, tail: str = "") -> str:
    """``text`` + ``tail`` as one printable line of at most MAX_LINE characters (``text`` is what is cut)."""
    text = printable(text)
    room = MAX_LINE - len(tail)
    return (text if len(text) <= room else text[: room - 3] + "...") + tail


def _error(message: str, where: str | None, code: int, as_json: bool) -> int:
    """One red line on stderr; with --json also ``{"error", "file", "line", "exit_code"}`` on stdout."""
    click.echo(click.style(one_line(f"m2p: error: {where}: {message}" if where else f"m2p: error: {message}"),
                           fg="red"), err=True)
    if as_json:
        click.echo(json.dumps({**error_json(message, where), "exit_code": code}))
    return code


def error_json(message: str, where: str | None) -> dict[str, Any]:
    """An error as JSON: ``{"error", "file", "line"}`` (line: None when ``where`` names no line)."""
    file, line = where, None
    if where and ":" in where and where.rsplit(":", 1)[1].isdecimal():
        file, number = where.rsplit(":", 1)
        line = int(number)
    return {"error": one_line(message), "file": file, "line": line}


def entry() -> None:
    sys.exit(main())
