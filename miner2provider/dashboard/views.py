"""What the dashboard shows, computed from the history and nothing else (no I/O): the fleet's rows,
a rig's timeline, hours per day and estimated earnings.  The page and ``/api/`` serve these dicts.

Hours come from the rigs' ledgers (rigside/ledger.py).  A rig's last ledger line counts until the
sweep that last read it, never until "now": a rig that went dark is not credited with hours nobody saw.
Earnings are estimates: GPU-hours with a lease on the node x the lease price per GPU-hour, and
GPU-hours mining (mining, idle-mining) x the mining revenue per GPU-day / 24, from the economics file.
A lease is counted for all the rig's GPUs (the ledger names the lease, not its GPU count): an upper bound.
Where the rig's agent measured its miner (HiveOS: agent/measure.py) and the economics file prices the
algorithm (``mining_revenue_per_mhs_day``), mining is valued at the measured rate instead, and the row
says so; the agent's profit quote (policy profit: lease floor, offered or not) is shown beside it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from miner2provider.dashboard import cards
from miner2provider.dashboard.history import MINING_MODES, Window
from miner2provider.detect.report import RigReport, stored_report
from miner2provider.market.cards import card_for
from miner2provider.rigside.ledger import Entry, Span, seconds_by_mode, spans
from miner2provider.rigside.status import AgentStatus, agent_status_from, hand_over_said
from miner2provider.timeshare.economics import Economics

MODES = ("mining", "idle-mining", "leasing", "draining")
DAY = 86_400.0
IMPLICIT_GROUPS = {"all", "ungrouped"}  # Ansible's own: every rig is in one of them


@dataclass(frozen=True)
class RigInput:
    """One rig as the history holds it."""

    name: str
    groups: tuple[str, ...]
    seen_at: float | None  # the last sweep that read it; None: never read
    snapshot: dict[str, Any] | None  # the latest detect report as stored (report_json plus "status_row")
    ledger: tuple[Entry, ...]  # led by the line in force when the window opens
    node: tuple[float, str, dict[str, Any]] | None = None  # what the Kubernetes API last said: (at, mode, status)
    window: Window | None = None  # the fleet page's: the ledger summed in SQL instead of ``ledger``
    # The stored report, typed (detect/report.py's one schema; None: never read, or not readable): read from
    # ``snapshot`` when not given (the app gives it from its cache: typing 1,000 reports costs ~100 ms).
    report: RigReport | None = None

    def __post_init__(self) -> None:
        if self.report is None and self.snapshot:
            object.__setattr__(self, "report", stored_report(self.snapshot))


@dataclass(frozen=True)
class Totals:
    """What a rig did over a window: seconds per mode, and GPU-seconds with a lease and mining."""

    seconds: dict[str, float]
    gpu_seconds_leased: float = 0.0
    gpu_seconds_mined: float = 0.0


def totals(pieces: Iterable[tuple[str, int, int, float, int]], gpu_count: int) -> Totals:
    """From (mode, GPUs the leases on the node held, GPUs the line named, seconds, GPUs mined beside the leases)
    pieces.  Beside a lease the miner mines on the cards no lease holds where the rig hands over per card, and
    on none where it hands over whole (those cards then neither mine nor earn)."""
    seconds: dict[str, float] = {}
    leased = mined = 0.0
    for mode, leased_gpus, gpus, length, mining in pieces:
        if length <= 0:
            continue
        seconds[mode] = seconds.get(mode, 0.0) + length
        if leased_gpus:
            leased += length * leased_gpus
            mined += length * mining
        elif mode in MINING_MODES:
            mined += length * (gpus or gpu_count)
    return Totals(seconds, leased, mined)


def span_totals(window_spans: Iterable[Span], gpu_count: int) -> Totals:
    return totals(((s.mode, s.leased, s.gpus, s.seconds, s.mining) for s in window_spans), gpu_count)


def window_totals(window: Window, seen_at: float | None, since: float, until: float, gpu_count: int) -> Totals:
    """The same as span_totals over rig_spans, from the SQL sums: the line in force counts up to the
    rig's last read."""
    pieces = list(window.closed)
    last = window.last
    if last is not None:
        end = min(until, seen_at if seen_at is not None else since)
        pieces.append((last.mode, last.leased, last.gpus, end - max(last.at, since), last.mining))
    return totals(pieces, gpu_count)


def node_name(name: str, snapshot: dict[str, Any] | None) -> str:
    """The rig's Kubernetes node: the name k3s runs it under (its hostname), else the rig's name."""
    node = ((snapshot or {}).get("status_row") or {}).get("node")
    return node if node and node != "-" else name


def gpu_models(report: RigReport | None) -> list[tuple[str, str]]:
    """(model name, card name) per NVIDIA GPU of the report."""
    if report is None or report.facts is None:
        return []
    return [(card_for(gpu).slug, gpu.name) for gpu in report.facts.gpus.gpus]


def rig_spans(rig: RigInput, since: float, until: float) -> list[Span]:
    """The rig's ledger as spans clipped to [since, until); the last, still in force, ends when the rig
    was last read (a span between two lines the rig reported counts whole, whatever the clocks say)."""
    seen = rig.seen_at if rig.seen_at is not None else since
    listed = spans(rig.ledger, until)
    out = []
    for n, span in enumerate(listed):
        start = max(span.start, since)
        stop = min(span.end, until) if n < len(listed) - 1 else min(until, seen)
        if stop > start:
            out.append(Span(span.mode, start, stop, span.blind, span.gpus, span.leases, span.leased, span.mining))
    return out


def earnings(totals: Totals, models: list[str], economics: Economics,
             measured_per_gpu_day: float | None = None) -> dict[str, Any]:
    """GPU-hours leased (a lease on the node) and mined, and what they earned by the economics file (mining
    at ``measured_per_gpu_day`` where the agent measured it)."""
    rate = rates(models, economics, measured_per_gpu_day)
    lease_value, mining_value, _ = values(totals.gpu_seconds_leased, totals.gpu_seconds_mined, rate)
    return {"currency": economics.currency, "gpu_hours_leased": round(totals.gpu_seconds_leased / 3600, 2),
            "gpu_hours_mined": round(totals.gpu_seconds_mined / 3600, 2),
            "lease": _money(lease_value), "mining": _money(mining_value), "mining_valued_by": rate.valued_by,
            "total": None if lease_value is None or mining_value is None else _money(lease_value + mining_value)}


@dataclass(frozen=True)
class Rates:
    """What a rig's GPU-hour earns: leased (per GPU-hour) and mined (per GPU-day), None where the file has no figure."""

    lease_per_gpu_hour: float | None
    mining_per_gpu_day: float | None
    valued_by: str  # mining's: "economics file" or "measured hashrate"


def rates(models: list[str], economics: Economics, measured_per_gpu_day: float | None = None) -> Rates:
    """The mean of the rig's models' figures; mining at ``measured_per_gpu_day`` where the agent measured it."""
    mining = (measured_per_gpu_day if measured_per_gpu_day is not None
              else _mean([economics.mining_revenue(m) for m in models]))
    return Rates(_mean([economics.lease_price(m) for m in models]), mining,
                 "economics file" if measured_per_gpu_day is None else "measured hashrate")


def values(gpu_seconds_leased: float, gpu_seconds_mined: float,
           rate: Rates) -> tuple[float | None, float | None, float | None]:
    """(leasing, mining, mining-equivalent: what the leased GPU-hours would have earned mining, the profit policy's
    comparison), unrounded; None: no figure to value them by."""
    leased, mined = gpu_seconds_leased / 3600, gpu_seconds_mined / 3600
    lease, per_day = rate.lease_per_gpu_hour, rate.mining_per_gpu_day
    return (None if lease is None else leased * lease, None if per_day is None else mined * per_day / 24,
            None if per_day is None else leased * per_day / 24)


def _mean(values: list[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None) / len(values)


def _money(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def economy(agent: AgentStatus, economics: Economics) -> dict[str, Any]:
    """The agent's measured miner and profit quote, as its status (rigside/status.py) says them."""
    measured = agent.measured
    per_mhs = economics.mining_per_mhs_day.get(measured.algo) if measured else None
    per_gpu_day = (sum(measured.mhs) / len(measured.mhs) * per_mhs
                   if measured and measured.mhs and per_mhs is not None else None)
    return {"lease_pays": agent.lease_pays, "floor_per_hour": agent.floor_per_hour, "quote_source": agent.quote_source,
            "reclaim_per_hour": agent.reclaim_per_hour,
            "leased": ({"gpus": agent.leased_gpus, "of": agent.leased_of, "per_hour": agent.leased_per_hour,
                        "hand_over": hand_over_said(agent.hand_over)} if agent.leased_gpus else None),
            "measured": None if measured is None else {"algo": measured.algo, "mhs": list(measured.mhs),
                                                       "watts": list(measured.watts)},
            "measured_per_gpu_day": _money(per_gpu_day)}


def agent_of(rig: RigInput) -> tuple[AgentStatus, str]:
    """The agent's status and where it came from: the last sweep ("ssh") or, when fresher, the API ("api":
    the agent's own status as it published it on the node, read by the same reader)."""
    if rig.node is not None and (rig.seen_at is None or rig.node[0] > rig.seen_at):
        return dataclasses.replace(agent_status_from(rig.node[2]), mode=rig.node[1]), "api"
    facts = rig.report.facts if rig.report is not None else None
    return (facts.agent_status if facts is not None else AgentStatus(False)), "ssh"


def fleet_row(rig: RigInput, economics: Economics, now: float, days: int) -> dict[str, Any]:
    snap = rig.snapshot or {}
    facts = rig.report.facts if rig.report is not None else None
    status = snap.get("status_row") or {}
    models = gpu_models(rig.report)
    counted = Counter(name for _, name in models)
    since = now - days * DAY
    if rig.window is not None:
        totals, last = window_totals(rig.window, rig.seen_at, since, now, len(models)), rig.window.last
    else:
        totals, last = span_totals(rig_spans(rig, since, now), len(models)), (rig.ledger[-1] if rig.ledger else None)
    agent, source = agent_of(rig)
    mode = agent.mode or (last.mode if last else "") or ("no agent" if facts else "unknown")
    valued = economy(agent, economics)
    return {
        "rig": rig.name, "groups": [g for g in rig.groups if g not in IMPLICIT_GROUPS],
        "seen_at": _iso(rig.seen_at), "reachable": bool(snap) and snap.get("failure") is None,
        "error": snap.get("error") or "",
        "mining_os": facts.mining_os.label if facts else "",
        "miner_control": facts.mining_os.miner_control if facts else "",
        "gpus": [{"model": name, "count": n} for name, n in counted.items()],
        "gpu_count": len(models),
        "amd_gpus": len(facts.amd_gpus) if facts else 0,
        "readiness": snap.get("status", "unknown"),
        "state": status.get("state", "unknown"), "drift": status.get("detail", ""),
        "mode": mode, "mode_from": source, "since": agent.since or (_iso(last.at) if last else ""),
        "next_change": agent.next_change, "mine_at": agent.mine_at,
        "leases": [lease.pod for lease in agent.leases],
        "reclaims": reclaims(status),
        "tunnel": tunnel(status),
        "agent_error": agent.last_error,
        "cards": cards.health(agent.telemetry),  # the hottest card and every unhealthy one (None: no telemetry)
        "hours": {m: round(v / 3600, 2) for m, v in sorted(totals.seconds.items())},
        "earnings": earnings(totals, [m for m, _ in models], economics, valued["measured_per_gpu_day"]),
        "economy": valued,
    }


RECLAIM_FIELDS = ("lease", "state", "deadline", "action", "why", "error")


def reclaims(status_row: dict[str, Any]) -> list[dict[str, str]]:
    """The leases the farm's reclaimer handles on the rig, as the last sweep's status row lists them (from the
    server's file, so text only: the page escapes it)."""
    found = status_row.get("reclaims")
    return [{key: str(lease.get(key) or "") for key in RECLAIM_FIELDS}
            for lease in (found if isinstance(found, list) else []) if isinstance(lease, dict)]


def tunnel(status_row: dict[str, Any]) -> dict[str, Any] | None:
    """A farm across sites' member: its tunnel as the last sweep saw it (detect/report.py's tunnel_row), checked."""
    found = status_row.get("tunnel")
    if not isinstance(found, dict):
        return None
    age, mtu, peers = found.get("handshake_age_s"), found.get("mtu"), found.get("peers")
    listed = found.get("silent")
    silent: list[Any] = listed if isinstance(listed, list) else []
    return {"ok": found.get("ok") is True, "link": str(found.get("link") or "")[:20],
            "mtu": mtu if isinstance(mtu, int) else None, "handshake_age_s": age if isinstance(age, int) else None,
            "peers": peers if isinstance(peers, int) else 0,
            "silent": [{"peer": str(p.get("peer") or "")[:64], "handshake_age_s": _whole(p.get("handshake_age_s")),
                        "answers": p.get("answers") is not False}
                       for p in silent[:200] if isinstance(p, dict)]}


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) else None


def fleet(rigs: list[RigInput], economics: Economics, now: float, days: int = 7) -> dict[str, Any]:
    rows = [fleet_row(r, economics, now, days) for r in rigs]
    totals = [r["earnings"]["total"] for r in rows]
    return {
        "generated_at": _iso(now), "days": days, "currency": economics.currency,
        "summary": {"rigs": len(rows), "gpus": sum(r["gpu_count"] for r in rows),
                    "unreachable": sum(not r["reachable"] for r in rows),
                    "modes": dict(sorted(Counter(r["mode"] for r in rows).items())),
                    "leases": sum(len(r["leases"]) for r in rows),
                    "reclaiming": len({lease["lease"] for r in rows for lease in r["reclaims"]
                                       if lease["state"] == "reclaiming"}),
                    "earnings": None if any(t is None for t in totals) else round(sum(totals), 2)},
        "groups": sorted({g for r in rows for g in r["groups"]}),
        "rigs": rows,
    }


def timeline(rig: RigInput, economics: Economics, now: float, days: int) -> dict[str, Any]:
    """A rig's modes over the last ``days`` days (UTC days): its spans and hours per day."""
    today = datetime.fromtimestamp(now, UTC).date()
    first = today - timedelta(days=days - 1)
    start = datetime(first.year, first.month, first.day, tzinfo=UTC).timestamp()
    window = rig_spans(rig, start, now)
    per_day = []
    for n in range(days):
        lo = start + n * DAY
        seconds = seconds_by_mode(window, lo, min(lo + DAY, now))
        per_day.append({"date": (first + timedelta(days=n)).isoformat(),
                        "hours": {m: round(s / 3600, 2) for m, s in sorted(seconds.items())}})
    models = [m for m, _ in gpu_models(rig.report)]
    agent, _ = agent_of(rig)
    valued = economy(agent, economics)
    return {"rig": rig.name, "days": days, "from": _iso(start), "to": _iso(now),
            "spans": [{"mode": s.mode, "start": _iso(s.start), "end": _iso(s.end), "blind": s.blind,
                       "leases": list(s.leases), "from_start_s": round(s.start - start), "seconds": round(s.seconds)}
                      for s in window],
            "per_day": per_day, "economy": valued,
            "earnings": earnings(span_totals(window, len(models)), models, economics, valued["measured_per_gpu_day"])}


def _iso(at: float | None) -> str:
    return "" if at is None else datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
