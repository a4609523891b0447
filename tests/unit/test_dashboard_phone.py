"""The dashboard on a phone (issue 57): the sign-in, fleet and rig pages at 390 x 844 CSS px (an iPhone 12 to 15's
viewport) in Debian's chromium emulating a phone, which honours the page's viewport meta as a phone's browser does:
the page does not scroll sideways (a wide table or chart scrolls in its own box), every action and link of the
navigation is a 44 x 44 px touch target, no text is under 12 px; and at 1280 x 640 the desktop pages do not scroll
sideways either.  A fleet that strains the layout: 30 rigs with long names, 8 cards each, leases with long pod
names, a week of ledger and a day of card readings, what the rigs sent hostile as in the cards' pages test.

With M2P_SCREENSHOTS=docs/img the test also writes the screenshots docs/dashboard.md shows."""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright
from test_dashboard import ECON, TOKEN  # tests/unit is on sys.path (no package)
from test_dashboard_cards_pages import CHROMIUM, HOSTILE, _inert, iso
from test_dashboard_server import serving
from test_readiness import GPU_ROW, facts

from miner2provider.core import inventory
from miner2provider.dashboard.actions import ACTIONS, Actions, Fleet
from miner2provider.dashboard.app import DashboardConfig, create_app
from miner2provider.dashboard.collect import snapshot
from miner2provider.dashboard.history import History
from miner2provider.detect.readiness import assess
from miner2provider.detect.report import RigReport, status_rows
from miner2provider.detect.ssh import SshOptions
from miner2provider.market.akash import address, chain
from miner2provider.market.wallet import CLOSED, RUNNING, LeaseRecord, WalletRead
from miner2provider.rigside.ledger import Entry
from miner2provider.rigside.status import AgentStatus, Card, Lease, Measured, Telemetry

PHONE = {"width": 390, "height": 844}  # CSS px: iPhone 12 to 15 (Apple's Human Interface Guidelines, Layout)
DESKTOP = {"width": 1280, "height": 640}  # a 1280 x 800 laptop screen less the browser's own bars
TOUCH_PX = 44  # WCAG 2.2 2.5.5 Target Size (Enhanced) and Apple's HIG: 44 x 44
TARGET_PX = 24  # WCAG 2.2 2.5.8 Target Size (Minimum): any other control or link outside a sentence
TEXT_PX = 12
SHOT_BYTES = 150_000  # a screenshot in docs/img/ at the most
HOUR, DAY = 3600.0, 86400.0
RIGS = [f"barn-north-rack{n // 10 + 1:02d}-shelf{n % 10 + 1:02d}-rtx3090x8-{n:02d}.farm.example" for n in range(30)]
SHOWN = RIGS[0]  # a leased rig with a hot card: the rig page the screenshots show
HOSTILE_RIG = 29  # its cards' names, reasons and read error are what a compromised rig would send
PROVIDER, TENANT = address.encode(bytes(range(20))), address.encode(bytes(range(20, 40)))
CLOSED_BY = ("tenant", "tenant", "tenant", "provider", "reclamation", "network")  # the wallet's closed leases


def lease_id(k: int) -> str:
    """The k-th lease as Akash names it: owner/dseq/gseq/oseq/provider."""
    return f"{TENANT}/{18_400_000 + k}/1/1/{PROVIDER}"


def pods(n: int) -> tuple[str, str]:
    """A leased rig's two tenant pods, each in the namespace Akash's provider gives its lease (45 characters)."""
    return (f"{chain.namespace(lease_id(2 * n))}/web-frontend-7d9c6b5f4-x2x8q",
            f"{chain.namespace(lease_id(2 * n + 1))}/postgres-0")


def wallet(now: float) -> WalletRead:
    """The provider's wallet as the chain reader would read it: a lease running per leased rig's pod, six closed."""
    running = [LeaseRecord(lease_id(k), TENANT, chain.namespace(lease_id(k)), RUNNING, "active", "", 4.2, 12.5,
                           0.09, "open", 30.0) for n in range(len(RIGS)) if leased(n) for k in (2 * n, 2 * n + 1)]
    closed = [LeaseRecord(lease_id(1000 + k), TENANT, chain.namespace(lease_id(1000 + k)), CLOSED,
                          "insufficient_funds" if by == "network" else "closed", by, 0.0, 3.1, 0.09, "closed", 34.5)
              for k, by in enumerate(CLOSED_BY)]
    leases = (*running, *closed)
    return WalletRead(now, PROVIDER, "AKT", 1234.567891, leases, chain.completion(leases), price=2.15,
                      price_source="provider.yml:9")


def eight_cards(n: int, at: float) -> Telemetry:
    """Eight cards warming by day and cooling by night (a barn's day, 6 degrees either way); card 5 of the shown
    rig runs hot, and the hostile rig's is named and explained by it, whose last read failed with its own message."""
    warm = 6 * math.sin(at / DAY * 2 * math.pi)
    cards = [Card(i, f"GPU-{n:02d}-{i}-0b1e0a3c-5f4e-4d57-9a48-2f6d1b0e7c{i:02d}", "NVIDIA GeForce RTX 3090",
                  temperature_c=round(55.0 + 2 * i + warm, 1), fan_percent=40.0 + i,
                  power_w=round(200.0 + 10 * i + 3 * warm), power_limit_w=350.0, sm_mhz=1695.0, memory_mhz=9751.0,
                  utilization_percent=100.0, memory_used_mib=5120.0, memory_total_mib=24576.0, pcie_gen=1,
                  pcie_width=1, throttle=0x4) for i in range(8)]
    if n in (0, HOSTILE_RIG):
        hostile = n == HOSTILE_RIG
        cards[5] = dataclasses.replace(
            cards[5], name=HOSTILE[0] if hostile else cards[5].name, health="hot", throttle=0x20 | 0x40,
            why=HOSTILE[1] if hostile else f"{92.0 + warm:.0f} °C, the limit is 85 °C",
            temperature_c=round(92.0 + warm, 1))
    return Telemetry(iso(at), tuple(cards), error=HOSTILE[3] if n == HOSTILE_RIG else "")


def leased(n: int) -> bool:
    return n % 3 == 0  # a third of the fleet, the shown rig among them


def report(n: int, now: float) -> RigReport:
    status = AgentStatus(True, "leasing" if leased(n) else "mining", iso(now - 5 * HOUR), iso(now + 7 * HOUR), "schedule",
                         "", (Lease(pods(n)[0], iso(now - 5 * HOUR)), Lease(pods(n)[1], iso(now - HOUR)))
                         if leased(n) else (), telemetry=eight_cards(n, now - 60),
                         measured=None if leased(n) else Measured("kawpow", (21.5,) * 8, (180.0,) * 8))
    f = dataclasses.replace(facts(gpus="".join(GPU_ROW.replace("0, ", f"{i}, ", 1) for i in range(8))),
                            agent_status=status)
    return RigReport(RIGS[n], f"10.0.{n}.1", f, assess(f))


def ledger(n: int, now: float) -> list[Entry]:
    """A week of days mining from midnight and leased from (6 + n % 5) to (18 + n % 3) o'clock, up to the mode the
    rig's status says it is in since 5 hours ago."""
    midnight, since = now - now % DAY - 7 * DAY, now - 5 * HOUR
    days = [entry for d in range(8) for entry in (
        Entry(midnight + d * DAY, "mining", gpus=8),
        Entry(midnight + d * DAY + (6 + n % 5) * HOUR, "leasing", gpus=8, leases=pods(n), leased=8),
        Entry(midnight + d * DAY + (18 + n % 3) * HOUR, "mining", gpus=8)) if entry.at < since]
    return [*days, Entry(since, "leasing" if leased(n) else "mining", gpus=8, leases=pods(n) if leased(n) else (),
                         leased=8 if leased(n) else 0)]


@pytest.fixture
def served(tmp_path) -> Iterator[str]:
    (tmp_path / "rigs.yml").write_text("all:\n  children:\n    barn_north:\n      hosts:\n" + "".join(
        f"        {rig}: {{ansible_host: 10.0.{n}.1}}\n" for n, rig in enumerate(RIGS)))
    hosts = inventory.load(tmp_path / "rigs.yml").hosts
    db, now = tmp_path / "h.sqlite3", time.time()
    reports = [report(n, now) for n in range(len(RIGS))]
    with History(db) as h:
        for n, (rep, row) in enumerate(zip(reports, status_rows(reports, {r: r for r in RIGS}), strict=True)):
            h.add_snapshot(rep.name, now, {**snapshot(rep, row), "read_at": now})
            h.add_ledger(rep.name, ledger(n, now), seen_at=now)
            if n in (0, HOSTILE_RIG):
                for hours in range(24, -1, -1):  # a reading an hour over the day
                    h.add_cards(rep.name, eight_cards(n, now - hours * HOUR - 60), now - hours * HOUR)
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda rig: rig))
    read = wallet(now)
    app = create_app(DashboardConfig(db, list(hosts), ECON, actions, lambda chosen: None, lambda chosen: 0, 0, TOKEN),
                     wallet_read=lambda: read)
    with serving(app) as port:
        deadline = time.monotonic() + 10
        while app.state.wallet.latest is None and time.monotonic() < deadline:  # its own thread reads it at start
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), "chromium is missing: run scripts/install (Debian's chromium)"
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


# Sizes as the browser laid them out, against the window's own width: a phone's browser widens its layout to the
# widest content when it overflows (innerWidth grows with it), so innerWidth alone would excuse the overflow.  A page
# that hid what overflows (overflow-x: hidden on html or body) would pass while cutting content off: the page's own
# overflow must stay visible.
LAYOUT = """() => ({
  scroll: document.documentElement.scrollWidth, inner: window.innerWidth,
  overflow: [getComputedStyle(document.documentElement).overflowX, getComputedStyle(document.body).overflowX],
})"""
# Every visible target of a selector: its size, and what it is (to name it when it is too small).
TARGETS = """selector => [...document.querySelectorAll(selector)].filter(e => e.getClientRects().length)
  .map(e => { const r = e.getBoundingClientRect(), name = e.textContent.trim() || e.name || e.className;
              return [e.tagName.toLowerCase() + " " + name, r.width, r.height]; })"""
# The rendered size of every visible text: its font size times any scale the SVG it is in was drawn at.
SMALL_TEXT = """least => { const small = [], walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walk.nextNode()) {
    const el = walk.currentNode.parentElement, text = walk.currentNode.textContent.trim();
    if (!text || !el.getClientRects().length || el.closest("script, style, title")) continue;
    let px = parseFloat(getComputedStyle(el).fontSize);
    if (el instanceof SVGGraphicsElement) { const m = el.getScreenCTM(); px *= Math.hypot(m.a, m.b); }
    if (px < least) small.push([text.slice(0, 40), px]);
  }
  return small; }"""


def fits(page: Page, what: str) -> None:
    """The page does not scroll sideways, and hides nothing to get there."""
    assert page.viewport_size is not None
    layout, width = page.evaluate(LAYOUT), page.viewport_size["width"]
    assert layout["overflow"] == ["visible", "visible"], f"{what}: the page clips what overflows"
    assert layout["scroll"] <= width and layout["inner"] == width, f"{what}: {layout} in a {width} px window"


def targets_at_least(page: Page, selector: str, px: int, what: str) -> int:
    found = page.evaluate(TARGETS, selector)
    small = [(name, round(w, 1), round(h, 1)) for name, w, h in found if w < px or h < px]
    assert small == [], f"{what}: targets under {px} x {px} px: {small}"
    return len(found)


def thumb_wide(page: Page, what: str) -> None:
    """The navigation and the action bar, with the confirm button the bar shows after a plan."""
    assert targets_at_least(page, "nav a, nav button", TOUCH_PX, what) == 3
    page.eval_on_selector("#confirm", "b => { b.hidden = false; }")
    assert targets_at_least(page, "button.action, #confirm", TOUCH_PX, what) == len(ACTIONS) + 1
    page.eval_on_selector("#confirm", "b => { b.hidden = true; }")


def readable(page: Page, what: str) -> None:
    small = page.evaluate(SMALL_TEXT, TEXT_PX)
    assert small == [], f"{what}: text under {TEXT_PX} px: {small}"


def shoot(page: Page, name: str, at: str = "", height: int = 0) -> None:
    """The window's view (its top ``height`` px if given), scrolled to ``at`` (a selector) if given, where
    docs/dashboard.md's screenshots are asked for (M2P_SCREENSHOTS: their folder)."""
    if folder := os.environ.get("M2P_SCREENSHOTS"):
        if at:
            page.locator(at).first.evaluate("e => e.scrollIntoView()")
        shot = Path(folder) / f"{name}.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        width = page.viewport_size["width"] if page.viewport_size else 0
        page.screenshot(path=str(shot), clip={"x": 0, "y": 0, "width": width, "height": height} if height else None)
        assert shot.stat().st_size < SHOT_BYTES, f"{shot}: {shot.stat().st_size} bytes, too big for the docs"


def watch_policy(page: Page, violations: list[str]) -> None:
    """Collects what the page's Content-Security-Policy refused (_inert says there was nothing)."""
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)


def sign_in(page: Page, served: str, violations: list[str]) -> None:
    watch_policy(page, violations)
    page.goto(served + "/")
    page.fill('input[name="token"]', TOKEN)
    page.click('form[action="/login"] button[type="submit"]')
    page.wait_for_url(served + "/")


@pytest.fixture
def phone(browser) -> Iterator[Page]:
    """A phone's browser: its layout follows the page's viewport meta, taps instead of a mouse (pointer: coarse)."""
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    yield context.new_page()
    context.close()


def test_on_a_phone_the_sign_in_page_fits_and_its_field_and_button_are_a_thumb_wide(served, phone):
    violations: list[str] = []
    watch_policy(phone, violations)
    phone.goto(served + "/login")
    assert phone.evaluate("innerWidth") == PHONE["width"], "no viewport meta: the phone lays the page out 980 px wide"
    fits(phone, "sign-in")
    assert targets_at_least(phone, "nav a, form input, form button", TOUCH_PX, "sign-in") == 4
    readable(phone, "sign-in")
    _inert(phone, violations)
    shoot(phone, "login-phone")


def test_on_a_phone_the_fleet_page_fits_its_table_scrolls_in_its_box_and_every_action_is_a_thumb_wide(served, phone):
    violations: list[str] = []
    sign_in(phone, served, violations)
    assert phone.locator("#rigs tbody tr").count() == len(RIGS)
    fits(phone, "fleet")
    rigs_box = phone.evaluate("() => { const t = document.getElementById('rigs'); "
                              "return [t.scrollWidth, t.clientWidth, getComputedStyle(t).overflowX]; }")
    assert rigs_box[0] > rigs_box[1] and rigs_box[2] == "auto"  # the table scrolls in its own box
    assert phone.locator("#wallet-leases tr.lease").count() == 20 + len(CLOSED_BY)
    # Scrolled to its last column, each row still shows its box and rig name.
    phone.eval_on_selector("#rigs", "t => { t.scrollLeft = t.scrollWidth; }")
    first = phone.locator("#rigs tbody tr").first
    for cell in (first.locator("input.pick"), first.get_by_role("link", name=RIGS[0])):
        box = cell.bounding_box()
        assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= PHONE["width"], box
    phone.eval_on_selector("#rigs", "t => { t.scrollLeft = 0; }")
    thumb_wide(phone, "fleet")
    assert targets_at_least(phone, "form[method=get] select, form[method=get] button", TOUCH_PX, "filter") == 4
    targets_at_least(phone, "#rigs a, #rigs input", TARGET_PX, "fleet table")
    readable(phone, "fleet")
    _inert(phone, violations)
    shoot(phone, "fleet-phone")
    phone.eval_on_selector("#rigs", "t => { t.scrollLeft = 240; }")
    shoot(phone, "fleet-table-phone", "form[method=get]")
    shoot(phone, "income-phone", "#income")
    shoot(phone, "actions-phone", "h2:has-text('Actions')")


@pytest.mark.parametrize("rig", [SHOWN, RIGS[HOSTILE_RIG]])
def test_on_a_phone_the_rig_page_fits_its_charts_open_at_now_and_every_action_is_a_thumb_wide(served, phone, rig):
    violations: list[str] = []
    sign_in(phone, served, violations)
    phone.goto(served + f"/rigs/{rig}")
    assert phone.locator("#cards tbody tr").count() == 8
    fits(phone, "rig")
    for chart in ("#chart-temperature", "#chart-power"):  # a day chart opens at its right end, now
        now = phone.locator(f"{chart} text", has_text="now").bounding_box()
        assert now is not None and 0 <= now["x"] and now["x"] + now["width"] <= PHONE["width"], (chart, now)
    assert phone.locator('#cards tr[data-health="hot"]').count() == 1
    thumb_wide(phone, "rig")
    assert targets_at_least(phone, "h2 a", TOUCH_PX, "rig's headings") >= 2  # 7 or 30 days, and more
    targets_at_least(phone, "table a, table input", TARGET_PX, "rig tables")
    readable(phone, "rig")
    _inert(phone, violations)
    if rig == SHOWN:
        shoot(phone, "rig-phone")
        shoot(phone, "charts-phone", "h3")


def test_on_a_desktop_the_pages_fit_the_window(served, browser):
    context = browser.new_context(viewport=DESKTOP)
    page, violations = context.new_page(), list[str]()
    sign_in(page, served, violations)
    fits(page, "fleet")
    readable(page, "fleet")
    _inert(page, violations)
    shoot(page, "fleet-desktop")
    shoot(page, "income-desktop", "#income")
    shoot(page, "fleet-table-desktop", "form[method=get]", height=480)  # five rows say it, in fewer bytes
    for rig in (RIGS[HOSTILE_RIG], SHOWN):
        page.goto(served + f"/rigs/{rig}")
        fits(page, "rig")
        readable(page, "rig")
        _inert(page, violations)
    shoot(page, "rig-desktop")
    shoot(page, "charts-desktop", "h3")
    context.close()
