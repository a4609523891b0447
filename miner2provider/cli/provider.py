"""``m2p provider``: the farm as a marketplace provider: ``init`` writes a commented provider
file, ``apply`` installs the marketplace's provider stack on the farm's k3s server, ``remove`` takes it
off.  Everything marketplace-specific is behind the seam (market/base.py); the server run is fleet/provider.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from miner2provider.core import textfiles
from miner2provider.core.errors import (
    ChangesPending,
    ProviderError,
    ProviderFileError,
    ProviderNotReady,
    RigFailures,
    UsageError,
)
from miner2provider.core.inventory import Host
from miner2provider.detect.facts.listening import ListeningFact
from miner2provider.detect.report import RigReport
from miner2provider.detect.ssh import SshOptions
from miner2provider.detect.survey import ask, detect
from miner2provider.fleet import drain, guards
from miner2provider.fleet import provider as provider_run
from miner2provider.fleet.bundle import charts as bundle_charts
from miner2provider.fleet.bundle.download import make_charts_folder
from miner2provider.fleet.pipeline import RigOutcome, drain_rigs, farm_status
from miner2provider.market import DEFAULT, marketplace, of_farm, pricing
from miner2provider.market.base import (
    FarmFacts,
    Marketplace,
    ProviderFarm,
    ProviderInstaller,
    PublicTarget,
    Verdict,
    provider_installer,
)
from miner2provider.market.cards import cards_of
from miner2provider.timeshare import economics

from . import render
from .app import Context, cli, pass_ctx
from .bundle import url_pairs
from .fleet import _progress, raise_failures
from .options import (
    confirm,
    inventory_option,
    json_option,
    load_inventory,
    ssh_options,
    starter_arguments,
    vault_option,
    write_starter,
    yes_option,
)
from .rigs import detect_said, gpus_of

provider_option = click.option("-p", "--provider", "provider_path", default="provider.yml", show_default=True,
                               type=click.Path(dir_okay=False), envvar="M2P_PROVIDER",
                               help="The provider file (m2p provider init writes one).  [env M2P_PROVIDER]")
artifacts_option = click.option("--keep-artifacts", type=click.Path(file_okay=False),
                                help="Copy ansible-runner's artifacts (events, stdout) here, for audits.")


def server_run_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """What every command that runs on the k3s server takes: --yes, the vault, artifacts, --json, SSH."""
    for option in reversed((yes_option, vault_option, artifacts_option, json_option, ssh_options)):
        f = option(f)
    return f


@cli.group("provider")
def provider_group() -> None:
    """The farm as a marketplace provider: its provider file, then install or take off the provider."""


@provider_group.command("init")
@starter_arguments("provider.yml")
@pass_ctx
def provider_init(ctx: Context, file: str, force: bool) -> None:
    """Write a commented starter provider file to FILE (default provider.yml)."""
    # No inventory to ask a farm's marketplace of: the starter is that of m2p_marketplace's default.
    installer = provider_installer(marketplace(DEFAULT))
    text = installer.provider_starter()
    installer.read_provider_file(text, "m2p's starter provider file")  # the starter itself reads clean
    write_starter(file, text, force)
    ctx.info(f"wrote {file}: set your domain, wallet, ingress rig and RPC node")


@provider_group.command("fetch")
@click.argument("directory", default="charts", type=click.Path(file_okay=False))
@click.option("--provider-extra", "extras", multiple=True, metavar="NAME",
              help="An optional part of the provider to fetch too: cert-manager (for a DNS-01 wildcard "
                   "certificate); repeat it.")
@click.option("--chart-url", "chart_urls", multiple=True, metavar="FILE=URL",
              help="Fetch FILE from URL (a mirror); it is still checked against its pin.")
@click.option("--image-registry", "image_registries", multiple=True, metavar="HOST=URL",
              help="Pull charts kept in HOST's registry from URL (a mirror); repeat it.")
@pass_ctx
def provider_fetch(ctx: Context, directory: str, extras: tuple[str, ...], chart_urls: tuple[str, ...],
                   image_registries: tuple[str, ...]) -> None:
    """Download the provider's chart archives and CRD files into DIRECTORY (new or empty; default charts), each
    checked against the digest its publisher lists, for `m2p provider apply --charts DIRECTORY`.

    For a controller and rigs with internet; `m2p bundle` carries the same files, and the images, for rigs
    without."""
    pins = bundle_charts.select(bundle_charts.marketplace_files(), extras)
    if not pins:
        raise UsageError("this marketplace's provider names no files to fetch")
    ctx.info(f"fetching the provider's {len(pins)} chart files into {directory} ...")
    fetched = make_charts_folder(directory, pins, chart_urls=url_pairs("--chart-url", "FILE", chart_urls),
                                 registry_urls=url_pairs("--image-registry", "HOST", image_registries))
    render.echo(f"provider charts: {directory} ({len(fetched)} files, each checked): "
                f"m2p provider apply --charts {directory}")
    render.warnings([f"{p.file}: {p.caveat}" for p in pins if p.caveat])


@provider_group.command("check")
@inventory_option()
@provider_option
@vault_option
@json_option
@ssh_options
def provider_check(inventory_file: str, provider_path: str, vault_password_file: str | None, as_json: bool,
                   ssh: SshOptions) -> None:
    """Is the farm ready to be a provider?  One verdict per need (cores and memory, the ingress rig's address, ports
    and port forwarding, DNS, the RPC node, the price feed from the server, one GPU model per rig, the wallet), each
    with what to do.  Reaches only the rigs, DNS, the RPC node and the ingress's ports, from the k3s server the
    marketplace's price feeds, and from the ingress rig the echo service provider.yml names, if any (the address
    the internet sees, where carrier-grade NAT shows); changes nothing.  Exit 8 when something must be fixed
    first."""
    hosts = _hosts(inventory_file, vault_password_file)
    market, installer, provider = farm_provider(provider_path, hosts)
    server = provider_run.server_of(hosts)
    ingress = ingress_of(provider, hosts)
    reports = detect(hosts, ssh)
    facts = [r.facts for r in reports if r.facts]
    listening = ask(ingress, ListeningFact, ssh)
    models = {rig.name: tuple(sorted({c.slug for c in cards_of(rig.gpus)})) for rig in gpus_of(hosts, reports)}
    farm = FarmFacts(len(facts), sum(f.cpu.cores for f in facts), sum(f.memory.total_mb for f in facts),
                     ingress.address, listening, models,
                     provider_run.server_reaches(server, installer.provider_fetches, ssh),
                     provider_run.ingress_sight(ingress, getattr(provider, "public_address_echo", ""),
                                                market.public_target(provider) if isinstance(market, PublicTarget)
                                                else "", ssh))
    # A rig that does not answer is one verdict, not the end of the check: the others still say what to do.
    found = [Verdict("fail", "rigs", f"{r.name} did not answer ({r.error}): its cores and memory are not counted, "
                                     "and provider apply waits until every rig answers") for r in reports if not r.ok]
    found += installer.provider_check(provider, farm, os.environ)
    render.verdicts(found, as_json)
    failed = [v for v in found if v.level == "fail"]
    if failed:
        raise ProviderNotReady(f"{len(failed)} of {len(found)} checks failed: fix them, then check again")


@provider_group.command("status")
@inventory_option()
@provider_option
@click.option("--url", help="The provider's status URL (default: https://<ingress rig>:8443/status).")
@vault_option
@json_option
@ssh_options
def provider_status(inventory_file: str, provider_path: str, url: str | None, vault_password_file: str | None,
                    as_json: bool, ssh: SshOptions) -> None:
    """The provider's own status (active leases, open bids, deployments) beside what m2p sees of each rig
    (converged, its agent's mode: mining, offered, leasing, cordoned).  Changes nothing."""
    hosts = _hosts(inventory_file, vault_password_file)
    market, installer, provider = farm_provider(provider_path, hosts)
    ingress = ingress_of(provider, hosts)
    state = installer.provider_status(provider, ingress.address, url)
    rows = farm_status(detect(hosts, ssh), hosts)
    render.provider_state(market.label, state, rows, as_json)
    failed = sum(r["state"] == "failed" for r in rows)
    if failed:
        raise RigFailures(failed, len(rows))
    if state.error:
        raise ProviderNotReady(f"{market.label}'s provider at {state.url}: {state.error}")


@provider_group.command("apply")
@inventory_option()
@provider_option
@click.option("--economics", "economics_path", required=True, type=click.Path(dir_okay=False),
              help="Mining revenue, power and margin per model: every model's lease floor becomes its price.")
@click.option("--charts", "charts_dir", required=True, type=click.Path(file_okay=False), envvar="M2P_PROVIDER_CHARTS",
              help="The folder with the marketplace's chart archives (<chart>-<version>.tgz) and CRDs, as the "
                   "provider guide in docs/ lists them.  [env M2P_PROVIDER_CHARTS]")
@click.option("--check", is_flag=True, help="Show whether the server would change; change nothing.  Exit 1: pending.")
@click.option("--rotate-token", is_flag=True,
              help="Replace the reclaimer's API token even where nothing else changed (every apply that changes "
                   "something replaces it anyway); the old token stops working.")
@server_run_options
@pass_ctx
def provider_apply(ctx: Context, inventory_file: str, provider_path: str, economics_path: str, charts_dir: str,
                   check: bool, rotate_token: bool, yes: bool, vault_password_file: str | None,
                   keep_artifacts: str | None, as_json: bool, ssh: SshOptions) -> None:
    """Install the marketplace's provider on the farm's k3s server (through k3s's own Helm controller), priced
    at every model's lease floor.  Nothing is installed unless every rig answers and every value checks."""
    hosts = _hosts(inventory_file, vault_password_file)
    market, installer, provider = farm_provider(provider_path, hosts)
    econ = economics.load(economics_path)  # its own mistakes first, before any rig is asked
    server = provider_run.server_of(hosts)
    ingress = ingress_of(provider, hosts)
    reports = _every_rig(hosts, ssh)
    rigs = gpus_of(hosts, reports)
    pricing.check_models(econ, pricing.farm_models(rigs))  # then its models against the farm's cards
    farm = ProviderFarm(market.fleet_attributes(rigs, provider.region or None).attributes,
                        tuple(pricing.fleet_floors(rigs, econ)), server.node_name,
                        market.card_list(rigs)[0], ingress.node_name)
    stack = installer.provider_stack(provider, farm, Path(charts_dir), os.environ)
    prices = stack.values.get("provider", {}).get("price_target_gpu_mappings", "")
    ctx.note(f"{market.label} provider for {render.counted(len(rigs), 'rig')} on {server.name}: "
             f"{len(farm.attributes)} attributes; prices (USD per GPU-month): {prices}")
    if not check and not yes:
        confirm(f"install {market.label}'s provider on {server.name}?")
    outcome = provider_run.apply(server, hosts, stack, installer.provider_parts, ssh, check=check,
                                 rotate_token=rotate_token, on_event=_progress(ctx, listed=check),
                                 keep_artifacts=_path(keep_artifacts))
    _finish([outcome], as_json, check, "m2p provider apply")


@provider_group.command("remove")
@inventory_option()
@click.option("--check", is_flag=True, help="Show whether the server would change; change nothing.  Exit 1: pending.")
@click.option("--drain", "drain_wait", is_flag=True,
              help="Wait for running leases to end (each rig's agent cordons its node) instead of refusing.")
@click.option("--drain-timeout", default=guards.DEFAULT_DRAIN_TIMEOUT, show_default=True, metavar="DURATION",
              help="How long --drain waits (90s, 30m, 2h, 1d).")
@server_run_options
@pass_ctx
def provider_remove(ctx: Context, inventory_file: str, check: bool, drain_wait: bool, drain_timeout: str, yes: bool,
                    vault_password_file: str | None, keep_artifacts: str | None, as_json: bool,
                    ssh: SshOptions) -> None:
    """Take the marketplace's provider off the farm's k3s server (refused while leases run).  The wallet stays
    yours; namespaces and the marketplace's CRDs stay (deleting a CRD deletes every object of its kind)."""
    timeout_s = guards.parse_span(drain_timeout)
    hosts = _hosts(inventory_file, vault_password_file)
    market = of_farm(h.vars for h in hosts)
    installer = provider_installer(market)
    server = provider_run.server_of(hosts)
    leased = [(h, r.facts.agent_status.leases) for h, r in zip(hosts, _every_rig(hosts, ssh), strict=True)
              if r.facts and r.facts.agent_status.leases]
    if leased and not drain_wait:
        now = datetime.now(UTC)
        raise ProviderError("; ".join(guards.refusal(h.name, running, now) for h, running in leased)
                            + " (the provider serves those leases: --drain waits for them)")
    if not check and not yes:
        confirm(f"take {market.label}'s provider off {server.name}?")
    drained = [h for h, _ in leased]
    try:
        if drained and not check:
            failed: dict[str, RigOutcome] = {}
            drain_rigs(drained, ssh, timeout_s, failed, _progress(ctx))
            if failed:
                raise ProviderError("; ".join(o.message for o in failed.values()))
        outcome = provider_run.remove(server, hosts, installer.provider_parts, ssh, check=check,
                                      on_event=_progress(ctx, listed=check), keep_artifacts=_path(keep_artifacts))
    finally:
        if drained and not check:
            drain.request(drained, ssh, on=False)
    _finish([outcome], as_json, check, "m2p provider remove")


def farm_provider(path: str, hosts: list[Host]) -> tuple[Marketplace, ProviderInstaller, Any]:
    """The farm's marketplace (its rigs' m2p_marketplace), its provider installer (a ProviderError when it has
    none) and its provider file, checked (every mistake at its file:line)."""
    market = of_farm(h.vars for h in hosts)
    installer, provider = read_provider(path, market)
    return market, installer, provider


def read_provider(path: str, market: Marketplace | None = None) -> tuple[ProviderInstaller, Any]:
    """``market``'s provider installer and its provider file, checked (every mistake at its file:line).  Pass the
    farm's marketplace (``farm_provider``); None is m2p_marketplace's default, for a caller that reads no rig's."""
    installer = provider_installer(market or marketplace(DEFAULT))
    return installer, installer.read_provider_file(textfiles.read_text(path, "provider file", ProviderFileError),
                                                   path)


def _hosts(inventory_file: str, vault_password_file: str | None) -> list[Host]:
    return list(load_inventory(inventory_file, vault_password_file).hosts)


def ingress_of(provider: Any, hosts: list[Host]) -> Host:
    """The provider file's ingress rig among the inventory's rigs; a name the inventory lacks is its line's error."""
    by_name = {h.name: h for h in hosts}
    if provider.ingress_rig not in by_name:
        names = sorted(by_name)
        raise ProviderFileError(f"ingress_rig {textfiles.shown(provider.ingress_rig)} is not a rig of the inventory "
                                f"({', '.join(names[:6])}{', ...' if len(names) > 6 else ''})",
                                where=provider.where("ingress_rig"))
    rig = by_name[provider.ingress_rig]
    if not {"k3s_server", "k3s_agent"} & set(rig.groups):
        raise ProviderFileError(f"ingress_rig {textfiles.shown(rig.name)} is in neither k3s_server nor k3s_agent: the "
                                "ingress runs on a node of the farm's cluster (convert the rig in one of them first)",
                                where=provider.where("ingress_rig"))
    return rig


def _every_rig(hosts: list[Host], ssh: SshOptions) -> list[RigReport]:
    """Every rig's report; one that does not answer stops the command before anything changes (the provider's
    attributes, prices and lease guard need the whole farm)."""
    reports = detect_said(hosts, ssh)
    failed = [r for r in reports if not r.ok]
    if failed:
        raise RigFailures(len(failed), len(reports))
    return reports


def _path(text: str | None) -> Path | None:
    return Path(text) if text else None


def _finish(outcomes: list[RigOutcome], as_json: bool, check: bool, command: str) -> None:
    render.outcomes(outcomes, as_json, show_tasks=check)
    raise_failures(outcomes)
    if check and any(o.result == "pending" for o in outcomes):
        raise ChangesPending(f"the provider has changes pending: run `{command}`")
