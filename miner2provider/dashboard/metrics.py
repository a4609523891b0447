"""The fleet for Prometheus (``GET /metrics``): a collector that turns what the dashboard already holds into
metric families at scrape time, per rig and per card, written out by the standard client library.

A scrape reads the history database only (the rigs' latest reports, the agents' status as the last sweep or
the Kubernetes API left it, the ledgers' sums): never SSH, never the API, so a scrape costs what the fleet page
costs and a rig that is down cannot stall it.  The figures are the fleet page's (views.fleet_row, the same
ledger sums and economics), over the whole ledger rather than the page's window, as counters.

Names follow Prometheus's conventions (https://prometheus.io/docs/practices/naming/): the ``m2p_`` prefix, base
units in the name (``_celsius``, ``_watts``, ``_bytes``, ``_hertz``, ``_seconds``; percentages as ``_ratio``
from 0 to 1), ``_total`` on counters, and when something happened as a ``_timestamp_seconds`` Unix time, not an
age (https://prometheus.io/docs/practices/instrumentation/#timestamps-not-time-since: an age is
``time() - m2p_rig_telemetry_timestamp_seconds``).  A mode or a health is an enum: one series per state, 1 for
the one in force and 0 for the others, so a change shows in both.  A figure the card did not give (``[N/A]``,
a lost card) has no sample rather than a made-up one.

Everything a rig sends (card names, UUIDs) goes into label values only, which the library escapes; a rig
cannot add a series of its own name or a label, and a mode or health outside the known ones reads as
``unknown`` (one series, not one per string a rig makes up).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from miner2provider.alerts.dispatch import Delivery
from miner2provider.rigside.status import HEALTHS, AgentStatus, Card

from . import views
from .state import DashboardState, rig_inputs

MODES = (*views.MODES, "no agent", "unknown")  # the fleet row's modes; any other reads as "unknown"
CARD_HEALTHS = (*HEALTHS, "unknown")
RIG, CARD = ("rig",), ("rig", "card", "uuid", "model")
MIB = 1024 * 1024
Family = GaugeMetricFamily | CounterMetricFamily
# (metric, help, Card field, factor to the metric's unit)
CARD_FIGURES = (
    ("m2p_gpu_temperature_celsius", "The card's core temperature.", "temperature_c", 1.0),
    ("m2p_gpu_power_draw_watts", "The card's power draw.", "power_w", 1.0),
    ("m2p_gpu_power_limit_watts", "The card's power limit.", "power_limit_w", 1.0),
    ("m2p_gpu_fan_speed_ratio", "The card's fan speed, 0 to 1 of its maximum.", "fan_percent", 0.01),
    ("m2p_gpu_utilization_ratio", "The card's compute utilisation, 0 to 1.", "utilization_percent", 0.01),
    ("m2p_gpu_memory_used_bytes", "The card's memory in use.", "memory_used_mib", MIB),
    ("m2p_gpu_memory_total_bytes", "The card's memory.", "memory_total_mib", MIB),
    ("m2p_gpu_sm_clock_hertz", "The card's SM clock.", "sm_mhz", 1e6),
    ("m2p_gpu_memory_clock_hertz", "The card's memory clock.", "memory_mhz", 1e6),
)


def registry_for(state: DashboardState, clock: Callable[[], float] = time.time) -> CollectorRegistry:
    """A registry of the dashboard's own (never the library's global one, which would also carry this
    process's Python metrics and be shared by every app in it) holding the fleet's collector."""
    registry = CollectorRegistry()
    registry.register(FleetCollector(state, clock))
    return registry


class FleetCollector(Collector):
    def __init__(self, state: DashboardState, clock: Callable[[], float]) -> None:
        self.state, self.clock = state, clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        since_ever = int(now // views.DAY) + 1  # days back to before the epoch: the whole ledger
        rig_metrics, card_metrics = rig_families(self.state.config.economics.currency), card_families()
        for rig in rig_inputs(self.state, since_ever, now):
            agent, _ = views.agent_of(rig)
            row = views.fleet_row(rig, self.state.config.economics, now, since_ever)
            # GPU-seconds from the same sums the row's hours come from, unrounded (the row rounds to 0.01 h)
            used = views.window_totals(rig.window, rig.seen_at, now - since_ever * views.DAY, now,
                                       row["gpu_count"]) if rig.window else views.Totals({})
            add_rig(rig_metrics, rig, agent, row, used)
            for card in cards_of(agent.telemetry.cards if agent.telemetry else ()):
                add_card(card_metrics, rig.name, card)
        yield from rig_metrics.values()
        yield from card_metrics.values()
        if self.state.config.alert_outbox is not None:
            yield from alert_families(self.state.config.alert_outbox.accounts()).values()


def rig_families(currency: str) -> dict[str, Family]:
    def gauge(name: str, doc: str, *extra: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*RIG, *extra])

    return {
        "reachable": gauge("m2p_rig_reachable", "1 if the dashboard's last sweep read the rig, else 0."),
        "seen": gauge("m2p_rig_last_seen_timestamp_seconds", "When a sweep last read the rig (Unix time)."),
        "mode": gauge("m2p_rig_mode", f"1 for the rig's mode ({', '.join(MODES)}), 0 for the others.", "mode"),
        "offered": gauge("m2p_rig_offered", "1 if the rig's agent offers its GPUs on the market, else 0."),
        "leases": gauge("m2p_rig_leases", "Leases running on the rig."),
        "gpus": gauge("m2p_rig_gpus", "NVIDIA GPUs the rig's last report lists."),
        "telemetry": gauge("m2p_rig_telemetry_timestamp_seconds", "When the rig's agent last read its cards "
                           "(Unix time; the age is time() minus it)."),
        "gpu_seconds": CounterMetricFamily("m2p_rig_gpu_seconds", "GPU-seconds the rig's ledger counts mined "
                                           "(use=mined) and leased (use=leased).", labels=[*RIG, "use"]),
        "earnings": CounterMetricFamily(
            "m2p_rig_earnings", f"Estimated earnings in {currency or 'the economics file currency'} over the "
            "whole ledger (source=lease or mining; the fleet page's figures): no sample where a price is missing.",
            labels=[*RIG, "source", "currency"]),
    }


def add_rig(families: dict[str, Family], rig: views.RigInput, agent: AgentStatus, row: dict[str, Any],
            used: views.Totals) -> None:
    name = rig.name
    families["reachable"].add_metric([name], 1.0 if row["reachable"] else 0.0)
    if rig.seen_at is not None:
        families["seen"].add_metric([name], rig.seen_at)
    mode = row["mode"] if row["mode"] in MODES else "unknown"
    for each in MODES:
        families["mode"].add_metric([name, each], 1.0 if each == mode else 0.0)
    families["offered"].add_metric([name], 1.0 if agent.offered else 0.0)
    families["leases"].add_metric([name], float(len(agent.leases)))
    families["gpus"].add_metric([name], float(row["gpu_count"]))
    read_at = agent.telemetry.read_at_s() if agent.telemetry else None
    if read_at is not None:
        families["telemetry"].add_metric([name], read_at)
    families["gpu_seconds"].add_metric([name, "mined"], used.gpu_seconds_mined)
    families["gpu_seconds"].add_metric([name, "leased"], used.gpu_seconds_leased)
    earned = row["earnings"]
    for source in ("lease", "mining"):
        if earned[source] is not None:
            families["earnings"].add_metric([name, source, earned["currency"]], earned[source])


def card_families() -> dict[str, Family]:
    families: dict[str, Family] = {field: GaugeMetricFamily(name, doc, labels=list(CARD))
                                   for name, doc, field, _ in CARD_FIGURES}
    families["health"] = GaugeMetricFamily(
        "m2p_gpu_health", f"1 for the card's health ({', '.join(CARD_HEALTHS)}), 0 for the others.",
        labels=[*CARD, "health"])
    return families


def add_card(families: dict[str, Family], rig: str, card: Card) -> None:
    labels = [rig, str(card.index), card.uuid, card.name]
    for _, _, field, factor in CARD_FIGURES:
        value = getattr(card, field)
        if value is not None:
            families[field].add_metric(labels, value * factor)
    for health in CARD_HEALTHS:
        families["health"].add_metric([*labels, health], 1.0 if health == card.health else 0.0)


def alert_families(accounts: list[tuple[str, str, Delivery]]) -> dict[str, Family]:
    """The alert receivers' deliveries since the dashboard started (--alerts only): a receiver that fails shows as
    its given-up count rising, which a Prometheus rule can alert on through another channel."""
    deliveries = CounterMetricFamily(
        "m2p_alert_deliveries", "Alert messages per receiver since the dashboard started, by outcome: sent, "
        "given_up (every try failed) or dropped (its queue was full).", labels=["receiver", "kind", "outcome"])
    retries = CounterMetricFamily("m2p_alert_retries", "Tries of an alert message that failed and were tried "
                                  "again, per receiver.", labels=["receiver", "kind"])
    for name, kind, account in accounts:
        for outcome in ("sent", "given_up", "dropped"):
            deliveries.add_metric([name, kind, outcome], float(getattr(account, outcome)))
        retries.add_metric([name, kind], float(account.retries))
    return {"deliveries": deliveries, "retries": retries}


def metric_names() -> frozenset[str]:
    """Every metric the collector can write, by its family's name and its samples' (a counter's end in
    ``_total``): what the docs and a Grafana dashboard may name."""
    families = [*rig_families("").values(), *card_families().values(), *alert_families([]).values()]
    return frozenset({f.name for f in families} | {f"{f.name}_total" for f in families if f.type == "counter"})


def cards_of(cards: tuple[Card, ...]) -> list[Card]:
    """One card per index, the first the status lists: a status that names an index twice (a rig may write
    anything) would otherwise make two series of one name and labels, which Prometheus drops from the scrape."""
    seen: dict[int, Card] = {}
    for card in cards:
        seen.setdefault(card.index, card)
    return list(seen.values())
