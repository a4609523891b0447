"""The provider's wallet and leases as a marketplace's chain tells them: marketplace-neutral records (what the
dashboard's wallet view and the alerts read) and the optional capability ``WalletReader`` that makes them.

A read never raises: what could not be read is in ``errors`` as one readable sentence each (the address or URL
asked and why, never the server's text), and what was read is kept beside it.  Amounts are in the marketplace's
token (``currency``, such as AKT), converted from its smallest unit by the reader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

RUNNING, CLOSED = "running", "closed"
# Who ended a lease: the tenant, the provider (early), the provider through its announced reclamation window, the
# network (the tenant's escrow ran dry), or nobody the chain says ("unknown"); "" while it runs.
CLOSERS = ("tenant", "provider", "reclamation", "network", "unknown")


@dataclass(frozen=True)
class LeaseRecord:
    id: str  # as the marketplace's own tools print it
    tenant: str  # the tenant's account
    namespace: str  # the Kubernetes namespace the provider runs it in ("" unknown): the ledger's pods name it
    status: str  # RUNNING | CLOSED
    state: str  # the chain's own word for it (active, reclaiming, closed, insufficient_funds)
    closed_by: str  # "" while running, else one of CLOSERS
    escrowed: float  # what the tenant's escrow still holds for this lease
    withdrawn: float  # what the provider has withdrawn from it so far
    rate_per_hour: float  # what it pays per hour at the chain's nominal block time
    payment_state: str  # the escrow payment's state (open, closed, overdrawn)
    hours: float | None  # how long it ran so far or in all (from block heights); None: unknown
    currency: str = "AKT"  # of escrowed, withdrawn and rate


@dataclass(frozen=True)
class Completion:
    """The lease completion rate as the marketplace's rule defines it (``rule`` names it)."""

    total: int
    terminated_by_provider: int
    rate: float | None  # 0..1; None with no lease at all
    judged: bool  # False below ``minimum`` leases: the rule does not judge so few
    minimum: int
    rule: str


@dataclass(frozen=True)
class WalletRead:
    at: float  # when it was read (epoch seconds)
    address: str
    currency: str
    balance: float | None  # None: not read (see errors)
    leases: tuple[LeaseRecord, ...]
    completion: Completion | None
    errors: tuple[str, ...] = ()
    price: float | None = None  # USD per unit of ``currency``, where the owner gave one
    price_source: str = ""  # where that price was written (file:line)

    @property
    def balance_usd(self) -> float | None:
        return None if self.balance is None or self.price is None else self.balance * self.price


@runtime_checkable
class WalletReader(Protocol):
    """An optional capability (cli/dashboard.py): a reader of the provider's wallet and leases on the marketplace's
    chain, where its provider file names a node that answers them (None: it names none)."""

    def wallet_reader(self, provider: Any) -> Callable[[], WalletRead] | None:
        ...
