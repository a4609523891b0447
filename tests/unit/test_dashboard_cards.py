"""The dashboard's cards (issue 56): the history's card samples and alert state (migration 8), the rig page's table,
the fleet page's worst temperature and unhealthy cards, the day charts, and what a rig sends escaped."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

import pytest

from miner2provider.alerts.config import AlertsConfig
from miner2provider.alerts.rules import Held, Rules, State, state_from_json, state_json
from miner2provider.alerts.service import Alerting
from miner2provider.core.errors import UsageError
from miner2provider.dashboard import cards
from miner2provider.dashboard.history import CARDS_KEPT_S, MIGRATIONS, History
from miner2provider.market.base import ProviderState
from miner2provider.rigside.ledger import Entry
from miner2provider.rigside.status import AgentStatus, Card, Measured, Telemetry, agent_status_from

DAY = 86_400.0
NOW = 1_800_000_000.0


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def reading(at: float, *temps: float | None, power: float = 200.0) -> Telemetry:
    return Telemetry(iso(at), tuple(Card(n, f"GPU-{n}", "NVIDIA GeForce RTX 3090", temperature_c=t, power_w=power)
                                    for n, t in enumerate(temps)))


def test_an_old_database_upgrades_with_its_data_and_a_newer_one_is_refused(tmp_path):
    path = tmp_path / "h.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("".join(MIGRATIONS[:7]) + "PRAGMA user_version = 7;")
    db.execute("INSERT INTO rigs VALUES ('rig01', ?, ?)", (NOW, NOW))
    db.execute("INSERT INTO ledger (rig, at, mode, blind, gpus, leases, until) VALUES ('rig01', ?, 'mining', 0, 2, "
               "'[]', NULL)", (NOW,))
    db.commit()
    db.close()
    with History(path) as h:
        assert h.version == len(MIGRATIONS) == 11
        assert h.ledger("rig01", NOW - 1, NOW + 1) == [Entry(NOW, "mining", gpus=2)]
        assert h.add_cards("rig01", reading(NOW, 60.0, 70.0), NOW) == 2
        assert h.alert_state() is None
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    db.close()
    with pytest.raises(UsageError, match="newer than this m2p reads"):
        History(path)


def test_a_reading_is_stored_once_old_ones_are_pruned_and_a_clock_ahead_is_stored_at_now_once():
    with History(":memory:") as h:
        assert h.add_cards("rig01", reading(NOW - 3 * DAY, 50.0), NOW - 3 * DAY) == 1
        assert h.add_cards("rig01", reading(NOW - 600, 61.0, 62.0), NOW) == 2
        assert h.add_cards("rig01", reading(NOW - 600, 61.0, 62.0), NOW + 60) == 0  # the same reading, swept again
        assert h.add_cards("rig01", None, NOW) == 0 and h.add_cards("rig01", Telemetry("garbage"), NOW) == 0
        assert h.add_cards("rig01", Telemetry("2026-11-29T08:00:00", reading(NOW, 1.0).cards), NOW) == 0  # no zone
        assert h.card_samples("rig01", 0) == {0: [(NOW - 600, 61.0, 200.0)], 1: [(NOW - 600, 62.0, 200.0)]}
        assert h.add_cards("rig01", reading(NOW + 5 * DAY, 99.0), NOW + 60) == 1
        assert h.card_samples("rig01", NOW)[0] == [(NOW + 60, 99.0, 200.0)]
        assert h.add_cards("rig01", reading(NOW + 5 * DAY, 99.0), NOW + 120) == 0  # the same reading, swept again
        assert h.add_cards("rig01", reading(NOW + 5 * DAY + 300, 98.0), NOW + 180) == 1  # the clock's next reading
        assert h.card_samples("rig01", NOW)[0] == [(NOW + 60, 99.0, 200.0), (NOW + 180, 98.0, 200.0)]
        h.add_cards("rig01", reading(NOW + CARDS_KEPT_S, 40.0), NOW + CARDS_KEPT_S)  # the rig's own old rows go
        assert h.card_samples("rig01", 0) == {0: [(NOW + 60, 99.0, 200.0), (NOW + 180, 98.0, 200.0),
                                                  (NOW + CARDS_KEPT_S, 40.0, 200.0)]}


def test_the_alert_state_outlives_a_restart(tmp_path):
    state = State(NOW - 60, {"temperature/rig01/GPU-0": Held("temperature", "rig01", NOW - 30, NOW - 30,
                                                              "card 0 at 91 °C", "card 0 cooled")},
                  {"rig01": ("lease/a",)})
    with History(tmp_path / "h.sqlite3") as h:
        h.save_alert_state(state_json(state), NOW)
        h.save_alert_state(state_json(state), NOW + 60)  # one row, overwritten
    with History(tmp_path / "h.sqlite3") as h:
        assert state_from_json(h.alert_state()) == state
        assert h.db.execute("SELECT count(*) FROM alert_state").fetchone()[0] == 1


def test_a_restarted_dashboard_does_not_say_again_what_it_said_before(tmp_path):
    """What cli/dashboard.py does around Alerting: the state read back at start, saved after each sweep."""
    def alerting() -> Alerting:
        found = Alerting(AlertsConfig("alerts.yml", Rules(), ()))
        found.watching(lambda: ProviderState("u", "HTTP 502", {}))()
        return found

    first, fresh, restarted = alerting(), alerting(), alerting()
    try:
        with History(tmp_path / "h.sqlite3") as h:
            assert [m.kind for m in first.sweep_done({}, {}, NOW)] == ["firing"]
            h.save_alert_state(state_json(first.state), NOW)
            assert [m.kind for m in fresh.sweep_done({}, {}, NOW + 60)] == ["firing"]  # without the store: again
            restarted.state = state_from_json(h.alert_state())
            assert restarted.sweep_done({}, {}, NOW + 60) == []
    finally:
        for each in (first, fresh, restarted):
            each.close()


def test_throttle_reasons_are_nvmls_bits_said():
    assert cards.throttle_said(None) == [] and cards.throttle_said(0) == []
    assert cards.throttle_said(0x20 | 0x40) == ["software thermal slowdown", "hardware thermal slowdown"]
    assert cards.throttle_said(0x4 | 0x1000) == ["software power cap", "other (0x1000)"]


def test_the_fleet_glance_names_the_hottest_card_and_every_unhealthy_one():
    telemetry = Telemetry(iso(NOW), (Card(0, "a", temperature_c=64.0), Card(1, "b", health="hot", why="91 °C, the "
                                     "limit is 85 °C", temperature_c=91.0), Card(2, "c", health="lost", why="GPU is lost")))
    glance = cards.health(telemetry)
    assert glance is not None
    assert (glance["worst_c"], glance["worst_card"]) == (91.0, 1)
    assert glance["unhealthy"] == [{"index": 1, "health": "hot", "why": "91 °C, the limit is 85 °C"},
                                   {"index": 2, "health": "lost", "why": "GPU is lost"}]
    assert cards.health(None) is None
    assert cards.health(Telemetry(iso(NOW), (Card(0, "a", health="lost"),)))["worst_c"] is None  # type: ignore[index]


def test_the_table_gives_each_card_its_hashrate_only_when_the_miner_lists_as_many():
    telemetry = reading(NOW - 120, 60.0, 70.0)
    table = cards.card_table(AgentStatus(True, telemetry=telemetry, measured=Measured("kawpow", (21.5, 22.0), ())),
                             NOW)
    assert table is not None and table["age_s"] == 120 and table["algo"] == "kawpow"
    assert [c["mhs"] for c in table["cards"]] == [21.5, 22.0]
    odd = cards.card_table(AgentStatus(True, telemetry=telemetry, measured=Measured("kawpow", (43.5,), ())), NOW)
    assert odd is not None and [c["mhs"] for c in odd["cards"]] == [None, None]
    assert cards.card_table(AgentStatus(True), NOW) is None


def test_chart_points_span_the_day_and_a_missing_figure_breaks_the_line():
    samples = {0: [(NOW - 2 * DAY, 99.0, 300.0), (NOW - DAY, 50.0, 100.0), (NOW - DAY / 2, None, 150.0),
                   (NOW, 75.0, 200.0)], 1: [(NOW - DAY / 2, 60.0, None)]}
    charts = cards.day_charts(samples, NOW)
    temperature, power = charts["temperature"], charts["power"]
    assert temperature["top"] == 80.0 and power["top"] == 200.0  # the day's highest, rounded up; the older rows out
    card0 = temperature["lines"][0]
    assert card0["points"] == ["0.0,60.0", f"{cards.CHART_W:.1f},{cards.CHART_H * (1 - 75 / 80):.1f}"]
    assert power["lines"][0]["points"] == [f"0.0,{cards.CHART_H / 2:.1f} {cards.CHART_W / 2:.1f},40.0 "
                                           f"{cards.CHART_W:.1f},0.0"]
    assert power["lines"][1]["points"] == [] and power["lines"][1]["last"] is None
    assert cards.day_charts({}, NOW)["temperature"]["empty"]


def test_a_status_with_telemetry_reads_back_for_the_page():
    telemetry = reading(NOW, 88.0)
    status = agent_status_from(json.loads(json.dumps(AgentStatus(True, "mining", telemetry=telemetry).as_json())))
    assert status.telemetry is not None and cards.health(status.telemetry)["worst_c"] == 88.0  # type: ignore[index]
