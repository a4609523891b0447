"""What every endpoint reads from ``request.app.state.m2p``: the configuration and the app's secrets,
and the rigs' inputs from the history (views.py turns them into rows).  No Starlette routing here."""

from __future__ import annotations

import gc
import hmac
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.requests import Request

from miner2provider.alerts.dispatch import Outbox
from miner2provider.core import textfiles
from miner2provider.core.inventory import Host
from miner2provider.dashboard.history import DAY_S, History, LatestReports, Window
from miner2provider.detect.report import RigReport, stored_report
from miner2provider.market.base import ProviderState
from miner2provider.timeshare.economics import Economics

from . import income, views
from .actions import Actions
from .sessions import LoginLimiter, Sessions

SORT_KEYS = ("rig", "mode", "mining_os", "state", "gpu_count", "since")


@dataclass
class DashboardConfig:
    db: Path
    hosts: list[Host]
    economics: Economics
    actions: Actions
    sweep: Callable[[list[Host]], object]  # reads rigs into the history (SSH)
    sweep_api: Callable[[list[Host]], object]  # reads the farm's Kubernetes API into it (or nothing)
    interval_s: float  # 0: no sweeps in the background
    token: str  # signs a browser in (then a session cookie) and API clients (Authorization: Bearer)
    # The names the page may be asked for under (the Host header): on loopback only loopback names, so
    # a web page elsewhere cannot reach it by pointing its own DNS name at 127.0.0.1 (DNS rebinding).
    # None: any (a --bind beyond loopback, which needs the token anyway).
    hosts_allowed: frozenset[str] | None = frozenset({"127.0.0.1", "localhost", "::1"})
    # The marketplace provider's own status (`m2p provider status`), asked at every sweep; None: no provider.
    provider_status: Callable[[], ProviderState] | None = None
    provider_label: str = ""
    alert_outbox: Outbox | None = None  # the alert file's receivers (--alerts): their deliveries go to /metrics
    # The rigs' latest reports, each decoded once: the pages read them through it, and so does the sweep's alert
    # judgement where the command gives the same one to both.
    latest_reports: LatestReports = field(default_factory=LatestReports)


@dataclass
class DashboardState:
    config: DashboardConfig
    sessions: Sessions = field(default_factory=Sessions)
    limiter: LoginLimiter = field(default_factory=LoginLimiter)
    stop: threading.Event = field(default_factory=threading.Event)
    # rig -> (when the history stored its latest report, that report typed): a report is typed once, not
    # on every page (1,000 rigs: ~100 ms a page otherwise).
    reports: dict[str, tuple[float, RigReport | None]] = field(default_factory=dict)
    # config.latest_reports' changes when a page last read it: more since (a page's or a sweep's), and what is alive
    # is frozen again (``keep_out_of_gc``).
    reports_changes: int = 0
    provider: tuple[float, ProviderState] | None = None  # (when it was asked, what it said)
    frozen: bool = False  # the caches above are out of the cyclic collector's passes (``keep_out_of_gc``)

    def is_token(self, given: str) -> bool:
        """``given`` is the dashboard's token (compared in constant time): the login form's and a Bearer's."""
        return hmac.compare_digest(given.encode(), self.config.token.encode())

    def typed(self, rig: str, at: float, snapshot: dict[str, Any] | None) -> RigReport | None:
        cached = self.reports.get(rig)
        if cached is None or cached[0] != at:
            cached = self.reports[rig] = (at, stored_report(snapshot))
            self.frozen = False
        return cached[1]


class BadParameter(Exception):
    """A query parameter the endpoint cannot use: answered 400 with this message."""


def state_of(request: Request) -> DashboardState:
    found: DashboardState = request.app.state.m2p
    return found


def rig_inputs(state: DashboardState, days: int, now: float) -> list[views.RigInput]:
    with History(state.config.db) as history:
        latest = latest_snapshots(state, history)
        windows = history.windows(now - days * views.DAY, now)
        nodes = history.nodes()
    inputs = []
    for h in state.config.hosts:
        at, snap = latest.get(h.name, (0.0, None))
        inputs.append(_input(h, snap, [], nodes, state.typed(h.name, at, snap), windows.get(h.name, Window((), None))))
    keep_out_of_gc(state)
    return inputs


def keep_out_of_gc(state: DashboardState) -> None:
    """Once the report caches changed: collect, then freeze what is alive (the caches).  At 1,000 rigs of 8 cards the
    cached reports are most of the heap, and the cyclic collector's full passes walked them every second or third
    fleet page (~90 ms each: docs/benchmarks.md); frozen, they are skipped.  Replaced reports are still freed (by
    their reference counts: decoded JSON and typed reports hold no cycles), and what was frozen is thawed first, so
    a cycle that died frozen (a request's, in flight at the time) is collected at the next change, not kept."""
    if not state.frozen:
        state.frozen = True
        gc.unfreeze()
        gc.collect()
        gc.freeze()


def open_inputs(state: DashboardState, now: float) -> list[views.RigInput]:
    """The rigs as the income needs them (income_view): their reports, nodes and line in force, no window summed."""
    with History(state.config.db) as history:
        latest = latest_snapshots(state, history)
        lines = history.open_lines(now)
        nodes = history.nodes()
    inputs = []
    for h in state.config.hosts:
        at, snap = latest.get(h.name, (0.0, None))
        inputs.append(_input(h, snap, [], nodes, state.typed(h.name, at, snap), Window((), lines.get(h.name))))
    return inputs


def latest_snapshots(state: DashboardState, history: History) -> dict[str, tuple[float, dict[str, Any]]]:
    """``History.latest_snapshots()``, decoding only the reports stored since the last read (config.latest_reports,
    which the sweep's alert judgement may share: 1,000 rigs of 8 cards with telemetry decoded at every page cost ~110
    ms, a third of the fleet page; docs/benchmarks.md).  Read only."""
    cache = state.config.latest_reports
    latest = cache.read(history)
    if cache.changes != state.reports_changes:
        state.reports_changes = cache.changes
        state.frozen = False
    return latest


def one(state: DashboardState, name: str, days: int, now: float) -> views.RigInput | None:
    host = next((h for h in state.config.hosts if h.name == name), None)
    if host is None:
        return None
    with History(state.config.db) as history:
        start = now - (days + 1) * views.DAY  # timelines start at a UTC midnight, up to a day earlier
        # every line from start on: a line after now (a rig's clock ahead) still ends the one before
        at, snap = history.latest(name) or (0.0, None)
        return _input(host, snap, history.ledger(name, start, math.inf), history.nodes(), state.typed(name, at, snap))


def card_samples(state: DashboardState, name: str, now: float) -> dict[int, list[tuple[float, float | None,
                                                                                   float | None]]]:
    """The rig's card readings over the last day (the rig page's charts)."""
    with History(state.config.db) as history:
        return history.card_samples(name, now - views.DAY)


def fleet_view(request: Request, with_income: bool = False) -> dict[str, Any]:
    state = state_of(request)
    days = days_of(request)
    now = time.time()
    inputs = rig_inputs(state, days, now)
    data = views.fleet(inputs, state.config.economics, now, days)
    group, mode = request.query_params.get("group", ""), request.query_params.get("mode", "")
    data["rigs"] = [r for r in data["rigs"]
                    if (not group or group in r["groups"]) and (not mode or r["mode"] == mode)]
    if with_income:  # the rigs the table shows: a group or a mode chosen, the chart is theirs
        shown = {r["rig"] for r in data["rigs"]}
        chosen = inputs if not (group or mode) else [rig for rig in inputs if rig.name in shown]
        data["income"] = {**income_view(state, chosen, per_of(request), now),
                          "of": ", ".join(f"{k} {v}" for k, v in (("group", group), ("mode", mode)) if v)}
    key = request.query_params.get("sort", "rig")
    if key in SORT_KEYS:
        data["rigs"].sort(key=lambda r: (r[key], r["rig"]))
    data["busy"] = state.config.actions.running()
    data["provider"] = provider_view(state)
    data["wallet"] = request.app.state.wallet.view(now)
    return data


def income_view(state: DashboardState, rigs: list[views.RigInput], per: str, now: float) -> dict[str, Any]:
    """The rigs' income per ``per`` (income.py) from the history's day sums and each rig's line in force."""
    of, kinds = income.classes(rigs, state.config.economics)
    today = income.today_of(now)
    first = income.first_day(per, today)
    with History(state.config.db) as history:
        rows = history.day_sums(first, today, of)
    sums = income.day_sums(rows, kinds)
    income.add_open_lines(sums, [(of[r.name], income.open_line(r, now), r.seen_at) for r in rigs], kinds,
                          first * DAY_S, now)
    gpus_now: dict[int, int] = {}
    for rig in rigs:
        gpus_now[of[rig.name]] = gpus_now.get(of[rig.name], 0) + kinds[of[rig.name]].gpus
    return income.income(sums, kinds, gpus_now, per, now, state.config.economics.currency)


def provider_view(state: DashboardState) -> dict[str, Any] | None:
    """The provider's status as the page shows it (None: no provider configured)."""
    if state.config.provider_status is None:
        return None
    if state.provider is None:
        return {"label": state.config.provider_label, "read_at": "", "error": "not asked yet", "fields": {}}
    at, found = state.provider
    return {"label": state.config.provider_label, "url": found.url, "error": found.error, "fields": found.fields,
            "read_at": time.strftime("%Y-%m-%d %H:%M", time.gmtime(at))}


def _input(host: Host, snap: dict[str, Any] | None, ledger: list[Any],
           nodes: dict[str, tuple[float, str, dict[str, Any]]], report: RigReport | None,
           window: Window | None = None) -> views.RigInput:
    return views.RigInput(host.name, host.groups, (snap or {}).get("read_at"), snap, tuple(ledger),
                          nodes.get(views.node_name(host.name, snap)), window, report)


def days_of(request: Request) -> int:
    return number(request, "days", 7, 1, 400)


def per_of(request: Request) -> str:
    """The income chart's period: day, week or month."""
    return choice(request, "per", "day", tuple(income.PERIODS))


def choice(request: Request, name: str, default: str, allowed: tuple[str, ...]) -> str:
    """Query parameter ``name`` as one of ``allowed``, or BadParameter."""
    value = request.query_params.get(name)
    if value is None:
        return default
    if value not in allowed:
        raise BadParameter(f"{name}={textfiles.shown(value)}: one of {', '.join(allowed)}")
    return value


def number(request: Request, name: str, default: int, lowest: int, highest: int) -> int:
    """Query parameter ``name`` as a whole number from ``lowest`` to ``highest`` (ASCII digits only: ``²``
    is a digit to str.isdigit but not to int), or BadParameter."""
    value = request.query_params.get(name)
    if value is None:
        return default
    if not re.fullmatch(r"[0-9]{1,9}", value) or not lowest <= int(value) <= highest:
        raise BadParameter(f"{name}={textfiles.shown(value)}: a whole number from {lowest} to {highest}")
    return int(value)
