"""The fleet's and each rig's income over time (issue 57): earnings per UTC day, ISO week or calendar month, split
into mining and leasing, beside what the leased GPU-hours would have earned mining (the profit policy's own
comparison), and the chart's geometry.  Pure: the history's day sums (history.py ``day_sums``) and the line each rig
has in force in, dicts out.

Rigs valued alike (the same GPU models, the same measured mining rate, the same GPU count) share a class: SQLite sums
their days together and each class is valued once, by views.py's own ``rates`` and ``values``, so the chart and the
rig rows never disagree.  The line still in force counts up to the rig's last read, as on the rest of the page.
Leasing is always an estimate (the economics file's lease price); mining is measured where the rig's agent measured its
miner (the whole period valued at today's measured rate, as views.earnings does) and an estimate elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from miner2provider.dashboard import forecast, views
from miner2provider.dashboard.history import DAY_S
from miner2provider.rigside.ledger import Entry
from miner2provider.timeshare.economics import Economics

PERIODS = {"day": 30, "week": 13, "month": 12}  # the buckets a chart shows: a month of days, a quarter, a year
BASIS_DAYS = 30  # the forecast's basis: the last 30 UTC days, today so far included
FIGURES = ("lease", "mining", "mining_equivalent")
CHART_W, CHART_H = 720, 160
LABEL_PX = 7.5  # a character of the chart's labels (base.html.j2: svg text at 12 px)


@dataclass(frozen=True)
class Class:
    """Rigs valued alike: their rates and GPU count (what a ledger line that names no count means)."""

    rates: views.Rates
    gpus: int


@dataclass
class Sums:
    """GPU-seconds over some days: the ledger covered (available), leased and mined; and the seconds covered."""

    seconds: float = 0.0
    available: float = 0.0
    leased: float = 0.0
    mined: float = 0.0

    def add(self, other: Sums) -> None:
        self.seconds += other.seconds
        self.available += other.available
        self.leased += other.leased
        self.mined += other.mined


def class_of(rig: views.RigInput, economics: Economics) -> Class:
    """How the rig's hours are valued: views.fleet_row's own rates (its models; its agent's measured miner)."""
    models = [m for m, _ in views.gpu_models(rig.report)]
    measured = views.economy(views.agent_of(rig)[0], economics)["measured_per_gpu_day"]
    return Class(views.rates(models, economics, measured), len(models))


def classes(rigs: Iterable[views.RigInput], economics: Economics) -> tuple[dict[str, int], list[Class]]:
    """rig -> class index, and the classes."""
    index: dict[Class, int] = {}
    of = {rig.name: index.setdefault(class_of(rig, economics), len(index)) for rig in rigs}
    return of, list(index)


def open_line(rig: views.RigInput, now: float) -> Entry | None:
    """The rig's line in force (no end stored yet): the fleet's SQL window's, or the rig page's last line."""
    if rig.window is not None:
        return rig.window.last
    return rig.ledger[-1] if rig.ledger and rig.ledger[-1].at < now else None


def today_of(now: float) -> int:
    return int(now // DAY_S)


def buckets(per: str, today: int) -> list[tuple[str, int, int]]:
    """(label, first day, last day) of the ``PERIODS[per]`` periods up to today's, oldest first (epoch days)."""
    count, day = PERIODS[per], _date(today)
    if per == "day":
        return [(_date(d).isoformat(), d, d) for d in range(today - count + 1, today + 1)]
    out = []
    for n in range(count - 1, -1, -1):
        if per == "week":  # ISO weeks: Monday to Sunday, named by their ISO year and number
            monday = day - timedelta(days=day.weekday() + 7 * n)
            year, week, _ = monday.isocalendar()
            out.append((f"{year}-W{week:02d}", _epoch(monday), _epoch(monday + timedelta(days=6))))
        else:
            year, month = divmod(day.year * 12 + day.month - 1 - n, 12)
            first = date(year, month + 1, 1)
            following = date(year + (month + 1) // 12, (month + 1) % 12 + 1, 1)
            out.append((first.strftime("%Y-%m"), _epoch(first), _epoch(following) - 1))
    return out


def first_day(per: str, today: int) -> int:
    """The first day the chart or the forecast needs."""
    return min(buckets(per, today)[0][1], today - BASIS_DAYS + 1)


def day_sums(rows: Iterable[tuple[Any, ...]], kinds: list[Class]) -> dict[tuple[int, int], Sums]:
    """history.day_sums' rows as GPU-seconds per (class, day), a line that named no GPU count counting the class's."""
    out = {}
    for kind, day, seconds, gpu_seconds, bare, leased, mined, bare_mined in rows:
        gpus = kinds[kind].gpus
        out[kind, day] = Sums(seconds, gpu_seconds + bare * gpus, leased, mined + bare_mined * gpus)
    return out


def add_open_lines(sums: dict[tuple[int, int], Sums], rigs: Iterable[tuple[int, Entry | None, float | None]],
                   kinds: list[Class], since: float, now: float) -> None:
    """Each rig's line in force, (class, line, last read), cut at UTC midnights from ``since`` to its last read
    (never past ``now``), valued by views.totals' rule."""
    for kind, line, seen_at in rigs:
        if line is None:
            continue
        start, end = max(line.at, since), min(now, seen_at if seen_at is not None else since)
        while end > start:
            day = int(start // DAY_S)
            stop = min(end, (day + 1) * DAY_S)
            length = stop - start
            totals = views.totals([(line.mode, line.leased, line.gpus, length, line.mining)], kinds[kind].gpus)
            sums.setdefault((kind, day), Sums()).add(Sums(length, length * (line.gpus or kinds[kind].gpus),
                                                          totals.gpu_seconds_leased, totals.gpu_seconds_mined))
            start = stop


def income(sums: dict[tuple[int, int], Sums], kinds: list[Class], gpus_now: dict[int, int], per: str, now: float,
           currency: str) -> dict[str, Any]:
    """The chart's periods, their totals, and next month's forecast from the last BASIS_DAYS days.  ``gpus_now``:
    the GPUs of each class's rigs today (the forecast's fleet)."""
    today = today_of(now)
    periods = buckets(per, today)
    rows = []
    for label, first, last in periods:
        rows.append({"label": label, "from": _date(first).isoformat(), "to": _date(last).isoformat(),
                     **figures(_within(sums, kinds, first, last), kinds)})
    basis = _within(sums, kinds, today - BASIS_DAYS + 1, today)
    return {"per": per, "currency": currency, "from": rows[0]["from"], "to": _date(today).isoformat(),
            "generated_at": datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
            "periods": rows, "totals": figures(_within(sums, kinds, periods[0][1], today), kinds),
            "last_30_days": figures(basis, kinds),
            "forecast": forecast.next_month([(kinds[k].rates, found.available, found.leased, found.mined,
                                              gpus_now.get(k, 0)) for k, found in basis.items()]
                                            + [(kinds[k].rates, 0.0, 0.0, 0.0, n) for k, n in gpus_now.items()
                                               if k not in basis], _date(today))}


def _within(sums: dict[tuple[int, int], Sums], kinds: list[Class], first: int, last: int) -> dict[int, Sums]:
    """Per class, the sums of the days from ``first`` to ``last``."""
    out: dict[int, Sums] = {}
    for (kind, day), found in sums.items():
        if first <= day <= last:
            out.setdefault(kind, Sums()).add(found)
    return out


def figures(per_class: dict[int, Sums], kinds: list[Class]) -> dict[str, Any]:
    """GPU-hours and what they earned, summed over the classes: a figure is None (unknown, never guessed) when a class
    that has hours for it has no price; each is marked measured, estimated or partly measured."""
    money: dict[str, float | None] = dict.fromkeys(FIGURES, 0.0)
    measured: dict[str, set[bool]] = {name: set() for name in FIGURES}
    hours = Sums()
    for kind, found in per_class.items():
        hours.add(found)
        rate = kinds[kind].rates
        valued = views.values(found.leased, found.mined, rate)
        for name, value, gpu_seconds in zip(FIGURES, valued, (found.leased, found.mined, found.leased), strict=True):
            if not gpu_seconds:
                continue
            now_at = money[name]
            money[name] = None if value is None or now_at is None else now_at + value
            measured[name].add(name != "lease" and rate.valued_by == "measured hashrate")
    lease, mining = money["lease"], money["mining"]
    return {"gpu_hours": {"available": _round(hours.available / 3600), "leased": _round(hours.leased / 3600),
                          "mined": _round(hours.mined / 3600),
                          "idle": _round(max(hours.available - hours.leased - hours.mined, 0.0) / 3600)},
            **{name: _round(value) for name, value in money.items()},
            "total": None if lease is None or mining is None else _round(lease + mining),
            "marks": {name: _mark(found) for name, found in measured.items()}}


def _mark(measured: set[bool]) -> str:
    return "partly measured" if len(measured) > 1 else "measured" if measured == {True} else "estimated"


def chart(data: dict[str, Any]) -> dict[str, Any]:
    """Server-side SVG geometry: a stacked bar per period (mining at the bottom, leasing on it) and a marker where the
    bar would end had the leased GPU-hours been mined (mining + mining-equivalent).  Unknown figures draw nothing."""
    periods = data["periods"]
    stacks = [(p["mining"] or 0.0, p["lease"] or 0.0, p["mining_equivalent"] or 0.0) for p in periods]
    top = max([max(m + lease, m + e) for m, lease, e in stacks] + [0.0]) or 1.0
    slot = CHART_W / max(len(periods), 1)
    # a label every few bars, never overlapping: the page draws chart text at 12 px, about 7.5 px a character
    longest = max((len(p["label"]) for p in periods), default=0)
    width, every = max(slot - 4, 1.0), max(1, math.ceil(longest * LABEL_PX / slot))
    bars = []
    for n, (p, (mining, lease, equivalent)) in enumerate(zip(periods, stacks, strict=True)):
        x, mining_h, lease_h = n * slot + 2, mining / top * CHART_H, lease / top * CHART_H
        bars.append({"x": round(x, 1), "w": round(width, 1), "label": p["label"] if n % every == 0 else "",
                     "mining": {"y": round(CHART_H - mining_h, 1), "h": round(mining_h, 1)},
                     "lease": {"y": round(CHART_H - mining_h - lease_h, 1), "h": round(lease_h, 1)},
                     "marker": (round(CHART_H - (mining + equivalent) / top * CHART_H, 1) if p["lease"] else None),
                     "title": f"{p['label']}: mining {_shown(p['mining'])}, leasing {_shown(p['lease'])}, the leased "
                              f"hours mined {_shown(p['mining_equivalent'])} {data['currency']}" + _hours(p)})
    return {"width": CHART_W, "height": CHART_H, "top": top, "bars": bars}


def _hours(period: dict[str, Any]) -> str:
    """The period's GPU-hours (per card: a per-card hand-over mines beside its leases, a whole-rig one leaves idle)."""
    hours = period.get("gpu_hours")
    return "" if not hours else (f"; GPU-hours leased {hours['leased']}, mined {hours['mined']}, "
                                 f"neither {hours['idle']}")


def _shown(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f}"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _date(day: int) -> date:
    return date(1970, 1, 1) + timedelta(days=day)


def _epoch(day: date) -> int:
    return (day - date(1970, 1, 1)).days
