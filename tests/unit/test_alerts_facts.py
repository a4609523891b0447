"""What a dashboard sweep gives the alert rules (miner2provider/alerts/facts.py), read from the history as the sweep
stores it, and the dashboard's call after a sweep (Alerting.sweep_done) reaching a webhook stand-in: a hot card is
said once, then its recovery when it cools; a rig whose read failed is silent after N minutes."""

from __future__ import annotations

import dataclasses
import time

from test_readiness import facts  # tests/unit is on sys.path (no package)

from m2p_sandbox.alert_receivers import WebhookStandin
from miner2provider.alerts.config import AlertsConfig
from miner2provider.alerts.facts import Card, Rig, snapshot_from_history
from miner2provider.alerts.receivers import Webhook
from miner2provider.alerts.rules import Rules
from miner2provider.alerts.service import Alerting
from miner2provider.core.inventory import Secret
from miner2provider.dashboard.collect import snapshot
from miner2provider.dashboard.history import History
from miner2provider.detect.facts.reclaimer import ReclaimedLease, ReclaimerStatus
from miner2provider.detect.readiness import assess
from miner2provider.detect.report import RigReport
from miner2provider.market.base import ProviderState
from miner2provider.rigside.status import AgentStatus, Lease, Telemetry
from miner2provider.rigside.status import Card as StatusCard

RECLAIMER = ReclaimerStatus(True, "2026-11-24T06:00:00+00:00", "", (ReclaimedLease(
    "o/77/1/1/p", ("node-b",), "reclaiming", "2026-11-24T07:00:00+00:00", "", 3600.0, "wait", "", ""),))


def report(name: str, temperature: float | None, telemetry: bool = True, mining: bool = True) -> RigReport:
    f = facts()
    cards = (StatusCard(0, "GPU-0", "NVIDIA GeForce RTX 3090", temperature_c=temperature,
                        health="hot" if (temperature or 0) >= 90 else "ok"),
             StatusCard(1, "GPU-1", "", health="lost", why="GPU is lost"))
    status = AgentStatus(True, "mining", leases=(Lease("t/pod", ""),),
                         telemetry=Telemetry("2026-11-24T06:00:00Z", cards) if telemetry else None)
    f = dataclasses.replace(f, agent_status=status, reclaimer=RECLAIMER if name == "a" else ReclaimerStatus(False),
                            miner=dataclasses.replace(f.miner, running=mining))
    return RigReport(name, "10.0.0.1", f, assess(f))


def store(history: History, name: str, at: float, rig: RigReport | None) -> None:
    if rig is None:  # a failed read, as collect.sweep stores it
        old = history.latest_snapshot(name) or {}
        history.add_snapshot(name, at, {**old, "failure": "unreachable", "error": "timed out", "status": "failed"})
    else:
        history.add_snapshot(name, at, {**snapshot(rig), "read_at": at})


def test_the_sweeps_stored_reports_map_into_the_snapshot(tmp_path):
    with History(tmp_path / "h.sqlite3") as history:
        store(history, "a", 1000.0, report("a", 91.0, mining=False))
        store(history, "b", 1000.0, report("b", 60.0, telemetry=False))
        store(history, "b", 1300.0, None)
        found = snapshot_from_history({"a": "node-a", "b": "node-b", "c": "node-c"}, history.latest_snapshots(),
                                      ProviderState("u", "no answer (Connection refused)", {}), (3.5, "AKT"))
    a, b, c = found.rigs
    assert a == Rig("a", 1000.0, True, "mining", True, False, (
        Card(0, "GPU-0", "NVIDIA GeForce RTX 3090", 91.0, "hot"), Card(1, "GPU-1", a.cards[1].model, None, "lost",
                                                                      "GPU is lost")), ("t/pod",), ())
    assert b == Rig("b", 1000.0, read=False)  # its last read failed: when it last answered, nothing stale judged
    assert c == Rig("c", None, read=False)  # never read
    assert (found.provider, found.provider_why, found.wallet_balance, found.wallet_currency) == (
        "no", "no answer (Connection refused)", 3.5, "AKT")


def test_the_reclaimers_leases_go_to_the_rig_whose_node_they_hold(tmp_path):
    with History(tmp_path / "h.sqlite3") as history:
        store(history, "a", 1000.0, report("a", 50.0))
        store(history, "b", 1000.0, report("b", 50.0))
        rigs = snapshot_from_history({"a": "node-a", "b": "node-b"}, history.latest_snapshots()).rigs
    assert [r.reclaiming for r in rigs] == [(), ("o/77/1/1/p",)]


def test_an_agent_without_telemetry_gives_no_cards_rather_than_healthy_ones(tmp_path):
    with History(tmp_path / "h.sqlite3") as history:
        store(history, "b", 1000.0, report("b", None, telemetry=False))
        (rig,) = snapshot_from_history({"b": "b"}, history.latest_snapshots()).rigs
    assert rig.read and rig.cards is None


def test_after_each_sweep_a_hot_card_reaches_the_webhook_once_then_its_recovery(tmp_path):
    hook = WebhookStandin()
    rules = Rules(silent_after_s=600, repeat_every_s=3600, temperature_limit_c=85, off=frozenset({"card"}))
    alerting = Alerting(AlertsConfig("alerts.yml", rules, (Webhook("hook", Secret(hook.url + "/m2p"), 5),)))
    try:
        with History(tmp_path / "h.sqlite3") as history:
            for at, temperature in ((1000.0, 88.0), (1300.0, 89.0), (1600.0, 70.0)):
                store(history, "a", at, report("a", temperature))
                alerting.sweep_done({"a": "a"}, history.latest_snapshots(), at)
            store(history, "a", 1900.0, None)
            assert alerting.sweep_done({"a": "a"}, history.latest_snapshots(), 1900.0) == []  # silent 5 min
            store(history, "a", 2200.0, None)
            assert alerting.sweep_done({"a": "a"}, history.latest_snapshots(), 2200.0)
        assert alerting.outbox.wait(10)
        assert [m["text"] for m in hook.received] == [
            "m2p ALERT: a: card 0 (NVIDIA GeForce RTX 3090) at 88 °C, the limit is 85 °C",
            "m2p RESOLVED: a: card 0 (NVIDIA GeForce RTX 3090) is below its temperature limit again",
            "m2p ALERT: a has not answered for 10 min"]
    finally:
        alerting.close()
        hook.close()


def test_the_provider_read_the_dashboard_makes_is_kept_for_the_next_judgement():
    alerting = Alerting(AlertsConfig("alerts.yml", Rules(), ()))
    try:
        ask = alerting.watching(lambda: ProviderState("u", "HTTP 502", {}))
        assert ask().error == "HTTP 502" and alerting.provider is not None
        (message,) = alerting.sweep_done({}, {})
        assert message.line == "m2p ALERT: the provider does not answer: HTTP 502"
    finally:
        alerting.close()


def test_sweep_done_returns_at_once_while_a_receiver_hangs(tmp_path):
    hook = WebhookStandin("hang")
    alerting = Alerting(AlertsConfig("alerts.yml", Rules(), (Webhook("hook", Secret(hook.url), 5),)))
    try:
        alerting.watching(lambda: ProviderState("u", "refused", {}))()
        start = time.monotonic()
        for _ in range(3):
            alerting.sweep_done({}, {})
        assert time.monotonic() - start < 0.2
    finally:
        alerting.close()
        hook.close()
