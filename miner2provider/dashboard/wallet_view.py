"""The provider's wallet on the dashboard: the last chain read (market/wallet.py's WalletRead, made on the wallet
reader's own thread, never in a request) and the 7-day uptime, as a pure view for ``_wallet.html.j2`` and the
JSON API; and ``payment_rows``, the leases' payments as the ledger export's rows, each on the rig whose ledger
names the lease's pods.

The chain keeps what each lease has withdrawn to date, not when: ``recording`` keeps each read's amounts in the
history, whose changes are the payments, each dated at the read that saw it (History.lease_payments).

Figures say what they are: the balance and the escrow amounts are the chain's; the USD value uses the owner's own
price (where it was written is shown), never a guess; hours and hourly rates come from block heights at the chain's
nominal block time, so they are estimates; the completion rate is the marketplace rule's, and below the rule's
minimum number of leases it is shown as not judged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from miner2provider.market.wallet import CLOSERS, RUNNING, LeaseRecord, WalletRead

from .history import History, LeasePayment
from .uptime import Uptime, UptimeLog

if TYPE_CHECKING:
    from .ledger_csv import PaymentRow

STALE_AFTER_S = 3 * 3600.0  # a read older than this is marked stale (the reader runs every dashboard interval)
MAX_LEASES_SHOWN = 200  # the page lists the newest; the export has them all


@dataclass
class WalletState:
    """What the reader thread last read, and the uptime samples (None: no provider status is read)."""

    uptime: UptimeLog | None = None
    configured: bool = False  # a wallet reader runs (the provider file names a REST node)
    latest: WalletRead | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keep(self, read: WalletRead) -> None:
        with self.lock:
            self.latest = read

    def view(self, now: float) -> dict[str, Any]:
        with self.lock:
            latest = self.latest
        return wallet_view(latest, self.uptime.over(now) if self.uptime else None, now, self.configured)


def _money(value: float | None, places: int = 2) -> str:
    return "" if value is None else f"{value:,.{places}f}"


def _share(value: float | None) -> str:
    return "" if value is None else f"{value * 100:.1f} %"


def _lease(lease: LeaseRecord) -> dict[str, Any]:
    return {"id": lease.id, "tenant": lease.tenant, "namespace": lease.namespace, "state": lease.state,
            "closed_by": lease.closed_by, "currency": lease.currency, "escrowed": _money(lease.escrowed, 4),
            "withdrawn": _money(lease.withdrawn, 4), "rate_per_hour": _money(lease.rate_per_hour, 4),
            "payment_state": lease.payment_state, "hours": "" if lease.hours is None else f"{lease.hours:,.1f}"}


def wallet_view(read: WalletRead | None, uptime: Uptime | None, now: float, configured: bool = True) -> dict[str, Any]:
    """The wallet section's figures, as text ready to show (the template only places them)."""
    out: dict[str, Any] = {"configured": configured, "read": read is not None}
    if uptime is not None:
        out["uptime"] = {"share": _share(uptime.share), "reads": uptime.reads, "answered": uptime.answered}
    if read is None:
        return out
    leases = sorted(read.leases, key=lambda lease: lease.id)
    running = [lease for lease in leases if lease.status == RUNNING]
    closed = [lease for lease in leases if lease.status != RUNNING]
    by = {closer: sum(1 for lease in closed if lease.closed_by == closer) for closer in CLOSERS}
    totals: dict[str, dict[str, float]] = {}
    for lease in leases:
        figures = totals.setdefault(lease.currency, {"escrowed": 0.0, "withdrawn": 0.0})
        figures["escrowed"] += lease.escrowed if lease.status == RUNNING else 0.0
        figures["withdrawn"] += lease.withdrawn
    done = read.completion
    out.update({
        "address": read.address, "currency": read.currency, "age_s": max(0.0, now - read.at),
        "stale": now - read.at > STALE_AFTER_S, "errors": list(read.errors),
        "balance": _money(read.balance, 6), "balance_usd": _money(read.balance_usd),
        "price": "" if read.price is None else f"{read.price:g}", "price_source": read.price_source,
        "running": [_lease(lease) for lease in running[:MAX_LEASES_SHOWN]],
        "closed": [_lease(lease) for lease in closed[-MAX_LEASES_SHOWN:]],
        "running_count": len(running), "closed_count": len(closed), "closed_by": by,
        "totals": [{"currency": c, "escrowed": _money(t["escrowed"], 4), "withdrawn": _money(t["withdrawn"], 4)}
                   for c, t in sorted(totals.items())],
        "completion": None if done is None else {
            "rate": _share(done.rate), "judged": done.judged, "total": done.total,
            "terminated_by_provider": done.terminated_by_provider, "minimum": done.minimum, "rule": done.rule},
    })
    return out


def recording(db: Path, read: Callable[[], WalletRead]) -> Callable[[], WalletRead]:
    """``read`` (the chain's wallet read, on the wallet reader's own thread) that also keeps each read's leases'
    withdrawn amounts in the history at ``db`` (History.record_withdrawals): the books' payments are their changes."""
    def wallet_read() -> WalletRead:
        got = read()
        try:
            with History(db) as history:
                history.record_withdrawals(got.at, got.leases)
        except Exception:  # sqlite3.Error, UsageError, OSError: the page keeps the read and says what was not kept;
            # the next read keeps the change it missed (dated at that read)
            return replace(got, errors=(*got.errors, "the leases' payments of this read were not kept in the history "
                                                     "(it could not be written): the books miss them until a read is"))
        return got
    return wallet_read


# A payment row's basis: the chain keeps a lease's withdrawn amount to date, m2p dates its changes by its own reads.
FIRST_READ = ("chain: withdrawn from the lease's escrow before m2p first read the lease (the chain keeps no dates), "
              "dated at that first read")
BETWEEN_READS = ("chain: withdrawn from the lease's escrow since the wallet's previous read, dated at the read that "
                 "saw it")
HOURS_FROM_RATE = "hours from its rate at the nominal block time"
NO_RATE = "hours unknown: no rate read"


def payment_rows(payments: Iterable[LeasePayment], rig_pods: Mapping[str, Iterable[str]]) -> Iterator[PaymentRow]:
    """One row per payment (History.lease_payments: what a lease withdrew between two of the wallet's reads, dated at
    the later) and rig it ran on: ``rig_pods`` is each rig's lease pods as its ledger names them
    (``namespace/name``); a lease whose namespace no rig's ledger names goes on rig "" (unknown), one that ran on
    several rigs is split evenly between them (the chain pays a lease, not a rig).  Hours are the amount at the
    lease's rate (0 where the rate is unknown, and the basis says so); each rig's share of a lease ran all its hours,
    at its share of the rate.  In the order the payments come (History.lease_payments': by time, then lease), each
    made as it comes: a year of payments is never held whole."""
    from .ledger_csv import PaymentRow  # the export's module loads only where rows are made

    rigs_of: dict[str, list[str]] = {}
    for rig, pods in rig_pods.items():
        for pod in pods:
            namespace = str(pod).partition("/")[0]
            if namespace and rig not in rigs_of.setdefault(namespace, []):
                rigs_of[namespace].append(rig)
    for paid in payments:
        rigs = sorted(rigs_of.get(paid.namespace, [])) or [""]
        share = 1 / len(rigs)
        known = paid.rate_per_hour > 0
        basis = f"{FIRST_READ if paid.first else BETWEEN_READS}; {HOURS_FROM_RATE if known else NO_RATE}"
        if len(rigs) > 1:
            basis += f"; split evenly over {len(rigs)} rigs"
        hours = paid.amount / paid.rate_per_hour if known else 0.0
        for rig in rigs:
            yield PaymentRow(paid.at, rig, paid.lease, hours, paid.amount * share, paid.currency,
                             paid.rate_per_hour * share, basis)
