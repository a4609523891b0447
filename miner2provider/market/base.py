"""The marketplace seam: what m2p needs of a GPU marketplace, whichever it is.

A marketplace labels a node its own way (``node_labels``: its labels and m2p's own, market/labels.py),
takes lease prices in its own format (``price_mappings``), and runs its own services on the cluster
(``system_namespaces``: never leases).  Akash's provider attributes, gpus.json and (next) its provider
install are Akash's own commands for now (market/akash/).
m2p's ``m2p.io/`` labels are the internal truth; nothing outside market/ reads a marketplace's labels.
Implementations register in market/__init__.py; Akash is the first (market/akash/).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from miner2provider.detect.facts.gpu import Gpus
from miner2provider.market.pricing import Floor


class Marketplace(Protocol):
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

    def node_labels(self, gpus: Gpus, cuda: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        """Every label a node of this marketplace carries: its own, then m2p's."""
        ...

    def price_mappings(self, floors: Sequence[Floor]) -> str:
        """Lease price floors per model in the form the marketplace's bid takes."""
        ...
