"""``m2p provider``: the farm as a marketplace provider (issue 35).  So far ``init``: a commented starter
provider file, checked by the same parser the other provider commands will read it with."""

from __future__ import annotations

from pathlib import Path

import click

from miner2provider.core import textfiles
from miner2provider.core.errors import UsageError
from miner2provider.market import marketplace

from .app import Context, cli, pass_ctx


@cli.group("provider")
def provider_group() -> None:
    """The farm as a marketplace provider: its provider file (more to come: check, apply, status, remove)."""


@provider_group.command("init")
@click.argument("file", default="provider.yml", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@pass_ctx
def provider_init(ctx: Context, file: str, force: bool) -> None:
    """Write a commented starter provider file to FILE (default provider.yml)."""
    target = Path(file)
    market = marketplace()
    text = market.provider_starter()
    market.read_provider_file(text, "m2p's starter provider file")  # the starter itself reads clean
    if target.exists() and not force:
        raise UsageError(f"{file} exists; use --force to overwrite it")
    try:
        target.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {textfiles.shown(file)}: {exc.strerror}") from None
    ctx.info(f"wrote {file}: set your domain, wallet files, ingress rig and RPC node")
