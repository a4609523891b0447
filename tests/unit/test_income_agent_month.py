"""Issue 57's "done when" on ledgers the agent made: five rigs' 30 days of ledger written by the agent's own decide()
and ledger writer (agent_month.py), stored in a History as the dashboard's sweep stores them; the income's totals
(the chart's and /api/income's) equal the ledger's SQL sums, and the CSV for the books, read back, equals the ledger
span by span and adds up to the same money."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import pytest
from agent_month import month_ledger  # tests/unit is on sys.path (no package)
from test_dashboard import ECON
from test_dashboard_income import DAY, HOUR, rig_of, view
from test_ledger_csv import whole

from miner2provider.dashboard import income
from miner2provider.dashboard.history import History
from miner2provider.rigside import ledger

RIGS = {f"rig{n}": (seed, gpus) for n, (seed, gpus) in enumerate(((11, 4), (12, 2), (13, 8), (14, 1), (15, 6)))}


@pytest.fixture(scope="module")
def month(tmp_path_factory):
    """The history after a sweep read every rig's month, and each rig's ledger as the agent wrote it."""
    work = tmp_path_factory.mktemp("month")
    db, written, end = work / "h.sqlite3", {}, 0.0
    with History(db) as h:
        for name, (seed, gpus) in RIGS.items():
            folder = work / name
            folder.mkdir()
            end = month_ledger(folder, seed, gpus)
            entries, torn = ledger.read(folder)
            assert torn == 0 and len(entries) > 60, (name, len(entries))  # a month of switching, not a few lines
            assert {e.mode for e in entries} >= {"mining", "leasing", "idle-mining"}
            written[name] = entries
            h.add_ledger(name, entries[: len(entries) // 2], seen_at=end)  # two sweeps, as a rig read twice
            h.add_ledger(name, entries[len(entries) // 2 - 1:], seen_at=end)
    return db, written, end


def inputs(db: Path, end: float) -> list:
    with History(db) as h:
        return [rig_of(name, gpus, h.ledger(name, end - 400 * DAY, math.inf), end) for name, (_, gpus) in RIGS.items()]


def own_sums(entries: list[ledger.Entry], gpus: int, since: float, until: float) -> tuple[float, float]:
    """GPU-seconds leased and mined over [since, until) straight from the agent's lines (views.totals' rule)."""
    leased = mined = 0.0
    for line, following in zip(entries, [*entries[1:], None], strict=True):
        length = min(following.at if following else until, until) - max(line.at, since)
        if length <= 0:
            continue
        if line.leased:
            leased += length * line.leased
            mined += length * line.mining
        elif line.mode in ("mining", "idle-mining"):
            mined += length * (line.gpus or gpus)
    return leased, mined


def test_the_income_of_a_month_the_agent_wrote_is_its_ledgers_sums(month):
    db, written, end = month
    rigs = inputs(db, end)
    found = view(db, rigs, "day", end)
    since = income.buckets("day", int(end // DAY))[0][1] * DAY
    leased = mined = 0.0
    for name, (_, gpus) in RIGS.items():
        rig_leased, rig_mined = own_sums(written[name], gpus, since, end)
        leased, mined = leased + rig_leased, mined + rig_mined
    assert leased > 0 and mined > 0
    totals = found["totals"]
    assert totals["gpu_hours"]["leased"] == pytest.approx(leased / HOUR, abs=0.01)
    assert totals["gpu_hours"]["mined"] == pytest.approx(mined / HOUR, abs=0.01)
    assert totals["lease"] == pytest.approx(leased / HOUR * 0.25, abs=0.01)  # the economics file's RTX 3090 prices
    assert totals["mining"] == pytest.approx(mined / HOUR * 1.20 / 24, abs=0.01)
    slack = 0.006 * len(found["periods"])
    assert sum(p["lease"] + p["mining"] for p in found["periods"]) == pytest.approx(
        totals["lease"] + totals["mining"], abs=slack)


def test_the_books_of_a_month_the_agent_wrote_read_back_equal_its_ledger(month):
    db, written, end = month
    rigs = inputs(db, end)
    since, until = end - 30 * DAY, end
    text = whole(rigs, ECON, since, until)
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    for name, (_, gpus) in RIGS.items():
        mine = [r for r in rows if r["rig"] == name and r["record"] == "ledger"]
        lines = [e for e in written[name] if e.at < until]
        assert [r["mode"] for r in mine] == [e.mode for e in lines]  # one row a line, in order
        assert sum(float(r["hours"]) for r in mine) == pytest.approx((until - lines[0].at) / HOUR, abs=1e-3)
        leased, mined = own_sums(written[name], gpus, since, until)
        assert sum(float(r["gpu_hours_leased"]) for r in mine) == pytest.approx(leased / HOUR, abs=1e-3)
        assert sum(float(r["gpu_hours_mined"]) for r in mine) == pytest.approx(mined / HOUR, abs=1e-3)
        money = sum(float(r["amount"]) for r in mine if r["amount"])
        assert money == pytest.approx(leased / HOUR * 0.25 + mined / HOUR * 1.20 / 24, abs=0.01 * len(mine))
