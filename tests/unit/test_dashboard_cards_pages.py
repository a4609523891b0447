"""The dashboard's cards on its pages (issue 56): the rig page's per-card table and day charts, the fleet page's
hottest card and unhealthy cards; what a rig sends in card names, reasons and errors stays text (served by the app,
and in a real browser: Debian's chromium driven by Playwright, against real uvicorn on loopback)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect, sync_playwright
from starlette.testclient import TestClient
from test_dashboard import ECON, INVENTORY, OWN, TOKEN  # tests/unit is on sys.path (no package)
from test_dashboard_server import serving
from test_readiness import facts

from miner2provider.core import inventory
from miner2provider.dashboard.actions import Actions, Fleet
from miner2provider.dashboard.app import DashboardConfig, create_app
from miner2provider.dashboard.collect import snapshot
from miner2provider.dashboard.history import History
from miner2provider.detect.readiness import assess
from miner2provider.detect.report import RigReport, status_rows
from miner2provider.detect.ssh import SshOptions
from miner2provider.rigside.status import AgentStatus, Card, Measured, Telemetry

CHROMIUM = "/usr/bin/chromium"  # Debian's (scripts/install); Playwright never downloads its own
# What a compromised rig sends in every field it controls (tests/integration/test_dashboard.py's HOSTILE): markup
# that would run or inject an element if a page parsed it (each sets window.__pwned, which must stay unset).
HOSTILE = ['<img src=x onerror="window.__pwned=1" id=pwn1>', "</script><script>window.__pwned=2</script>",
           '"><svg onload="window.__pwned=3" id=pwn3>', "<b id=pwn4>bold</b>{{7*7}}"]
HOUR = 3600.0


def cards_of(rig: str, now: float) -> Telemetry:
    """rig01: two cool cards, one named by a hostile rig; rig02: card 1 hot, its reason and the read's error hostile."""
    if rig == "rig01":
        return Telemetry(iso(now - 90), (
            Card(0, "GPU-a0", HOSTILE[0], temperature_c=58.0, fan_percent=45.0, power_w=180.0, power_limit_w=250.0,
                 sm_mhz=1400.0, memory_mhz=9501.0, utilization_percent=100.0, memory_used_mib=5000.0,
                 memory_total_mib=24576.0, pcie_gen=1, pcie_width=16, throttle=0x4),
            Card(1, "GPU-a1", "NVIDIA GeForce RTX 3090", temperature_c=63.0, power_w=190.0)))
    return Telemetry(iso(now - 30), (
        Card(0, "GPU-b0", "NVIDIA GeForce RTX 3090", temperature_c=70.0, power_w=200.0),
        Card(1, "GPU-b1", HOSTILE[2], health="hot", why=HOSTILE[1], temperature_c=91.0, power_w=240.0,
             throttle=0x20 | 0x40)), error=HOSTILE[3])


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def report(name: str, now: float) -> RigReport:
    f = facts()
    status = AgentStatus(True, "mining", iso(now - 5 * HOUR), telemetry=cards_of(name, now),
                         measured=Measured("kawpow", (21.5, 22.25), (180.0, 190.0)) if name == "rig01" else None)
    f = dataclasses.replace(f, agent_status=status)
    return RigReport(name, "10.0.0.1", f, assess(f))


@pytest.fixture
def app(tmp_path):
    (tmp_path / "rigs.yml").write_text(INVENTORY)
    hosts = inventory.load(tmp_path / "rigs.yml").hosts
    db, now = tmp_path / "h.sqlite3", time.time()
    reports = [report("rig01", now), report("rig02", now)]
    with History(db) as h:
        for rep, row in zip(reports, status_rows(reports, {"rig01": "rig01", "rig02": "rig02"}), strict=True):
            h.add_snapshot(rep.name, now, {**snapshot(rep, row), "read_at": now})
            telemetry = cards_of(rep.name, now)
            for hours in range(24, 0, -1):  # a reading an hour over the day, card 1 of rig02 warming up
                at = now - hours * HOUR
                h.add_cards(rep.name, dataclasses.replace(telemetry, read_at=iso(at), cards=tuple(
                    dataclasses.replace(c, temperature_c=(c.temperature_c or 0) - hours) for c in telemetry.cards)),
                    at)
            h.add_cards(rep.name, telemetry, now)
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda rig: rig))
    return create_app(DashboardConfig(db, list(hosts), ECON, actions, lambda chosen: None, lambda chosen: 0, 0, TOKEN))


@contextlib.contextmanager
def signed_in(app) -> Iterator[TestClient]:
    with TestClient(app, base_url="http://127.0.0.1:8477") as client:
        assert client.post("/login", data={"token": TOKEN}, headers=OWN, follow_redirects=False).status_code == 303
        yield client


def test_the_fleet_page_shows_each_rigs_hottest_card_and_its_unhealthy_ones_escaped(app):
    with signed_in(app) as client:
        fleet = client.get("/").text
        rows = {r["rig"]: r["cards"] for r in client.get("/api/rigs").json()["rigs"]}
    assert (rows["rig01"]["worst_c"], rows["rig01"]["unhealthy"]) == (63.0, [])
    assert (rows["rig02"]["worst_c"], rows["rig02"]["worst_card"]) == (91.0, 1)
    assert rows["rig02"]["unhealthy"] == [{"index": 1, "health": "hot", "why": HOSTILE[1]}]
    assert "91 °C" in fleet and "card 1 hot: &lt;/script&gt;&lt;script&gt;window.__pwned=2" in fleet
    for hostile in HOSTILE:
        assert hostile not in fleet


def test_the_rig_page_has_a_row_per_card_and_day_charts_all_escaped(app):
    with signed_in(app) as client:
        cool, hot = client.get("/rigs/rig01").text, client.get("/rigs/rig02").text
    assert cool.count('<tr data-card="') == 2 and hot.count('<tr data-card="') == 2
    assert "21.50 MH/s" in cool and "22.25 MH/s" in cool and "(kawpow)" in cool  # two cards, two rates
    assert hot.count("not reported") == 2  # no miner measured: no hashrate per card
    assert "software power cap" in cool and "software thermal slowdown, hardware thermal slowdown" in hot
    assert "gen 1 x16" in cool and "180 / 250 W" in cool and "1 min ago" in cool
    assert 'data-health="hot"' in hot and "hot: &lt;/script&gt;" in hot
    assert "Last read failed: &lt;b id=pwn4&gt;" in hot
    for page in (cool, hot):
        assert page.count('class="card-line"') == 4  # two cards x (temperature, power), unbroken
        assert 'id="chart-temperature"' in page and 'id="chart-power"' in page
        for hostile in HOSTILE:
            assert hostile not in page


@pytest.fixture
def served(app) -> Iterator[str]:
    with serving(app) as port:
        yield f"http://127.0.0.1:{port}"


def test_in_chromium_the_hot_card_shows_on_both_pages_and_nothing_a_rig_sent_runs(served, tmp_path):
    assert Path(CHROMIUM).exists(), "chromium is missing: run scripts/install (Debian's chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            violations: list[str] = []
            page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
            page.goto(served + "/")
            page.fill('input[name="token"]', TOKEN)
            page.click('form[action="/login"] button[type="submit"]')

            expect(page.locator("#rigs tbody tr")).to_have_count(2)
            hot_row = page.locator('tr[data-rig="rig02"] td.cards')
            expect(hot_row).to_contain_text("91 °C")
            expect(hot_row.locator(".unhealthy")).to_have_text(f"card 1 hot: {HOSTILE[1]}")
            expect(page.locator('tr[data-rig="rig01"] td.cards .unhealthy')).to_have_count(0)
            _inert(page, violations)
            page.screenshot(path=str(tmp_path / "fleet.png"), full_page=True)

            page.goto(served + "/rigs/rig02")
            expect(page.locator("#cards tbody tr")).to_have_count(2)
            expect(page.locator('#cards tr[data-health="hot"] td').nth(1)).to_contain_text(HOSTILE[2])
            expect(page.locator('#cards tr[data-health="hot"] td').nth(2)).to_have_text(f"hot: {HOSTILE[1]}")
            for chart in ("#chart-temperature", "#chart-power"):
                expect(page.locator(f"{chart} polyline.card-line")).to_have_count(2)
                assert page.locator(f"{chart} polyline.card-line").first.bounding_box()["width"] > 600  # type: ignore[index]
            _inert(page, violations)
            page.screenshot(path=str(tmp_path / "rig02.png"), full_page=True)

            page.goto(served + "/rigs/rig01")
            expect(page.locator("#cards tbody tr").first).to_contain_text(HOSTILE[0])
            expect(page.locator("#cards tbody tr").first).to_contain_text("21.50 MH/s")
            _inert(page, violations)
        finally:
            browser.close()


def _inert(page: Page, violations: list[str]) -> None:
    """What the rigs sent is on the page as text only: no element of theirs, no script of theirs ran, and our own
    scripts and styles broke no rule of the page's Content-Security-Policy."""
    page.wait_for_load_state("load")
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#pwn1, #pwn3, #pwn4").count() == 0
    assert violations == [], violations
