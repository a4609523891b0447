"""The rigs' latest reports decoded once (dashboard/history.py LatestReports), shared by the dashboard's pages and the
alert judgement after each sweep (cli/dashboard.py judged_sweep): a sweep that changed one rig's report of many
decodes that one, and the alerts get what ``History.latest_snapshots()`` gives."""

from __future__ import annotations

import json
import types
from typing import Any

import pytest

from miner2provider.alerts.config import AlertsConfig
from miner2provider.alerts.rules import Rules
from miner2provider.alerts.service import Alerting
from miner2provider.cli import dashboard as dashboard_command
from miner2provider.core.inventory import Host
from miner2provider.dashboard import history as history_module
from miner2provider.dashboard import state as dashboard_state
from miner2provider.dashboard.history import History, LatestReports
from miner2provider.detect.ssh import SshOptions

RIGS = [f"rig{n:02}" for n in range(30)]


def host(name: str) -> Host:
    return Host(name, "10.0.0.1", 22, None, None, None, None, ("all",), {})


@pytest.fixture
def decoded(monkeypatch) -> list[str]:
    """Every JSON text history.py decodes, in order (it decodes through its module's ``json``)."""
    texts: list[str] = []

    def loads(text: str) -> Any:
        texts.append(text)
        return json.loads(text)

    monkeypatch.setattr(history_module, "json", types.SimpleNamespace(loads=loads, dumps=json.dumps))
    return texts


@pytest.fixture
def judged(monkeypatch):
    """An Alerting whose every ``latest`` from sweep_done is kept (sweep_done still judges it), and sweeps that store
    a report ``{"n": <sweep>}`` of each chosen rig at 1000 + 300 x sweep (collect.sweep without SSH)."""
    alerting = Alerting(AlertsConfig("alerts.yml", Rules(), ()))
    given: list[dict[str, Any]] = []
    judge = alerting.sweep_done

    def sweep_done(nodes, latest, now=None):
        given.append(latest)
        return judge(nodes, latest, now)

    def sweep(history: History, chosen: list[Host], ssh: SshOptions) -> list[Any]:
        at = 1000.0 + 300 * len(given)
        for h in chosen:
            history.add_snapshot(h.name, at, {"n": len(given), "read_at": at})
        return []

    monkeypatch.setattr(alerting, "sweep_done", sweep_done)
    monkeypatch.setattr(dashboard_command, "sweep", sweep)
    yield alerting, given
    alerting.close()


def test_a_sweep_that_changed_one_rig_of_many_decodes_only_its_report(tmp_path, decoded, judged):
    alerting, given = judged
    sweep_hosts = dashboard_command.judged_sweep(tmp_path / "h.sqlite3", SshOptions(), alerting,
                                                 {rig: rig for rig in RIGS}, LatestReports())
    sweep_hosts([host(rig) for rig in RIGS])
    assert len(decoded) == len(RIGS)  # the first sweep: every rig's report, once
    decoded.clear()
    sweep_hosts([host("rig07")])
    assert [json.loads(text)["n"] for text in decoded] == [1]  # the second: rig07's new report alone
    with History(tmp_path / "h.sqlite3") as history:
        assert given[-1] == history.latest_snapshots()
    assert given[-1]["rig07"] == (1300.0, {"n": 1, "read_at": 1300.0})
    assert given[-1]["rig08"] == (1000.0, {"n": 0, "read_at": 1000.0})


def test_the_pages_read_the_reports_the_sweep_decoded_without_decoding_them_again(tmp_path, decoded, judged):
    alerting, given = judged
    latest = LatestReports()
    config = dashboard_state.DashboardConfig(tmp_path / "h.sqlite3", [host(rig) for rig in RIGS], None, None,
                                             lambda chosen: None, lambda chosen: 0, 0, "t" * 16, latest_reports=latest)
    dashboard_command.judged_sweep(config.db, SshOptions(), alerting, {rig: rig for rig in RIGS}, latest)(config.hosts)
    decoded.clear()
    with History(config.db) as history:
        assert dashboard_state.latest_snapshots(dashboard_state.DashboardState(config), history) == given[-1]
    assert decoded == []


def test_a_rig_removed_from_the_history_drops_out_of_the_cache(tmp_path, decoded):
    latest = LatestReports()
    with History(tmp_path / "h.sqlite3") as history:
        for rig in RIGS[:3]:
            history.add_snapshot(rig, 1000.0, {"rig": rig})
        assert set(latest.read(history)) == set(RIGS[:3])
        history.db.execute("DELETE FROM latest WHERE rig = ?", (RIGS[1],))
        decoded.clear()
        assert latest.read(history) == history.latest_snapshots() == {
            RIGS[0]: (1000.0, {"rig": RIGS[0]}), RIGS[2]: (1000.0, {"rig": RIGS[2]})}
        assert len(decoded) == 2  # History.latest_snapshots()'s own two: the cache decoded nothing
        assert RIGS[1] not in latest.read(history)
