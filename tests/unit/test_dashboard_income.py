"""The fleet's income over time (issue 57): the history's day sums, the periods (UTC days, ISO weeks, months), the
figures and their marks, the forecast from utilisation, the chart's geometry; property tests hold the chart's and the
API's totals to the ledger's own SQL sums and to the rig page's spans, over random ledgers stored in a History."""

from __future__ import annotations

import dataclasses
import gc
import math
import sqlite3
import tempfile
import time
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from playwright.sync_api import expect, sync_playwright
from starlette.testclient import TestClient
from test_dashboard import ECON, OWN, TOKEN  # tests/unit is on sys.path (no package)
from test_dashboard_cards_pages import CHROMIUM
from test_dashboard_server import serving
from test_readiness import facts

from miner2provider.core import inventory
from miner2provider.dashboard import forecast, income, views
from miner2provider.dashboard.actions import Actions, Fleet
from miner2provider.dashboard.app import DashboardConfig, create_app
from miner2provider.dashboard.collect import snapshot
from miner2provider.dashboard.history import History
from miner2provider.dashboard.state import income_view
from miner2provider.detect.readiness import assess
from miner2provider.detect.report import RigReport, status_rows
from miner2provider.detect.ssh import SshOptions
from miner2provider.rigside.ledger import Entry
from miner2provider.rigside.status import AgentStatus, Measured
from miner2provider.timeshare import economics

HOUR, DAY = 3600.0, 86_400.0
MIDNIGHT = 1_800_000_000.0 - 1_800_000_000.0 % DAY  # 2027-01-15 00:00 UTC, a Friday


def report_of(name: str, gpus: int) -> RigReport:
    f = facts()
    f = dataclasses.replace(f, gpus=dataclasses.replace(f.gpus, gpus=f.gpus.gpus[:1] * gpus),
                            agent_status=AgentStatus(True, "mining"))
    return RigReport(name, "10.0.0.1", f, assess(f))


def rig_of(name: str, gpus: int, ledger: list[Entry], seen_at: float | None, econ: Any = ECON) -> views.RigInput:
    return views.RigInput(name, ("farm",), seen_at, {"read_at": seen_at}, tuple(ledger), report=report_of(name, gpus))


def view(db: Path, rigs: list[views.RigInput], per: str, now: float, econ: Any = ECON) -> dict[str, Any]:
    """state.income_view, the API's and the pages' own path, over the history at ``db``."""
    return income_view(SimpleNamespace(config=SimpleNamespace(db=db, economics=econ)), rigs, per, now)  # type: ignore[arg-type]


# -- the periods ------------------------------------------------------------------------------

def test_periods_are_utc_days_iso_weeks_and_calendar_months():
    today = int((MIDNIGHT + 5 * HOUR) // DAY)  # Friday 2027-01-15
    days = income.buckets("day", today)
    assert len(days) == 30 and days[-1] == ("2027-01-15", today, today) and days[0][0] == "2026-12-17"
    weeks = income.buckets("week", today)
    assert len(weeks) == 13 and weeks[-1] == ("2027-W02", today - 4, today + 2)  # Monday 11 to Sunday 17
    assert weeks[-2][0] == "2027-W01" and weeks[-3][0] == "2026-W53"  # 2026 has 53 ISO weeks
    months = income.buckets("month", today)
    assert [m[0] for m in months[-3:]] == ["2026-11", "2026-12", "2027-01"]
    assert months[-2][2] - months[-2][1] == 30 and months[-1][1] == today - 14  # December's 31 days; January 1st
    assert months[0][0] == "2026-02" and months[0][2] - months[0][1] == 27


# -- the figures --------------------------------------------------------------------------------

def test_a_day_of_mining_then_a_lease_across_midnight_is_split_valued_and_marked(tmp_path):
    """2 RTX 3090s: 20:00 mining 6 h, 02:00 a lease of both 4 h, then idle; each UTC day gets its own hours."""
    t0 = MIDNIGHT - 4 * HOUR
    ledger = [Entry(t0, "mining", gpus=2), Entry(t0 + 6 * HOUR, "leasing", gpus=2, leases=("l/a",), leased=2),
              Entry(t0 + 10 * HOUR, "idle-mining", gpus=2)]
    with History(tmp_path / "h.sqlite3") as h:
        h.add_ledger("rig01", ledger, seen_at=t0 + 12 * HOUR)
    now = t0 + 12 * HOUR
    data = view(tmp_path / "h.sqlite3", [rig_of("rig01", 2, ledger, now)], "day", now)
    before, today = data["periods"][-2], data["periods"][-1]
    # the day before: 4 h mining x 2 GPUs at 1.20 / GPU-day; today: 2 h mining, 4 h leased, 2 h idle-mining (mined)
    assert before["gpu_hours"] == {"available": 8.0, "leased": 0.0, "mined": 8.0, "idle": 0.0}
    assert (before["mining"], before["lease"], before["mining_equivalent"]) == (0.4, 0.0, 0.0)
    assert today["gpu_hours"] == {"available": 16.0, "leased": 8.0, "mined": 8.0, "idle": 0.0}
    assert (today["lease"], today["mining"], today["mining_equivalent"], today["total"]) == (2.0, 0.4, 0.4, 2.4)
    assert data["totals"]["total"] == 2.8 and data["totals"]["marks"] == {
        "lease": "estimated", "mining": "estimated", "mining_equivalent": "estimated"}
    assert data["last_30_days"]["total"] == 2.8


def test_a_per_card_lease_counts_the_cards_mined_beside_it_and_a_whole_rig_hand_over_the_idle_ones(tmp_path):
    t0 = MIDNIGHT + HOUR
    ledger = [Entry(t0, "leasing", gpus=3, leases=("l/a",), leased=1, mining=2),  # per card: 2 mine beside
              Entry(t0 + 2 * HOUR, "leasing", gpus=3, leases=("l/a",), leased=1),  # whole rig: 2 stand idle
              Entry(t0 + 3 * HOUR, "mining", gpus=3)]
    with History(tmp_path / "h.sqlite3") as h:
        h.add_ledger("rig01", ledger, seen_at=t0 + 3 * HOUR)
    data = view(tmp_path / "h.sqlite3", [rig_of("rig01", 3, ledger, t0 + 3 * HOUR)], "day", t0 + 3 * HOUR)
    assert data["totals"]["gpu_hours"] == {"available": 9.0, "leased": 3.0, "mined": 4.0, "idle": 2.0}


def test_mining_measured_by_the_agent_is_marked_measured_and_a_model_without_a_price_is_unknown(tmp_path):
    econ = economics.parse("lease_price_per_gpu_hour: {default: 0.2}\nmining_revenue_per_gpu_day: {rtx3090: 2.4}\n"
                           "mining_revenue_per_mhs_day: {kawpow: 0.1}\n", "e.yml")
    t0 = MIDNIGHT + HOUR
    ledger = [Entry(t0, "mining", gpus=1)]
    with History(tmp_path / "h.sqlite3") as h:
        h.add_ledger("rig01", ledger, seen_at=t0)
        h.add_ledger("rig02", ledger, seen_at=t0)
    measured = rig_of("rig01", 1, ledger, t0 + 10 * HOUR)
    f = dataclasses.replace(measured.report.facts, agent_status=AgentStatus(  # type: ignore[union-attr]
        True, "mining", measured=Measured("kawpow", (12.0,), (200.0,))))
    measured = dataclasses.replace(measured, report=RigReport("rig01", "10.0.0.1", f, assess(f)))
    plain = rig_of("rig02", 1, ledger, t0 + 10 * HOUR)
    both = view(tmp_path / "h.sqlite3", [measured, plain], "day", t0 + 10 * HOUR, econ)["totals"]
    # rig01 measured at 12 MH/s x 0.1 = 1.2 / GPU-day, rig02 by the file's 2.4: 10 h each
    assert both["mining"] == pytest.approx(0.5 + 1.0) and both["marks"]["mining"] == "partly measured"
    alone = view(tmp_path / "h.sqlite3", [measured], "day", t0 + 10 * HOUR, econ)["totals"]
    assert alone["mining"] == 0.5 and alone["marks"]["mining"] == "measured"
    unpriced = economics.parse("lease_price_per_gpu_hour: {default: 0.2}\n", "e.yml")
    unknown = view(tmp_path / "h.sqlite3", [plain], "day", t0 + 10 * HOUR, unpriced)["totals"]
    assert unknown["mining"] is None and unknown["total"] is None and unknown["lease"] == 0.0  # never guessed


def test_the_forecast_follows_the_leased_share_not_every_card_leased():
    rates = views.Rates(0.25, 1.20, "economics file")
    # 30 days of 4 GPUs: a quarter of the GPU-hours leased, half mined; 2 more GPUs with no history yet
    covered = 4 * 30 * DAY
    basis = [(rates, covered, covered / 4, covered / 2, 4), (rates, 0.0, 0.0, 0.0, 2)]
    found = forecast.next_month(basis, income._date(int(MIDNIGHT // DAY)))
    assert (found["month"], found["days"], found["gpus"], found["gpus_without_history"]) == ("2027-02", 28, 6, 2)
    assert (found["leased_share"], found["mined_share"]) == (0.25, 0.5)
    assert found["lease"] == round(4 * 28 * 24 * 0.25 * 0.25, 2)  # 4 GPUs x 672 h x a quarter x 0.25
    assert found["mining"] == round(4 * 28 * 0.5 * 1.20, 2) and found["mining_equivalent"] == round(4 * 28 * 0.25 * 1.2, 2)
    assert found["lease"] < 4 * 28 * 24 * 0.25  # every card leased would say four times as much
    december = forecast.next_month(basis, income._date(int(MIDNIGHT // DAY) - 40))  # 2026-12-06
    assert (december["month"], december["days"]) == ("2027-01", 31)


def test_the_chart_stacks_mining_under_leasing_and_marks_the_mining_equivalent():
    data = {"currency": "USD", "periods": [
        {"label": "a", "mining": 1.0, "lease": 3.0, "mining_equivalent": 1.0},
        {"label": "b", "mining": 2.0, "lease": 0.0, "mining_equivalent": 0.0},
        {"label": "<c>", "mining": None, "lease": None, "mining_equivalent": None}]}
    found = income.chart(data)
    first, second, third = found["bars"]
    assert found["top"] == 4.0 and first["mining"] == {"y": 120.0, "h": 40.0} and first["lease"] == {"y": 0.0, "h": 120.0}
    assert first["marker"] == 80.0 and second["marker"] is None  # no lease: nothing to compare
    assert third["mining"]["h"] == third["lease"]["h"] == 0 and "unknown" in third["title"]


# -- property: the chart's and the API's figures are the ledger's ------------------------------

NOW = MIDNIGHT + 13 * HOUR + 17
CHANGES = st.lists(st.tuples(st.floats(0, 20 * DAY, allow_nan=False), st.sampled_from(views.MODES),
                             st.integers(0, 3)), max_size=30)
RIGS = st.lists(st.tuples(CHANGES, st.integers(0, 4), st.floats(0, 2 * DAY, allow_nan=False), st.integers(0, 30)),
                min_size=1, max_size=3)


def ledger_of(changes: list[tuple[float, str, int]], gpus: int) -> list[Entry]:
    """Changes over the 20 days before NOW: 0 no lease, 1 the whole rig leased, 2 one card leased and the others
    mining beside it, 3 one leased, the others idle; one line in three names no GPU count (the rig's serves)."""
    out = []
    for n, (ago, mode, lease) in enumerate(sorted(changes, reverse=True)):
        named = 0 if n % 3 == 2 and not lease else gpus
        leased = {0: 0, 1: gpus, 2: min(1, gpus), 3: min(1, gpus)}[lease]
        out.append(Entry(NOW - ago, mode, gpus=named, leases=("l/p",) if lease else (), leased=leased,
                         mining=max(gpus - 1, 0) if lease == 2 else 0))
    return out


def sql_sums(db: Path, rig: str, since: float, seen: float) -> tuple[float, float, float]:
    """The ledger's own GPU-seconds over [since, NOW), straight from its table: leased, mined (views.totals' rule) and
    covered; the line in force up to the rig's last read."""
    with sqlite3.connect(db) as con:
        return con.execute(
            "SELECT total(len * leased), total(len * CASE WHEN leased > 0 THEN mining WHEN mode IN ('mining', "
            "'idle-mining') THEN (CASE gpus WHEN 0 THEN :gpus ELSE gpus END) ELSE 0 END), "
            "total(len * CASE gpus WHEN 0 THEN :gpus ELSE gpus END) FROM (SELECT *, min(coalesce(until, :seen), :now) "
            "- max(at, :since) AS len FROM ledger WHERE rig = :rig) WHERE len > 0",
            {"rig": rig, "since": since, "seen": seen, "now": NOW, "gpus": int(rig[3:]) % 5}).fetchone()


@settings(max_examples=60, deadline=None)
@given(RIGS, st.sampled_from(tuple(income.PERIODS)), st.data())
def test_the_charts_and_the_apis_totals_are_the_ledgers_sql_sums(rigs, per, data):
    with tempfile.TemporaryDirectory() as work:
        db = Path(work) / "h.sqlite3"
        inputs = []
        with History(db) as h:
            for n, (changes, gpus, seen_ago, split) in enumerate(rigs):
                name = f"rig{n * 5 + gpus}"  # the name carries the GPU count (sql_sums reads it back)
                ledger = ledger_of(changes, gpus)
                cut = min(split, len(ledger))  # stored in two sweeps: the first batch's lines are linked again
                h.add_ledger(name, ledger[:cut], seen_at=NOW)
                h.add_ledger(name, ledger[max(cut - 1, 0):], seen_at=NOW)
                seen = NOW - seen_ago
                inputs.append((rig_of(name, gpus, h.ledger(name, NOW - 400 * DAY, math.inf), seen), seen))
        found = view(db, [r for r, _ in inputs], per, NOW)
        chart = income.chart(found)
        since = income.buckets(per, int(NOW // DAY))[0][1] * DAY
        leased = mined = covered = 0.0
        for rig, seen in inputs:
            rig_leased, rig_mined, rig_covered = sql_sums(db, rig.name, since, seen)
            leased, mined, covered = leased + rig_leased, mined + rig_mined, covered + rig_covered
            # each rig's own figures, as its page shows them, are the same sums
            alone = view(db, [rig], per, NOW)["totals"]["gpu_hours"]
            assert alone["leased"] == pytest.approx(rig_leased / HOUR, abs=0.006)
            assert alone["mined"] == pytest.approx(rig_mined / HOUR, abs=0.006)
            # and per UTC day, the rig page's spans (views.totals over rig_spans) say the same
            day = data.draw(st.integers(0, 20), label="days ago")
            lo = (int(NOW // DAY) - day) * DAY
            spans = views.span_totals(views.rig_spans(rig, lo, min(lo + DAY, NOW)), int(rig.name[3:]) % 5)
            daily = view(db, [rig], "day", NOW)["periods"][-1 - day]["gpu_hours"]
            assert daily["leased"] == pytest.approx(spans.gpu_seconds_leased / HOUR, abs=0.006)
            assert daily["mined"] == pytest.approx(spans.gpu_seconds_mined / HOUR, abs=0.006)
        totals = found["totals"]
        assert totals["gpu_hours"]["leased"] == pytest.approx(leased / HOUR, abs=0.006)
        assert totals["gpu_hours"]["mined"] == pytest.approx(mined / HOUR, abs=0.006)
        assert totals["gpu_hours"]["available"] == pytest.approx(covered / HOUR, abs=0.006)
        # valued at the file's prices (RTX 3090: 0.25 a GPU-hour leased, 1.20 a GPU-day mined)
        assert totals["lease"] == pytest.approx(leased / HOUR * 0.25, abs=0.006)
        assert totals["mining"] == pytest.approx(mined / HOUR * 1.20 / 24, abs=0.006)
        assert totals["mining_equivalent"] == pytest.approx(leased / HOUR * 1.20 / 24, abs=0.006)
        # the periods add up to the totals, and the bars to the periods
        slack = 0.006 * len(found["periods"])
        for key in ("lease", "mining", "mining_equivalent"):
            assert sum(p[key] for p in found["periods"]) == pytest.approx(totals[key], abs=slack)
        drawn = sum(b["mining"]["h"] + b["lease"]["h"] for b in chart["bars"]) * chart["top"] / chart["height"]
        assert drawn == pytest.approx(totals["lease"] + totals["mining"], abs=slack + 0.05 * len(chart["bars"]) * chart["top"] / chart["height"])


def test_an_older_history_gets_its_day_sums_from_the_ledger_it_holds(tmp_path):
    t0 = MIDNIGHT - 30 * HOUR
    with History(tmp_path / "h.sqlite3") as h:
        h.add_ledger("rig01", [Entry(t0 + k * 5 * HOUR, views.MODES[k % 4], gpus=2) for k in range(12)], seen_at=NOW)
        before = list(h.db.execute("SELECT * FROM ledger_days ORDER BY rig, day"))
        h.db.execute("DROP TABLE ledger_days")
        h.db.execute("DROP INDEX ledger_open")
        h.db.execute("DROP TABLE lease_withdrawals")  # a history of version 8 had neither
        h.db.execute("DROP TABLE card_reads")  # nor migration 11's
        h.db.execute("PRAGMA user_version = 8")
    with History(tmp_path / "h.sqlite3") as h:
        assert h.version == 11 and list(h.db.execute("SELECT * FROM ledger_days ORDER BY rig, day")) == before
    assert len(before) == 4  # 55 h of closed lines from 18:00 over four UTC days


# -- the API and the pages -------------------------------------------------------------------------

@pytest.fixture
def app(tmp_path):
    """rig01 (1 RTX 3090) mined 10 h then leased 6 h; rig02 (the same card) mined 16 h."""
    (tmp_path / "rigs.yml").write_text(INVENTORY)
    hosts = inventory.load(tmp_path / "rigs.yml").hosts
    db, now = tmp_path / "h.sqlite3", time.time()
    with History(db) as h:
        for rep in (report_of("rig01", 1), report_of(OTHER_RIG, 1)):
            row = status_rows([rep], {rep.name: rep.name})[0]
            h.add_snapshot(rep.name, now, {**snapshot(rep, row), "read_at": now})
        h.add_ledger("rig01", [Entry(now - 16 * HOUR, "mining", gpus=1),
                               Entry(now - 6 * HOUR, "leasing", gpus=1, leases=("l/a",), leased=1)], seen_at=now)
        h.add_ledger(OTHER_RIG, [Entry(now - 16 * HOUR, "mining", gpus=1)], seen_at=now)
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda rig: rig))
    return create_app(DashboardConfig(db, list(hosts), ECON, actions, lambda chosen: None, lambda chosen: 0, 0, TOKEN))


OTHER_RIG = "rig02"
INVENTORY = """all:
  hosts:
    rig01: {ansible_host: 10.0.0.1}
    rig02: {ansible_host: 10.0.0.2}
"""


def test_the_api_answers_the_fleets_and_a_rigs_income_and_refuses_a_bad_period(app):
    with TestClient(app, base_url="http://127.0.0.1:8477") as client:
        assert client.get("/api/income").status_code == 401  # the same token as every route
        headers = {"Authorization": f"Bearer {TOKEN}"}
        fleet = client.get("/api/income", headers=headers).json()
        rig = client.get("/api/rigs/rig01/income?per=week", headers=headers).json()
        bad = client.get("/api/income?per=<b>year</b>", headers=headers)
        missing = client.get("/api/rigs/nope/income", headers=headers)
        index = client.get("/api", headers=headers).json()
    # 6 h leased x 0.25; 26 h mined x 1.20 / 24 (rig01 10 h, rig02 16 h): by the clock, across midnight or not
    assert fleet["totals"]["gpu_hours"]["leased"] == pytest.approx(6.0, abs=0.02)
    assert fleet["totals"]["lease"] == pytest.approx(1.5, abs=0.01)
    assert fleet["totals"]["mining"] == pytest.approx(1.3, abs=0.01)
    assert fleet["totals"]["mining_equivalent"] == pytest.approx(0.3, abs=0.01)
    assert len(fleet["periods"]) == 30 and fleet["forecast"]["gpus"] == 2
    assert fleet["forecast"]["leased_share"] == pytest.approx(6 / 32, abs=0.001)
    assert rig["per"] == "week" and len(rig["periods"]) == 13 and rig["totals"]["lease"] == pytest.approx(1.5, abs=0.01)
    assert bad.status_code == 400 and bad.json()["error"].startswith("per=") and "day, week, month" in bad.json()["error"]
    assert missing.status_code == 404
    assert "GET /api/income?per=day|week|month" in index and "GET /api/rigs/{rig}/income?per=day|week|month" in index


def test_the_fleet_and_rig_pages_draw_the_income_chart_with_a_period_switch(app):
    with TestClient(app, base_url="http://127.0.0.1:8477") as client:
        client.post("/login", data={"token": TOKEN}, headers=OWN, follow_redirects=False)
        fleet, weekly = client.get("/?per=month").text, client.get("/rigs/rig01?per=week").text
        assert client.get("/?per=decade").status_code == 400
        elsewhere = client.get("/?group=elsewhere&per=month").text  # a group no rig is in: its chart is empty
    assert fleet.count('class="income-bar"') == 12 and weekly.count('class="income-bar"') == 13
    assert 'href="?per=week"' in fleet and 'aria-current="page">month<' in fleet
    assert 'href="?group=elsewhere&amp;per=week"' in elsewhere and "of the rigs shown (group elsewhere)" in elsewhere
    assert "of the rigs shown" not in fleet
    assert elsewhere.count('class="bar-equivalent"') == 0 and 'id="income-lease">0.00<' in elsewhere
    months_leased = len({time.strftime("%Y-%m", time.gmtime(time.time() - k * HOUR)) for k in (0, 6)})
    assert fleet.count('class="bar-equivalent"') == months_leased  # a marker where a lease ran
    assert 'id="income-forecast"' in fleet and 'id="income-forecast"' in weekly and "/api/rigs/rig01/income" in weekly


def test_in_chromium_the_income_chart_draws_and_switches_under_the_pages_csp(app, tmp_path):
    assert Path(CHROMIUM).exists(), "chromium is missing: run scripts/install (Debian's chromium)"
    with serving(app) as port, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            violations: list[str] = []
            page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
            page.goto(f"http://127.0.0.1:{port}/")
            page.fill('input[name="token"]', TOKEN)
            page.click('form[action="/login"] button[type="submit"]')
            expect(page.locator("#income-chart g.income-bar")).to_have_count(30)
            today = page.locator("#income-chart g.income-bar").last
            assert today.locator("rect.bar-mining").bounding_box()["height"] > 0  # type: ignore[index]
            expect(page.locator("#income-total")).not_to_have_text("unknown")
            page.click("a.income-per >> text=week")
            expect(page.locator("#income-chart g.income-bar")).to_have_count(13)
            assert page.url.endswith("?per=week")
            page.screenshot(path=str(tmp_path / "income.png"), full_page=True)
            assert violations == [], violations
        finally:
            browser.close()


def test_the_report_caches_are_kept_out_of_the_collectors_passes_and_no_frozen_cycle_is_kept(app, tmp_path):
    """state.keep_out_of_gc: the fleet page freezes what is alive once its caches change (the full passes over 1,000
    rigs' reports cost ~90 ms a page); a cycle that died while frozen is collected once the caches change again."""

    class Cycle:
        me: Any = None

    try:
        with TestClient(app, base_url="http://127.0.0.1:8477") as client:
            junk = Cycle()
            junk.me, gone = junk, weakref.ref(junk)
            assert client.get("/api/rigs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
            assert gc.get_freeze_count() > 0
            del junk
            gc.collect()
            assert gone() is not None  # frozen: passed by
            with History(tmp_path / "h.sqlite3") as h:
                at, stored = h.latest("rig01") or (0.0, {})
                h.add_snapshot("rig01", at + 1, {**stored, "read_at": at + 1})
            assert client.get("/api/rigs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
            assert gone() is None  # thawed and collected with the next change
    finally:
        gc.unfreeze()


def test_the_rig_pages_day_range_links_keep_the_income_period(app):
    with TestClient(app, base_url="http://127.0.0.1:8477") as client:
        client.post("/login", data={"token": TOKEN}, headers=OWN, follow_redirects=False)
        page = client.get("/rigs/rig01?per=month").text
    assert 'href="?days=7&amp;per=month"' in page and 'href="?days=30&amp;per=month"' in page
