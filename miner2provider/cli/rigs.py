"""Commands that read rigs and inventories and change nothing: init, inventory check, detect,
attributes, status."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import textwrap
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import click

from miner2provider.core import checks, textfiles
from miner2provider.core.errors import InventoryProblems, InventoryProblemsListed, RigFailures, UsageError
from miner2provider.core.inventory import Host
from miner2provider.dashboard import ledger_csv
from miner2provider.dashboard.collect import sweep
from miner2provider.dashboard.export import as_stored, book_rows
from miner2provider.dashboard.history import DEFAULT_PATH, History
from miner2provider.detect.report import RigReport
from miner2provider.detect.ssh import SshOptions
from miner2provider.detect.survey import detect
from miner2provider.fleet import tunnel
from miner2provider.fleet.pipeline import farm_status, fleet_role_vars
from miner2provider.market import DEFAULT, MARKETPLACES, marketplace, of_farm, pricing
from miner2provider.market.base import Marketplace, RigGpus
from miner2provider.market.saved_report import load_report
from miner2provider.timeshare import economics

from . import render
from .app import Context, cli, error_json, pass_ctx
from .options import (
    STARTERS,
    find_inventory,
    inventory_option,
    json_option,
    limit_option,
    load_inventory,
    ssh_options,
    starter_arguments,
    vault_option,
    write_starter,
)

DEFAULT_LABEL = marketplace(DEFAULT).label  # the help's examples: m2p_marketplace's default
POOLED_INDENT = "    # "  # the starter inventory's comments under ``children``


@cli.command()
@starter_arguments("rigs.yml")
@pass_ctx
def init(ctx: Context, file: str, force: bool) -> None:
    """Write a commented starter inventory to FILE (default rigs.yml)."""
    write_starter(file, starter_inventory(marketplace(DEFAULT)), force)
    ctx.info(f"wrote {file}: edit the hosts, then run `m2p inventory check {file}`")


def starter_inventory(market: Marketplace) -> str:
    """The starter inventory, its pooled-farm comment ending with the marketplace's own reason to pool (the seam's
    sentence, wrapped as the comment around it; no line where it gives none)."""
    reason = textwrap.fill(market.pooled_farm, width=108, initial_indent=POOLED_INDENT, subsequent_indent=POOLED_INDENT)
    line = reason + "\n" if reason else ""
    return (STARTERS / "inventory.yml").read_text().replace(POOLED_INDENT + "{pooled_farm}\n", line)


@cli.group("inventory")
def inventory_group() -> None:
    """Work with rig inventories."""


@inventory_group.command("check")
@click.argument("file", type=click.Path(dir_okay=False), required=False)
@vault_option
@json_option
@pass_ctx
def inventory_check(ctx: Context, file: str | None, vault_password_file: str | None, as_json: bool) -> None:
    """Validate an inventory: syntax, addresses, duplicates, m2p_ settings, role variable names, types, key files.
    Every mistake is said, each with its file:line.  FILE: as -i elsewhere (default: $M2P_INVENTORY, then
    ./rigs.yml)."""
    file = find_inventory(file)
    try:
        inv = load_inventory(file, vault_password_file)
    except InventoryProblems as many:
        for problem in many.problems:
            render.problem(problem)
        said = f"{len(many.problems)} mistakes in {file}"
        if as_json:  # the error object every command prints, with each mistake in it
            render.echo_json({"error": said, "file": file, "line": None, "exit_code": many.exit_code,
                              "problems": [error_json(p.message, p.where) for p in many.problems]})
        raise InventoryProblemsListed(f"{said}, each above") from None
    groups = sorted({g for h in inv.hosts for g in h.groups})
    sites = tunnel.plan(list(inv.hosts))
    needs = tunnel.site_needs(sites) if sites else []
    if as_json:
        render.echo_json({"file": file, "ok": True, "groups": groups, "hosts": [
            {"name": h.name, "address": h.address, "port": h.port, "user": h.user, "groups": list(h.groups),
             "password": "set" if h.password else None,
             **({"site": h.var("m2p_site") or "", "tunnel_address": str(sites.member(h.name).address)} if sites
                else {})} for h in inv.hosts], "sites": needs})
        return
    ctx.info(f"{file}: OK, {render.counted(len(inv.hosts), 'rig')} in {render.counted(len(groups), 'group')} "
             f"({', '.join(groups)})")
    for h in inv.hosts:
        ctx.detail(f"  {h.name}: {h.user or '(current user)'}@{h.address}:{h.port}"
                   f"{' password set' if h.password else ''}")
    for line in needs:
        ctx.info(f"  {line}")


@inventory_group.command("vars")
@click.argument("file", type=click.Path(dir_okay=False), required=False)
@vault_option
def inventory_vars(file: str | None, vault_password_file: str | None) -> None:
    """Print the role variables m2p derives for each rig, as a YAML inventory.

    For your own playbooks with the m2p.rigs roles: `ansible-playbook -i FILE -i THIS ...`
    gives the roles what `m2p convert` gives them (no secrets are printed)."""
    inv = load_inventory(find_inventory(file), vault_password_file)
    render.echo_yaml({"all": {"hosts": fleet_role_vars(list(inv.hosts))}})


@cli.command("attributes")
@inventory_option(required=False, help="Probe these rigs now.  [env M2P_INVENTORY]")
@click.option("--from", "report", type=click.Path(dir_okay=False),
              help="Use a saved `m2p detect --json` report instead of probing.")
@click.option("--region", help="Provider attribute location-region (default: the rigs' m2p_location_region).")
@click.option("--gpus-json", "gpus_json_path", type=click.Path(dir_okay=False),
              help=f"Also write the farm's card list in {DEFAULT_LABEL}'s gpus.json shape to this file (for the "
                   "inventory operator's --provider-configs-url; docs: attributes).")
@limit_option
@vault_option
@ssh_options
@json_option
def attributes_command(inventory_file: str | None, report: str | None, region: str | None, gpus_json_path: str | None,
                       limit: str | None, vault_password_file: str | None, ssh: SshOptions, as_json: bool) -> None:
    """GPU node labels per rig and the marketplace's provider attributes for the fleet.  Changes nothing."""
    if region is not None and not checks.is_region(region):
        raise UsageError(f"--region {textfiles.shown(region)}: letters, digits, '.', '_' and '-' only "
                         "(such as us-west)")
    rigs, failed, market = fleet_gpus("attributes", inventory_file, report, limit, vault_password_file, ssh)
    render.attributes(market.label, market.fleet_attributes(rigs, region), failed, as_json)
    if gpus_json_path:
        card_list, lacking = market.card_list(rigs)
        try:
            Path(gpus_json_path).write_text(json.dumps(card_list, indent=2) + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write {textfiles.shown(gpus_json_path)}: {exc.strerror}") from None
        count = sum(len(v["devices"]) for v in card_list.values())
        render.echo(f"wrote {gpus_json_path}: {count} cards, {len(lacking)} of them not in {market.label}'s list "
                    f"({', '.join(lacking[:6])}{', ...' if len(lacking) > 6 else ''})", err=True)
    if failed:
        raise RigFailures(len(failed), len(failed) + len(rigs))


def fleet_gpus(command: str, inventory_file: str | None, report: str | None, limit: str | None,
                vault_password_file: str | None, ssh: SshOptions) -> tuple[list[RigGpus], list[str], Marketplace]:
    """The fleet's GPUs from the rigs now (-i) or a saved detect report (--from); the rigs that failed; and the
    farm's marketplace (the inventory's m2p_marketplace; a saved report carries no setting: the setting's
    default)."""
    if inventory_file and report:
        raise UsageError(f"{command} takes one of -i/--inventory FILE or --from REPORT.json, not both")
    if report:
        return (*load_report(report), marketplace(DEFAULT))
    hosts = load_inventory(find_inventory(inventory_file), vault_password_file).select(limit)
    market = of_farm(h.vars for h in hosts)  # before any rig is asked: a farm on no marketplace is said first
    reports = detect_said(hosts, ssh)
    return gpus_of(hosts, reports), [r.name for r in reports if not r.ok], market


def detect_said(hosts: list[Host], ssh: SshOptions) -> list[RigReport]:
    """Every rig's report; each rig that did not answer said on stderr, one red line."""
    reports = detect(hosts, ssh)
    for r in reports:
        if not r.ok:
            render.echo(click.style(f"{r.name}: FAILED: {r.error}", fg="red"), err=True)
    return reports


def gpus_of(hosts: list[Host], reports: list[RigReport]) -> list[RigGpus]:
    """What the marketplace needs of each rig that answered."""
    by_name = {h.name: h for h in hosts}
    return [RigGpus(r.name, r.facts.gpus, r.facts.cuda, by_name[r.name].var("m2p_location_region"),
                    _schedule_label(by_name[r.name].var("m2p_schedule")), r.facts.amd_gpus,
                    r.facts.agent_status.measured)
            for r in reports if r.ok and r.facts]


@cli.command("pricing")
@inventory_option(required=False, help="Probe these rigs now.  [env M2P_INVENTORY]")
@click.option("--from", "report", type=click.Path(dir_okay=False),
              help="Use a saved `m2p detect --json` report instead of probing.")
@click.option("--economics", "economics_path", required=True, type=click.Path(dir_okay=False),
              help="Mining revenue, power and margin per model (docs: the economics file).")
@click.option("--format", "shape", type=click.Choice(["table", *MARKETPLACES, "json"]), default="table",
              show_default=True, help=f"A marketplace's name: its price mapping ({DEFAULT_LABEL}: the provider "
                                      "chart's price_target_gpu_mappings value).")
@limit_option
@vault_option
@ssh_options
def pricing_command(inventory_file: str | None, report: str | None, economics_path: str, shape: str,
                    limit: str | None, vault_password_file: str | None, ssh: SshOptions) -> None:
    """Per card model and VRAM of the fleet: the lowest lease price per GPU that beats mining (its revenue
    and power, by the economics file's margin).  Changes nothing."""
    econ = economics.load(economics_path)  # its own mistakes first, before any rig is asked
    rigs, failed, market = fleet_gpus("pricing", inventory_file, report, limit, vault_password_file, ssh)
    pricing.check_models(econ, pricing.farm_models(rigs))  # then its models against the farm's cards
    render.pricing(pricing.fleet_floors(rigs, econ), econ, shape, market)
    if failed:
        raise RigFailures(len(failed), len(failed) + len(rigs))


def _schedule_label(schedule: str | None) -> dict[str, str]:
    return {"schedule": Path(schedule).stem} if schedule else {}


@cli.command("status")
@inventory_option()
@limit_option
@vault_option
@ssh_options
@json_option
def status_command(inventory_file: str, limit: str | None, vault_password_file: str | None, ssh: SshOptions,
                   as_json: bool) -> None:
    """Per rig: converged, drifted (and how) or not converged; k3s service, node name, GPUs; the
    time-share agent's mode, since when, next change and last error.  Changes nothing."""
    hosts = load_inventory(inventory_file, vault_password_file).select(limit)
    rows = farm_status(detect(hosts, ssh), hosts)
    if as_json:
        render.echo_json(rows)
    else:
        render.status_table(rows)
    failed = sum(r["state"] == "failed" for r in rows)
    if failed:
        raise RigFailures(failed, len(rows))


@cli.command("history")
@inventory_option()
@limit_option
@vault_option
@ssh_options
@click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None,
              help="The history database (default ~/.local/share/m2p/history.sqlite3).")
@click.option("--days", type=click.IntRange(1, 366), default=7, show_default=True,
              help="Days shown, today included (UTC days).")
@click.option("--csv", "csv_file", is_flag=False, flag_value="-", default=None, metavar="FILE|-",
              help="Write every ledger span of the --days window as CSV to FILE (-, or no FILE: standard output) "
                   "instead of the table (docs: history).")
@click.option("--economics", "economics_path", type=click.Path(dir_okay=False), default=None,
              help="Prices and mining revenue the CSV values the hours at (docs: the economics file); without it "
                   "the CSV's amounts are left empty.")
@json_option
def history_command(inventory_file: str, limit: str | None, vault_password_file: str | None, ssh: SshOptions,
                    db_path: str | None, days: int, csv_file: str | None, economics_path: str | None,
                    as_json: bool) -> None:
    """Sweep the rigs once (the detect probe), keep their detect reports and ledger lines in the history
    database (the same line read twice is kept once), and show each rig's hours per mode over the last
    DAYS days, or write them as CSV for the owner's books (--csv)."""
    if csv_file is not None and as_json:
        raise UsageError("history takes one of --csv and --json, not both")
    if economics_path and csv_file is None:
        raise UsageError("--economics values the CSV's hours: give --csv too")
    econ = pricing.load_checked(economics_path) if economics_path else economics.NONE  # before any rig is asked
    if csv_file not in (None, "-"):
        _never_over_an_input(csv_file, inventory_file, economics_path, db_path or DEFAULT_PATH)
    hosts = load_inventory(inventory_file, vault_password_file).select(limit)
    now = time.time()
    rows = []
    with History(db_path or DEFAULT_PATH) as history:
        reports = sweep(history, hosts, ssh, now)
        if csv_file is not None:
            for report in reports:  # the table would have said them
                if not report.ok:
                    render.echo(click.style(f"{report.name}: this sweep failed: {report.error}", fg="red"), err=True)
            since, until = ledger_csv.window(days, now)
            # one rig's ledger read at a time, written as it comes (a farm's year is never held whole), then the
            # payments the dashboard's wallet reads kept in this history
            rows_of = book_rows(history, hosts, history.latest_snapshots(), as_stored, econ, since, until)
            _write_csv(csv_file, ledger_csv.chunks(rows_of))
        else:
            for report in reports:
                rows.append(render.history_row(report.name, history.seconds_per_day(report.name, days, now),
                                               report.error or ""))
    if csv_file is None and as_json:
        render.echo_json(rows)
    elif csv_file is None:
        render.history_table(rows)
    failed = sum(not r.ok for r in reports)
    if failed:
        raise RigFailures(failed, len(reports))


def _never_over_an_input(csv_file: str, *inputs: str | Path | None) -> None:
    """``--csv FILE`` takes an optional value, so ``--csv rigs.yml`` (the inventory meant for -i) would write the
    books over the inventory: a file the command reads is never the one it writes."""
    target = Path(csv_file).resolve()
    for given in inputs:
        if given is not None and Path(given).resolve() == target:
            raise UsageError(f"--csv {textfiles.shown(csv_file)} is a file this command reads: name another file "
                             "(or -) for the CSV")


def _write_csv(file: str, chunks: Iterable[str]) -> None:
    """The CSV to standard output (``-``) or FILE, its CRLF line ends as written (RFC 4180), chunk by chunk.  A new
    or regular FILE is written beside itself and put in place whole at the end (a run that fails midway leaves the
    last books as they were, never half of new ones), with the old file's mode (a new one's: the umask's); anything
    else (a device, a pipe, a symbolic link) is written through, as it is."""
    if file == "-":
        for chunk in chunks:
            click.echo(chunk, nl=False)
        return
    target = Path(file)
    try:
        lines = _written_beside(target, chunks) if _replaceable(target) else _written_through(target, chunks)
    except OSError as exc:
        raise UsageError(f"cannot write {textfiles.shown(file)}: {exc.strerror}") from None
    render.echo(f"wrote {file}: {render.counted(lines - 1, 'row')}", err=True)


def _replaceable(target: Path) -> bool:
    try:
        return stat.S_ISREG(target.lstat().st_mode)
    except FileNotFoundError:
        return True


def _written_through(target: Path, chunks: Iterable[str]) -> int:
    with open(target, "w", encoding="utf-8", newline="") as out:
        return _copied(chunks, out)


def _copied(chunks: Iterable[str], out: IO[str]) -> int:
    """Write ``chunks`` to ``out``; the lines written."""
    lines = 0
    for chunk in chunks:
        out.write(chunk)
        lines += chunk.count("\n")
    return lines


def _written_beside(target: Path, chunks: Iterable[str]) -> int:
    part = tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="", dir=target.parent, delete=False,
                                       prefix=f".{target.name}.", suffix=".part")
    try:
        with part:
            lines = _copied(chunks, part)
            part.flush()
            os.fsync(part.fileno())
        if target.exists():
            shutil.copymode(target, part.name)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(part.name, 0o666 & ~umask)
        os.replace(part.name, target)
    except BaseException:
        Path(part.name).unlink(missing_ok=True)
        raise
    return lines
