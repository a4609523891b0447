"""``m2p economics init|check``: the economics file (timeshare/economics.py), and the starters every file-writing
``init`` shares."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from miner2provider.core import textfiles
from miner2provider.core.errors import UsageError
from miner2provider.market import pricing
from miner2provider.timeshare import economics

from . import render
from .app import Context, cli, pass_ctx

STARTERS = Path(__file__).parent / "templates"


def write_starter(file: str, starter: Path, force: bool, parse: Callable[[str, str], object]) -> None:
    """Write ``starter`` to ``file``; the starter itself must parse clean, and an existing file needs ``force``."""
    text = starter.read_text()
    parse(text, f"m2p's starter {starter.name}")
    target = Path(file)
    if target.exists() and not force:
        raise UsageError(f"{file} exists; use --force to overwrite it")
    try:
        target.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {textfiles.shown(file)}: {exc.strerror}") from None


@cli.group("economics")
def economics_group() -> None:
    """The economics file: what a GPU-hour is worth leased and mined, per card model."""


@economics_group.command("init")
@click.argument("file", default="economics.yml", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@pass_ctx
def economics_init(ctx: Context, file: str, force: bool) -> None:
    """Write a commented starter economics file to FILE (default economics.yml)."""
    write_starter(file, STARTERS / "economics.yml", force,
                  lambda text, where: pricing.check_models(economics.parse(text, where)))
    ctx.info(f"wrote {file}: set your mining income, your cards' watts and your power price, then "
             f"m2p economics check {file}")


@economics_group.command("check")
@click.argument("file", default="economics.yml", type=click.Path(dir_okay=False))
def economics_check(file: str) -> None:
    """Validate an economics file (file:line for a mistake; exit 7): its numbers, and every model it names
    against m2p's card database, with the closest name when one is misspelt."""
    econ = pricing.load_checked(file)
    models = sorted(econ.models())
    render.echo(f"{file}: ok ({econ.currency}; models: {', '.join(models) or 'default only'}"
                f"{'; power priced' if econ.power_price_per_kwh is not None else '; power not priced'})")
