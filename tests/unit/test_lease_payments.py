"""The leases' payments dated by the wallet's reads (issue 57, dashboard/history.py record_withdrawals and
lease_payments, wallet_view.recording and payment_rows): the chain keeps each lease's withdrawn amount to date, so
the history keeps its changes, and a payment is a change, dated at the read that saw it."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.dashboard.history import MIGRATIONS, History, LeasePayment
from miner2provider.dashboard.wallet_view import BETWEEN_READS, FIRST_READ, payment_rows, recording
from miner2provider.market.wallet import LeaseRecord, WalletRead
from miner2provider.rigside.ledger import Entry

HOUR = 3600.0
T0 = 1_800_000_000.0
LEASE = "tenant1/42/1/1/provider1"


def lease(withdrawn: float, lease_id: str = LEASE, **fields: object) -> LeaseRecord:
    values: dict[str, object] = {"id": lease_id, "tenant": "tenant1", "namespace": "ns42", "status": "running",
                                 "state": "active", "closed_by": "", "escrowed": 5.0, "withdrawn": withdrawn,
                                 "rate_per_hour": 2.5, "payment_state": "open", "hours": 10.0}
    values.update(fields)
    return LeaseRecord(**values)  # type: ignore[arg-type]


def paid(history: History, since: float = 0.0, until: float = float("inf")) -> list[tuple[float, float, bool]]:
    return [(p.at, p.amount, p.first) for p in history.lease_payments(since, until)]


def test_two_reads_an_hour_apart_pay_the_first_amount_then_the_difference():
    with History(":memory:") as h:
        assert h.record_withdrawals(T0, [lease(10.0)]) == 1
        assert h.record_withdrawals(T0 + HOUR, [lease(25.0)]) == 1
        payments = list(h.lease_payments(T0, T0 + 2 * HOUR))
    assert payments == [LeasePayment(LEASE, T0, 10.0, "AKT", "ns42", 2.5, True),
                        LeasePayment(LEASE, T0 + HOUR, 15.0, "AKT", "ns42", 2.5, False)]
    rows = list(payment_rows(payments, {"rig01": ["ns42/gpu-0"]}))
    assert [(r.paid_at, r.rig, r.lease, r.amount, r.hours, r.rate) for r in rows] == [
        (T0, "rig01", LEASE, 10.0, 4.0, 2.5), (T0 + HOUR, "rig01", LEASE, 15.0, 6.0, 2.5)]
    assert rows[0].basis.startswith(FIRST_READ) and "before m2p first read the lease" in rows[0].basis
    assert rows[1].basis.startswith(BETWEEN_READS) and "hours from its rate" in rows[1].basis


def test_an_unchanged_amount_stores_no_row():
    """A lease withdrawn every hour and read every 5 minutes: a row an hour, not one a read."""
    with History(":memory:") as h:
        added = [h.record_withdrawals(T0 + n * 300, [lease(1.0 + n // 12)]) for n in range(24)]
        kept = h.db.execute("SELECT at, withdrawn FROM lease_withdrawals ORDER BY at").fetchall()
        assert paid(h) == [(T0, 1.0, True), (T0 + HOUR, 1.0, False)]
    assert sum(added) == 2 and kept == [(T0, 1.0), (T0 + HOUR, 2.0)]


def test_a_lower_amount_is_a_wrong_answer_never_a_payment_nor_a_new_start():
    """A lease's withdrawn amount only grows on the chain: a node that lags, or answers a lease without its escrow
    (read as 0), is wrong.  Its lower amount is kept nowhere, so the next right one pays only what is new (the
    review's 10, 20, 0, 20, 19, 21 once paid 42 for a lease that withdrew 21); another currency is no change."""
    with History(":memory:") as h:
        for n, amount in enumerate([10.0, 20.0, 0.0, 20.0, 19.0, 21.0]):
            h.record_withdrawals(T0 + n * HOUR, [lease(amount)])
        h.record_withdrawals(T0 + 6 * HOUR, [lease(99.0, currency="uakt")])
        assert h.db.execute("SELECT withdrawn FROM lease_withdrawals ORDER BY at").fetchall() == [(10.0,), (20.0,),
                                                                                                   (21.0,)]
        assert paid(h) == [(T0, 10.0, True), (T0 + HOUR, 10.0, False), (T0 + 5 * HOUR, 1.0, False)]


def test_a_clock_stepped_back_dates_a_payment_oddly_but_never_counts_it_twice():
    with History(":memory:") as h:
        h.record_withdrawals(T0, [lease(10.0)])
        h.record_withdrawals(T0 + 2 * HOUR, [lease(20.0)])
        h.record_withdrawals(T0 + HOUR, [lease(25.0)])  # the controller's clock stepped back an hour and more
        assert sorted(paid(h)) == [(T0, 10.0, True), (T0 + HOUR, 5.0, False), (T0 + 2 * HOUR, 10.0, False)]


def test_a_lease_first_read_closed_is_a_baseline_not_a_payment_of_the_day():
    """A new history's first read lists leases that closed long ago: what they withdrew is no payment of that day."""
    with History(":memory:") as h:
        h.record_withdrawals(T0, [lease(40.0, "tenant1/9/1/1/provider1", status="closed"), lease(3.0)])
        h.record_withdrawals(T0 + HOUR, [lease(41.0, "tenant1/9/1/1/provider1", status="closed")])  # a late withdrawal
        assert [(p.lease, p.at, p.amount) for p in h.lease_payments(0.0, T0 + 2 * HOUR)] == [
            (LEASE, T0, 3.0), ("tenant1/9/1/1/provider1", T0 + HOUR, 1.0)]


def test_a_window_after_the_first_read_shows_only_the_later_payments():
    """The payment at the window's first read is the difference from the read before the window, not its amount."""
    with History(":memory:") as h:
        for n, amount in enumerate([10.0, 25.0, 27.5]):
            h.record_withdrawals(T0 + n * HOUR, [lease(amount)])
        h.record_withdrawals(T0 + HOUR, [lease(4.0, "tenant1/43/1/1/provider1")])  # another lease, first seen then
        assert [(p.lease, p.at, p.amount, p.first) for p in h.lease_payments(T0 + 1, T0 + 3 * HOUR)] == [
            (LEASE, T0 + HOUR, 15.0, False), ("tenant1/43/1/1/provider1", T0 + HOUR, 4.0, True),
            (LEASE, T0 + 2 * HOUR, 2.5, False)]
        assert paid(h, T0 + HOUR, T0 + 2 * HOUR) == [(T0 + HOUR, 15.0, False), (T0 + HOUR, 4.0, True)]  # until: out


def test_a_lease_first_read_at_zero_pays_its_later_amounts_dated_and_none_at_first():
    with History(":memory:") as h:
        h.record_withdrawals(T0, [lease(0.0), lease(float("nan"), "bad/1/1/1/p")])  # no number: not kept
        h.record_withdrawals(T0 + HOUR, [lease(3.0)])
        assert paid(h) == [(T0 + HOUR, 3.0, False)]
        assert h.db.execute("SELECT count(*) FROM lease_withdrawals").fetchone() == (2,)


def test_payments_are_split_over_the_rigs_whose_ledgers_name_the_leases_pods():
    other = "tenant2/7/1/1/provider1"
    with History(":memory:") as h:
        h.record_withdrawals(T0, [lease(2.0), lease(0.9, other, namespace="ns7", rate_per_hour=0.0)])
        rows = list(payment_rows(h.lease_payments(T0, T0 + 1), {"rig01": ["ns42/a"], "rig02": ["ns42/b", "x/y"]}))
    assert [(r.rig, r.lease, r.amount, r.rate, r.hours) for r in rows] == [
        ("rig01", LEASE, 1.0, 1.25, 0.8), ("rig02", LEASE, 1.0, 1.25, 0.8), ("", other, 0.9, 0.0, 0.0)]
    assert rows[0].basis.endswith("; split evenly over 2 rigs") and "hours unknown: no rate read" in rows[2].basis


def test_the_migration_runs_on_a_database_of_the_previous_version(tmp_path):
    path = tmp_path / "h.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("".join(MIGRATIONS[:9]) + "PRAGMA user_version = 9;")  # before lease_withdrawals (10)
    db.execute("INSERT INTO rigs VALUES ('rig01', ?, ?)", (T0, T0))
    db.execute("INSERT INTO ledger (rig, at, mode, blind, gpus, leases) VALUES ('rig01', ?, 'mining', 0, 1, '[]')",
               (T0,))
    db.commit()
    db.close()
    with History(path) as h:
        assert h.version == len(MIGRATIONS)
        assert h.ledger("rig01", T0, T0 + 1) == [Entry(T0, "mining", gpus=1)]  # what was there stays
        assert h.record_withdrawals(T0, [lease(1.5)]) == 1
    with History(path) as h:  # reopened: nothing migrated again, the row there
        assert paid(h) == [(T0, 1.5, True)]


def test_the_dashboards_wallet_read_records_its_leases_and_a_history_it_cannot_write_keeps_the_read(tmp_path):
    reads = iter([WalletRead(T0, "provider1", "AKT", 1.0, (lease(10.0),), None),
                  WalletRead(T0 + HOUR, "provider1", "AKT", 1.0, (lease(25.0),), None)])
    read = recording(tmp_path / "h.sqlite3", lambda: next(reads))
    assert [read().at, read().at] == [T0, T0 + HOUR]
    with History(tmp_path / "h.sqlite3") as h:
        assert paid(h) == [(T0, 10.0, True), (T0 + HOUR, 15.0, False)]
    (tmp_path / "junk.sqlite3").write_bytes(b"not a database" * 100)
    broken = recording(tmp_path / "junk.sqlite3", lambda: WalletRead(T0, "p", "AKT", 1.0, (lease(1.0),), None))
    got = broken()
    assert got.leases == (lease(1.0),) and got.errors == (
        "the leases' payments of this read were not kept in the history (it could not be written): the books miss them "
        "until a read is",)


MICRO = st.integers(0, 10**12).map(lambda units: units / 1e6)  # the chain's amounts: micro-units of its token


@settings(max_examples=80, deadline=None)
@given(st.lists(MICRO, min_size=1, max_size=30), st.lists(st.floats(1.0, 2 * HOUR), min_size=30, max_size=30),
       st.integers(1, 7))
def test_a_leases_payments_sum_to_the_most_it_was_read_to_have_withdrawn(amounts, gaps, page):
    """Any reads, a wrong node's lower amounts among them: the payment rows over all time add up to the highest amount
    read (on the chain a lease's amount only grows), every row pays something, a row is kept only for a new highest
    amount, and the payments read a few rows a page are those read at once."""
    at = T0
    with History(":memory:") as h:
        for amount, gap in zip(amounts, gaps, strict=False):
            h.record_withdrawals(at, [lease(amount)])
            at += gap
        rows = list(payment_rows(h.lease_payments(0.0, at + 1), {"rig01": ["ns42/a"], "rig02": ["ns42/b"]}))
        assert list(h.lease_payments(0.0, at + 1, page=page)) == list(h.lease_payments(0.0, at + 1))
        kept = h.db.execute("SELECT count(*) FROM lease_withdrawals").fetchone()[0]
    highest = [a for n, a in enumerate(amounts) if all(a > b for b in amounts[:n])]
    assert sum(row.amount for row in rows) == pytest.approx(max(amounts), rel=1e-12, abs=1e-12)
    assert all(row.amount > 0 for row in rows) and kept == len(highest)
