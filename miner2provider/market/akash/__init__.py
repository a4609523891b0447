"""Akash: the GPU card database in Akash's model names, node labels, provider attributes,
gpus.json, and price mappings for Akash's bid script; ``AKASH`` is its implementation of the
marketplace seam (market/base.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miner2provider.detect.facts.gpu import Gpus
from miner2provider.market.akash import (
    chain,
    charts,
    checkup,
    gpus_json,
    outside,
    provider,
    provider_file,
    provider_status,
    published,
    rules,
    stack,
    wallet,
)
from miner2provider.market.akash import region as regions
from miner2provider.market.akash.labels import node_labels
from miner2provider.market.akash.prices import akash_mappings
from miner2provider.market.base import (
    FarmFacts,
    FleetAttributes,
    ProviderFarm,
    ProviderParts,
    ProviderStack,
    ProviderState,
    RigGpus,
    Verdict,
)
from miner2provider.market.pricing import Floor
from miner2provider.market.wallet import WalletRead


@dataclass(frozen=True)
class Akash:
    name: str = "akash"
    label: str = "Akash"
    # The provider's own services (helm-charts: provider, operators, gateway) run in akash-services.
    system_namespaces: tuple[str, ...] = ("akash-services",)
    # Akash's provider labels every pod of a lease's workloads with the manifest service it runs
    # (provider cluster/kube/builder/workload.go labels(): akash.network=true,
    # akash.network/manifest-service=<service>); its own services' pods lack the key.
    lease_label: str = "akash.network/manifest-service"

    # Akash's inventory counts a node's GPUs by one model (rules.py).
    one_model_per_node: str = rules.ONE_MODEL_PER_NODE
    slices_sold_whole: str = rules.SLICES_SOLD_WHOLE
    # Its audit's cluster-wide floor, which only a pooled farm reaches (checkup.py).
    pooled_farm: str = checkup.POOLED_FARM

    def unlisted_card(self, pci_id: str) -> str:
        return rules.unlisted_card(pci_id)

    def region_problem(self, region: str) -> str:
        return regions.problem(region)

    def node_labels(self, gpus: Gpus, cuda: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        return node_labels(gpus, cuda, extra)

    def fleet_attributes(self, rigs: list[RigGpus], region: str | None = None) -> FleetAttributes:
        return provider.fleet_attributes(rigs, region)

    def card_list(self, rigs: Iterable[RigGpus]) -> tuple[dict[str, Any], list[str]]:
        return gpus_json.gpus_json(rigs)

    def price_mappings(self, floors: Sequence[Floor]) -> str:
        return akash_mappings(floors)

    def provider_starter(self) -> str:
        return provider_file.STARTER.read_text()

    def read_provider_file(self, text: str, where: str) -> provider_file.ProviderFile:
        return provider_file.parse(text, where)

    @property
    def provider_parts(self) -> ProviderParts:
        return stack.PARTS

    def provider_stack(self, provider: provider_file.ProviderFile, farm: ProviderFarm, charts_folder: Path,
                       environ: Mapping[str, str]) -> ProviderStack:
        secret = wallet.values(provider, environ)
        credential = environ.get(provider.acme_dns.credential_env, "") if provider.acme_dns else ""
        return stack.build(provider, farm, charts.load(charts_folder, provider.charts), secret, credential)

    def offline_files(self) -> list[dict[str, str]]:
        """The --charts folder's files as `m2p bundle` fetches them, each with its publisher's digest."""
        return [dict(entry) for entry in published.FILES]

    def provider_status(self, provider: provider_file.ProviderFile, ingress_address: str,
                        url: str | None = None) -> ProviderState:
        return provider_status.fetch(url or provider_status.status_url(ingress_address))

    def wallet_reader(self, provider: provider_file.ProviderFile) -> Callable[[], WalletRead] | None:
        """The wallet and leases from the provider file's rest_node (None without one: the RPC answers neither)."""
        return chain.reader(provider)

    @property
    def provider_fetches(self) -> tuple[str, ...]:
        return checkup.PRICE_FEEDS

    def public_target(self, provider: provider_file.ProviderFile) -> str:
        """The first public address DNS gives provider.<domain> ("" when none): the ingress rig's route toward it
        is the way leases' traffic goes back out."""
        return checkup.public_answer(outside.resolve(checkup.names(provider)[0]))

    def provider_check(self, provider: provider_file.ProviderFile, farm: FarmFacts,
                       environ: Mapping[str, str]) -> list[Verdict]:
        seen = checkup.Seen(farm, {name: outside.resolve(name) for name in checkup.names(provider)},
                            outside.rpc_status(provider.rpc_node), wallet.problem(provider, environ),
                            outside.reach(farm.ingress_address, checkup.INGRESS_PORTS), acme_problem(provider, environ))
        return checkup.verdicts(provider, seen)


def acme_problem(provider: provider_file.ProviderFile, environ: Mapping[str, str]) -> str:
    """Why the DNS provider's credential would not do, or "" (set, or no real certificate asked for)."""
    if provider.acme_dns is None or environ.get(provider.acme_dns.credential_env):
        return ""
    return (f"the environment variable {provider.acme_dns.credential_env} (acme_dns.credential_env in "
            f"{provider.where('acme_dns')}) is empty or unset: export the {provider.acme_dns.provider} credential "
            "cert-manager's DNS-01 solver needs before provider apply")


AKASH = Akash()
