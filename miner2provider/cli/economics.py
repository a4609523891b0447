"""``m2p economics init`` and ``m2p economics check``: the economics file (timeshare/economics.py)."""

from __future__ import annotations

import click

from miner2provider.market import pricing
from miner2provider.timeshare import economics

from . import render
from .app import Context, cli, pass_ctx
from .options import STARTERS, starter_arguments, write_starter


@cli.group("economics")
def economics_group() -> None:
    """The economics file: what a GPU-hour is worth leased and mined, per card model."""


@economics_group.command("init")
@starter_arguments("economics.yml")
@pass_ctx
def economics_init(ctx: Context, file: str, force: bool) -> None:
    """Write a commented starter economics file to FILE (default economics.yml)."""
    text = (STARTERS / "economics.yml").read_text()
    pricing.check_models(economics.parse(text, "m2p's starter economics.yml"))  # the starter itself reads clean
    write_starter(file, text, force)
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
