"""The marketplace seam: what m2p needs of a GPU marketplace, whichever it is.

Two parts, in the manner of pyinfra's connectors (a small required interface, optional capabilities the
caller asks about):

- ``Marketplace``, the listing, which every marketplace implements: how it labels a node (``node_labels``: its
  labels and m2p's own, market/labels.py), what it tells buyers of a fleet (``fleet_attributes``), its own card
  list (``card_list``), lease prices in its own format (``price_mappings``), its own services on the cluster
  (``system_namespaces``: never leases), and its rules: one GPU model per node (``one_model_per_node``), what
  becomes of a card its own list lacks (``unlisted_card``), which region names it takes (``region_problem``).
- ``ProviderInstaller``, an optional capability: install, check and remove its provider on the farm's server
  (`m2p provider ...`).  Callers ask ``provider_installer(market)``, which says clearly when a marketplace lacks it.

The types here are the seam's: what m2p knows of a rig, and what a marketplace says back.
m2p's ``m2p.io/`` labels are the internal truth; nothing outside market/ reads a marketplace's labels.
Implementations register in market/__init__.py.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from miner2provider.core.errors import ProviderError
from miner2provider.detect.facts.amd import AmdGpu
from miner2provider.detect.facts.gpu import Gpus
from miner2provider.detect.facts.listening import Listening
from miner2provider.market.pricing import Floor
from miner2provider.rigside.status import Measured


@dataclass(frozen=True)
class RigGpus:
    """What a marketplace needs to know of one rig."""

    name: str
    gpus: Gpus
    cuda: str
    region: str | None = None
    labels_extra: dict[str, str] = field(default_factory=dict)
    amd: tuple[AmdGpu, ...] = ()  # read from sysfs; listed, never converted yet
    measured: Measured | None = None  # the agent's average of the miner's own stats (HiveOS rigs)


@dataclass(frozen=True)
class RigAttributes:
    name: str
    labels: dict[str, str]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class FleetAttributes:
    rigs: tuple[RigAttributes, ...]
    attributes: tuple[tuple[str, str], ...]  # (key, value) in output order
    warnings: tuple[str, ...]
    unknown_entries: tuple[str, ...]  # the fleet's cards the marketplace's own list lacks, ready to add
    card_list_where: str = ""  # where in the marketplace's own card list those entries go


@dataclass(frozen=True)
class ProviderFarm:
    """What the provider offers: the fleet's attributes (``fleet_attributes``), each model's lease floor
    (market/pricing.py) and the node that runs the provider's own pods (the k3s server: always on, never
    handed to a miner)."""

    attributes: tuple[tuple[str, str], ...]
    floors: tuple[Floor, ...]
    server_node: str
    card_list: dict[str, Any] = field(default_factory=dict)  # the marketplace's card list for this farm (card_list)
    ingress_node: str = ""  # the node that takes the farm's traffic (its data plane's hostPorts)


@dataclass(frozen=True)
class ProviderStack:
    """A marketplace's provider, as k3s installs it on the farm's server (role market_provider)."""

    files: dict[str, str]  # manifest file name -> YAML, for k3s's manifests folder (no secret in any)
    secret: str  # the wallet Secret as JSON: for the API only, never a file, output or log
    fingerprint: str  # of files + secret: a converged provider re-applies nothing
    values: dict[str, dict[str, Any]]  # chart -> its values (without the wallet)
    secret_env: tuple[str, ...] = ()  # environment variables it read a secret from: hidden from ansible-runner
    # Server-side apply patches to objects the charts make, sent once those exist (a field m2p owns survives
    # the charts' upgrades): {"namespace", "kind", "name", "body" (JSON)}
    patches: tuple[dict[str, str], ...] = ()
    # The farm's reclaimer (protocol-level reclamation, when the provider offers a window): its settings as JSON
    # for the server ("" : none).
    reclaimer: str = ""
    # What the role makes on the server itself, as JSON: {"tls": [{"name", "namespace", "names"}] (self-signed
    # Secrets made there once, keys never leaving it), "node_labels": {label: node} (set with the admin's
    # credential on that node only), "prune_history": [{"namespace", "release"}] (Helm releases whose superseded
    # revisions are deleted: their values hold a secret)}.
    server_side: str = ""


@dataclass(frozen=True)
class ProviderParts:
    """What m2p makes on the server for a marketplace's provider, so remove can find it without the stack."""

    file_prefix: str  # manifest files <prefix>*.yaml
    releases: tuple[str, ...]  # HelmChart objects in kube-system
    secret_name: str  # the wallet Secret in kube-system
    reclaimer_entry: str = ""  # the module the reclaimer's zipapp runs ("" : the marketplace has none)
    reclaimer_token: tuple[str, str] = ("", "")  # (namespace, Secret) holding its ServiceAccount's token
    node_labels: tuple[str, ...] = ()  # the node labels m2p puts on nodes for it (remove takes them off)
    other_secrets: tuple[tuple[str, str], ...] = ()  # (namespace, name) of its Secrets outside kube-system


@dataclass(frozen=True)
class IngressSight:
    """How the ingress rig reaches the internet, as it says itself: its default route's gateway, the gateway and
    source address of its route toward the provider's public address (``ip route get``; "" when not asked), and the
    public address an echo service saw it leave from ("" when not asked, or ``echo_problem`` says why not)."""

    gateway: str = ""
    via: str = ""
    source: str = ""
    public_address: str = ""
    echo_problem: str = ""


@dataclass(frozen=True)
class FarmFacts:
    """What `m2p provider check` read of the farm's rigs for the marketplace's verdicts."""

    rigs: int
    cores: int
    memory_mib: int
    ingress_address: str  # the ingress rig's address in the inventory
    ingress_listening: Listening | str  # its listeners, or why they could not be read
    models: dict[str, tuple[str, ...]] = field(default_factory=dict)  # rig -> the GPU models it holds
    # what the k3s server reached of the hosts the provider's pods fetch from (host -> "" or why not), or why it
    # could not be asked
    server_reach: dict[str, str] | str = field(default_factory=dict)
    ingress_sight: IngressSight | str = field(default_factory=IngressSight)  # or why the rig could not be asked


@dataclass(frozen=True)
class Verdict:
    level: str  # ok | warn | fail
    topic: str
    text: str  # what was found, and what to do


@dataclass(frozen=True)
class ProviderState:
    """What the marketplace's provider says of itself (`m2p provider status`)."""

    url: str
    error: str  # "" when it answered
    fields: dict[str, Any]  # active_leases, open_orders, deployments, address, hostname


class Marketplace(Protocol):
    """The listing: what every marketplace does.  Its optional capabilities, each asked with isinstance:
    ``ProviderInstaller`` (its provider on the farm's server), ``OfflineFiles`` and ``PublicTarget``."""

    @property
    def name(self) -> str:
        """As the inventory and the CLI name it."""
        ...

    @property
    def label(self) -> str:
        """As people read it."""
        ...

    @property
    def system_namespaces(self) -> tuple[str, ...]:
        """Its own services' namespaces on the cluster: their pods are not leases."""
        ...

    @property
    def lease_label(self) -> str:
        """The label key only its leases' pods carry: a GPU pod without it is never a lease."""
        ...

    @property
    def one_model_per_node(self) -> str:
        """Why a node must hold one GPU model to be offered whole, as a sentence's end ("" : it may hold several)."""
        ...

    @property
    def slices_sold_whole(self) -> str:
        """Why time slices of a GPU must not be offered here, as a sentence's end ("" : it sells them as slices)."""
        ...

    @property
    def pooled_farm(self) -> str:
        """Why pooling the farm into one cluster matters to this marketplace, as a sentence for the starter inventory
        ("" : nothing beyond the shared server)."""
        ...

    def unlisted_card(self, pci_id: str) -> str:
        """What becomes of a card its own card list lacks (``Card.listed`` false), as a sentence."""
        ...

    def region_problem(self, region: str) -> str:
        """Why ``region`` is no region name this marketplace takes ("" : it is one)."""
        ...

    def node_labels(self, gpus: Gpus, cuda: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Every label a node of this marketplace carries: its own, then m2p's."""
        ...

    def fleet_attributes(self, rigs: list[RigGpus], region: str | None = None) -> FleetAttributes:
        """Each rig's labels and warnings, and what the provider tells buyers about the whole fleet."""
        ...

    def card_list(self, rigs: Iterable[RigGpus]) -> tuple[dict[str, Any], list[str]]:
        """The farm's own card list in the marketplace's format, and the cards its own list lacks."""
        ...

    def price_mappings(self, floors: Sequence[Floor]) -> str:
        """Lease price floors per model in the form the marketplace's bid takes."""
        ...


@runtime_checkable
class ProviderInstaller(Protocol):
    """The optional capability: the marketplace's provider, installed, checked and removed on the farm's k3s server
    (`m2p provider init|check|status|apply|remove`).  Ask ``provider_installer(market)``."""

    def provider_starter(self) -> str:
        """A commented starter of the file that makes the farm this marketplace's provider (`m2p provider init`)."""
        ...

    def read_provider_file(self, text: str, where: str) -> Any:
        """That file, checked (every mistake a ProviderFileError at its file:line)."""
        ...

    @property
    def provider_parts(self) -> ProviderParts:
        ...

    def provider_stack(self, provider: Any, farm: ProviderFarm, charts_folder: Path,
                       environ: Mapping[str, str]) -> ProviderStack:
        """The provider for ``farm`` (``provider``: read_provider_file's), its charts read from ``charts_folder``
        and its wallet from the files and ``environ`` variables ``provider`` names (they go only into
        ``ProviderStack.secret``)."""
        ...

    def provider_status(self, provider: Any, ingress_address: str, url: str | None = None) -> ProviderState:
        """The provider's own status, asked of the ingress rig (or ``url``)."""
        ...

    @property
    def provider_fetches(self) -> tuple[str, ...]:
        """The internet hosts (host:port) the provider's pods fetch from on the server (`provider check` asks the
        server whether it reaches each)."""
        ...

    def provider_check(self, provider: Any, farm: FarmFacts, environ: Mapping[str, str]) -> list[Verdict]:
        """One verdict per thing the provider needs (it may look up DNS and the marketplace's own nodes)."""
        ...


@runtime_checkable
class OfflineFiles(Protocol):
    """An optional capability (fleet/bundle/charts.py): the files its provider's charts folder holds, for a farm
    without internet."""

    def offline_files(self) -> list[dict[str, str]]:
        """Each file with where it is published and the digest its publisher lists."""
        ...


@runtime_checkable
class PublicTarget(Protocol):
    """An optional capability (cli/provider.py): the public address its DNS gives the provider, toward which
    `provider check` reads the ingress rig's route."""

    def public_target(self, provider: Any) -> str:
        """That address ("" when none)."""
        ...


def provider_installer(market: Marketplace) -> ProviderInstaller:
    """``market``'s provider installer, or a ProviderError saying it has none (it is listed on, not installed)."""
    if not isinstance(market, ProviderInstaller):
        raise ProviderError(f"{market.label} has no provider m2p installs on the farm's server: its rigs are listed "
                            "through their node labels only (`m2p convert`)")
    return market
