"""The time-share schedule: a YAML file the owner writes, validated with file:line.

```yaml
timezone: Europe/Berlin        # IANA name; windows are wall-clock times there
policy: fixed                  # fixed | lease-first | mine-first | profit
default: mine                  # fixed only: the mode outside every window (mine | lease)
windows:
  - days: mon-fri              # mon,wed / [sat, sun] / mon-fri / daily / weekdays / weekends
    from: "18:00"
    to: "08:00"                # before `from`: crosses midnight, into the next day
    mode: lease                # fixed: mine | lease; lease-first: mine; mine-first: lease
lease_grace: forever           # a mining window waits this long for running leases (30m, 2h, forever)
min_switch_interval: 10m       # the miner is never started sooner than this after a switch
hysteresis: 0.05               # profit only: offer at floor x 1.05, stop offering below floor x 0.95
reclamation_window: 24h        # the window the provider offers on its bids (provider.yml): the rig is
                               # taken off the market this long (plus a lead) before mining, so the farm's
                               # reclaimer can reclaim its leases the protocol's way (AEP-82) in time
```

Policy ``profit`` offers the rig's GPUs while a lease pays more than mining by the economics file's
margin (profit.py), and mines otherwise; its windows may only say ``mine`` (a mining window wins).

Pure parsing and validation; the file is read by ``load`` only.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from miner2provider.core import textfiles
from miner2provider.core.errors import ScheduleError

if sys.version_info >= (3, 9):
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # novermin (3.8 takes the branch below)
else:  # python3 3.8 (HiveOS 0.6-227 on Ubuntu 20.04): the rig's TZif files, read by m2p
    from miner2provider.timeshare.tzif import ZoneInfo, ZoneInfoNotFoundError

POLICIES = ("fixed", "lease-first", "mine-first", "profit")
MODES = ("mine", "lease")
# The mode a window may name under each policy: the others' windows only make exceptions.
WINDOW_MODES = {"fixed": MODES, "lease-first": ("mine",), "mine-first": ("lease",), "profit": ("mine",)}
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DAY_SETS = {"daily": DAYS, "weekdays": DAYS[:5], "weekends": DAYS[5:]}
KEYS = {"timezone", "policy", "default", "windows", "lease_grace", "min_switch_interval", "hysteresis",
        "reclamation_window"}
WINDOW_KEYS = {"days", "from", "to", "mode"}
WEEK = 7 * 24 * 60
_TIME = re.compile(r"^([01]?\d|2[0-4]):([0-5]\d)$")
_DURATION = re.compile(r"^([0-9]{1,9})\s*(s|m|h|d)$")
# Bounds: a switch interval over a day would keep a rig in one mode for days; a lease_grace over a
# year is "forever", which the schedule can say.
MAX_SWITCH_INTERVAL_S = 86400.0
MAX_LEASE_GRACE_S = 365 * 86400.0
MAX_RECLAMATION_WINDOW_S = 720 * 3600.0  # the chain's max_reclamation_window (AEP-82's default)
# Before a mining window the rig leaves the market W plus this lead ahead: the reclaimer's margin for its
# transaction to land (the marketplace's reclaim plan, MARGIN_S) and a minute for the marketplace's inventory
# to see the cordon (its bid engine may hold an older view).
CORDON_LEAD_S = 120.0
MAX_HYSTERESIS = 0.5  # a band wider than +-50 % of the floor never switches on a real price move
DEFAULT_HYSTERESIS = 0.05
MAX_GAP_MIN = 120  # the longest clock jump forward any zone has made (Antarctica/Troll: 2 h)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Window:
    days: tuple[int, ...]  # 0 = Monday: the days the window starts on
    start: int  # minute of the day, 0..1439
    end: int  # minute of the day, 1..1440; <= start: ends on the next day
    mode: str
    line: int

    def spans(self) -> list[tuple[int, int]]:
        """[from, to) in minutes of the week (Monday 00:00 = 0); a span crossing Sunday night wraps."""
        length = (self.end - self.start) % 1440 or 1440
        out = []
        for day in self.days:
            begin = day * 1440 + self.start
            end = begin + length
            out += [(begin, min(end, WEEK))] + ([(0, end - WEEK)] if end > WEEK else [])
        return out

    def covers(self, weekday: int, minute: int) -> bool:
        at = weekday * 1440 + minute
        return any(a <= at < b for a, b in self.spans())


@dataclass(frozen=True)
class Schedule:
    path: str
    timezone: str
    policy: str
    default: str  # fixed: the mode outside windows
    windows: tuple[Window, ...]
    lease_grace_s: float | None  # None: wait forever
    min_switch_interval_s: float
    hysteresis: float = DEFAULT_HYSTERESIS  # profit only
    reclamation_window_s: float | None = None  # the provider's offered window (None: no reclamation)

    @property
    def name(self) -> str:
        return Path(self.path).stem

    @cached_property
    def warnings(self) -> tuple[str, ...]:
        """"file:line: ..." that do not stop the schedule (a window DST skips).  Derived when asked (the
        CLI's check and show), so the agent on the rig does not compute them at start-up."""
        return _skipped_windows(self.path, self.timezone, self.windows) + _reclamation_warnings(self)

    @cached_property
    def by_minute(self) -> tuple[int, ...]:
        """For each minute of the week, the index of the first window covering it (-1: none).  Built once,
        painting every minute at most once, so lookups are O(1) however many windows there are."""
        return _paint(self.windows)

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


def load(path: str | Path) -> Schedule:
    return parse(textfiles.read_text(path, "schedule", ScheduleError), str(path))


def parse(text: str, path: str = "<schedule>") -> Schedule:
    root = textfiles.yaml_tree(text, path, ScheduleError)
    if not isinstance(root, yaml.MappingNode):
        raise ScheduleError("a schedule is a mapping with timezone, policy and windows", where=f"{path}:1")
    fields = _pairs(path, root, KEYS, "schedule")

    def where(node: yaml.Node) -> str:
        return f"{path}:{node.start_mark.line + 1}"

    for required in ("timezone", "policy"):
        if required not in fields:
            raise ScheduleError(f"{required} is missing", where=f"{path}:1")
    tz_node, tz = fields["timezone"]
    try:
        if not isinstance(tz, str) or not tz:
            raise ZoneInfoNotFoundError(tz)
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"unknown timezone {textfiles.shown(tz)}: use an IANA name such as Europe/Berlin or UTC",
                            where=where(tz_node)) from None
    policy_node, policy = fields["policy"]
    if policy not in POLICIES:
        shown = "empty" if policy in (None, "") else textfiles.shown(policy)
        raise ScheduleError(f"policy is {shown}: use one of {', '.join(POLICIES)}", where=where(policy_node))
    default = "mine"
    if "default" in fields:
        default_node, default = fields["default"]
        if policy != "fixed":
            raise ScheduleError(f"default applies to policy fixed only ({policy} decides outside windows itself)",
                                where=where(default_node))
        if default not in MODES:
            raise ScheduleError(f"default {textfiles.shown(default)}: use mine or lease", where=where(default_node))
    windows = tuple(_window(path, node, policy) for node in _windows_nodes(path, fields))
    _check_overlaps(path, windows)
    grace = _duration(path, fields.get("lease_grace"), default=None, forever_ok=True, most=MAX_LEASE_GRACE_S)
    interval = _duration(path, fields.get("min_switch_interval"), default=600.0, forever_ok=False,
                         most=MAX_SWITCH_INTERVAL_S)
    assert interval is not None
    window = _duration(path, fields.get("reclamation_window"), default=None, forever_ok=False,
                       most=MAX_RECLAMATION_WINDOW_S)
    return Schedule(path, tz, policy, default, windows, grace, interval, _hysteresis(path, fields, policy), window)


def _hysteresis(path: str, fields: dict[str, tuple[yaml.Node, Any]], policy: str) -> float:
    if "hysteresis" not in fields:
        return DEFAULT_HYSTERESIS
    node, value = fields["hysteresis"]
    where = f"{path}:{node.start_mark.line + 1}"
    if policy != "profit":
        raise ScheduleError(f"hysteresis applies to policy profit only (this schedule's policy is {policy})",
                            where=where)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_HYSTERESIS:
        raise ScheduleError(f"hysteresis is {textfiles.shown(value)}: a fraction from 0 to {MAX_HYSTERESIS:g} "
                            "(0.05: offer at 5 % above the floor, stop 5 % below it)", where=where)
    return float(value)


def _pairs(path: str, node: yaml.MappingNode, allowed: set[str], what: str) -> dict[str, tuple[yaml.Node, Any]]:
    out: dict[str, tuple[yaml.Node, Any]] = {}
    for key, value in node.value:
        name = key.value if isinstance(key, yaml.ScalarNode) else None
        line = f"{path}:{key.start_mark.line + 1}"
        if name not in allowed:
            raise ScheduleError(f"unknown {what} key {textfiles.shown(name)}; known: {', '.join(sorted(allowed))}",
                                where=line)
        if name in out:
            raise ScheduleError(f"{name} is given twice", where=line)
        out[name] = (value, textfiles.construct(value, path, ScheduleError, str(name)))
    return out


def _windows_nodes(path: str, fields: dict[str, tuple[yaml.Node, Any]]) -> list[yaml.Node]:
    if "windows" not in fields:
        return []
    node, value = fields["windows"]
    if value is None:
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise ScheduleError("windows must be a list", where=f"{path}:{node.start_mark.line + 1}")
    return list(node.value)


def _window(path: str, node: yaml.Node, policy: str) -> Window:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode):
        raise ScheduleError("a window is a mapping with days, from, to and mode", where=f"{path}:{line}")
    fields = _pairs(path, node, WINDOW_KEYS, "window")
    for required in ("days", "from", "to", "mode"):
        if required not in fields:
            raise ScheduleError(f"window lacks {required}", where=f"{path}:{line}")

    def where(key: str) -> str:
        return f"{path}:{fields[key][0].start_mark.line + 1}"

    days = _days(fields["days"][1], where("days"))
    start = _minute(fields["from"][1], where("from"))
    end = _minute(fields["to"][1], where("to"))
    if start == 1440:
        raise ScheduleError("from 24:00: a window starts at 23:59 at the latest (use 00:00 of the next day)",
                            where=where("from"))
    if start == end:
        raise ScheduleError(f"from and to are both {fields['from'][1]}: an empty window (a whole day is "
                            "00:00 to 24:00)", where=where("to"))
    mode = fields["mode"][1]
    if mode not in WINDOW_MODES[policy]:
        allowed = " or ".join(WINDOW_MODES[policy])
        raise ScheduleError(f"mode {textfiles.shown(mode)}: under policy {policy} a window's mode is {allowed}",
                            where=where("mode"))
    return Window(days, start, end, mode, line)


def _days(value: Any, where: str) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    out: set[int] = set()
    for item in items:
        for part in str(item).lower().replace(" ", "").split(","):
            if part in DAY_SETS:
                out.update(DAYS.index(d) for d in DAY_SETS[part])
            elif "-" in part and all(p in DAYS for p in part.split("-", 1)):
                first, last = (DAYS.index(p) for p in part.split("-", 1))
                out.update(DAYS.index(DAYS[(first + i) % 7]) for i in range((last - first) % 7 + 1))
            elif part in DAYS:
                out.add(DAYS.index(part))
            else:
                raise ScheduleError(f"days {textfiles.shown(item)}: use mon..sun, a range such as mon-fri, daily, "
                                    "weekdays or weekends", where=where)
    if not out:
        raise ScheduleError("days is empty", where=where)
    return tuple(sorted(out))


def _minute(value: Any, where: str) -> int:
    # YAML 1.1 reads an unquoted 18:00 as the sexagesimal number 1080: take it back as a time.
    text = f"{value // 60}:{value % 60:02d}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
    m = _TIME.match(text.strip())
    if not m or (int(m.group(1)) == 24 and m.group(2) != "00"):
        raise ScheduleError(f"time {textfiles.shown(value)}: use HH:MM from 00:00 to 24:00", where=where)
    return int(m.group(1)) * 60 + int(m.group(2))


def _duration(path: str, field: tuple[yaml.Node, Any] | None, *, default: float | None,
              forever_ok: bool, most: float) -> float | None:
    if field is None:
        return default
    node, value = field
    where = f"{path}:{node.start_mark.line + 1}"
    if forever_ok and value == "forever":
        return None
    seconds = None if isinstance(value, bool) else duration_seconds(str(value))
    if seconds is None:
        hint = "a duration such as 90s, 30m, 2h" + (" or forever" if forever_ok else "")
        raise ScheduleError(f"duration {textfiles.shown(value)}: use {hint}", where=where)
    if seconds > most:
        longest = f"{int(most // 86400)}d" + (" (or forever)" if forever_ok else "")
        raise ScheduleError(f"duration {textfiles.shown(value)} is longer than {longest}", where=where)
    return seconds


def duration_seconds(text: str) -> float | None:
    """90s, 30m, 2h, 1d -> seconds; None for anything else (the schedule's and --drain-timeout's form)."""
    m = _DURATION.match(text.strip())
    return float(int(m.group(1)) * _UNIT_SECONDS[m.group(2)]) if m else None


def _check_overlaps(path: str, windows: tuple[Window, ...]) -> None:
    """Windows may overlap when they agree; disagreeing ones would make the mode depend on order.
    One sweep over the week's minutes per mode (linear: 5,000 windows must not take a minute)."""
    cover = {mode: [0] * (WEEK + 1) for mode in MODES}
    for w in windows:
        for a, b in w.spans():
            cover[w.mode][a] += 1
            cover[w.mode][b] -= 1
    mine = lease = 0
    for at in range(WEEK):
        mine += cover["mine"][at]
        lease += cover["lease"][at]
        if mine and lease:
            first = next(w for w in windows if w.covers(at // 1440, at % 1440))
            other = next(w for w in windows if w.mode != first.mode and w.covers(at // 1440, at % 1440))
            raise ScheduleError(
                f"this window ({other.mode}) overlaps the window at line {first.line} ({first.mode}) on "
                f"{DAYS[at // 1440]} from {at % 1440 // 60:02d}:{at % 60:02d}", where=f"{path}:{other.line}")


def _paint(windows: tuple[Window, ...]) -> tuple[int, ...]:
    owner = [-1] * WEEK
    next_free = list(range(WEEK + 1))  # union-find: the first unpainted minute at or after each minute

    def find(at: int) -> int:
        root = at
        while next_free[root] != root:
            root = next_free[root]
        while next_free[at] != root:
            next_free[at], at = root, next_free[at]
        return root

    for index, window in enumerate(windows):
        for a, b in window.spans():
            at = find(a)
            while at < b:
                owner[at] = index
                next_free[at] = at + 1
                at = find(at + 1)
    return tuple(owner)


def _skipped_windows(path: str, tz: str, windows: tuple[Window, ...]) -> tuple[str, ...]:
    """Warnings for windows that lie wholly inside a spring-forward gap: on that day they never happen."""
    short = [w for w in windows if (w.end - w.start) % 1440 <= MAX_GAP_MIN and w.end > w.start]
    if not short:  # a gap is an hour (two at most): only a short window can fit in one
        return ()
    zone = ZoneInfo(tz)
    gaps: set[tuple[int, int, int]] = set()  # (weekday, first skipped minute, first minute after)
    start = datetime(datetime.now(timezone.utc).year, 1, 1, tzinfo=timezone.utc)
    day, hour = timedelta(days=1), timedelta(hours=1)
    for n in range(2 * 366):  # this year and next, day by day; the changing day hour by hour
        at = start + n * day
        before, after = at.astimezone(zone).utcoffset(), (at + day).astimezone(zone).utcoffset()
        if before is None or after is None or after <= before:
            continue
        for h in range(1, 25):
            wall = (at + h * hour).astimezone(zone)
            if wall.utcoffset() == after:
                jump = int((after - before).total_seconds() // 60)
                first = wall.hour * 60 + wall.minute - jump
                if first >= 0:  # a gap that crosses midnight is left alone: no zone has one
                    gaps.add((wall.weekday(), first, first + jump))
                break
    warnings = []
    for w in short:
        length = (w.end - w.start) % 1440
        for weekday, first, after_gap in sorted(gaps):
            if weekday in w.days and first <= w.start and w.start + length <= after_gap:
                warnings.append(f"{path}:{w.line}: this window ({w.start // 60:02d}:{w.start % 60:02d} for "
                                f"{length} min on {DAYS[weekday]}) lies in the hour {tz} skips when clocks go "
                                f"forward: on that day it does not happen")
                break
    return tuple(warnings)


def offered_minutes(schedule: Schedule) -> list[bool]:
    """For each minute of the week, whether the schedule may offer the rig then (profit: while a lease pays)."""
    inside = [index >= 0 for index in schedule.by_minute]
    if schedule.policy == "fixed":
        modes = [schedule.windows[i].mode if i >= 0 else schedule.default for i in schedule.by_minute]
        return [mode == "lease" for mode in modes]
    if schedule.policy == "mine-first":
        return inside
    return [not x for x in inside]  # lease-first, profit


def _reclamation_warnings(schedule: Schedule) -> tuple[str, ...]:
    """With a reclamation window W the rig leaves the market W plus CORDON_LEAD_S before each mining span:
    an offered span shorter than that is never offered, and a lease_grace shorter than W gives a mining
    window up (and offers the rig again) before the reclaimed leases may be closed."""
    if schedule.reclamation_window_s is None:
        return ()
    lead_min = (schedule.reclamation_window_s + CORDON_LEAD_S) / 60
    said = f"reclamation_window {_shown_s(schedule.reclamation_window_s)}"
    warnings = []
    if schedule.lease_grace_s is not None and schedule.lease_grace_s < schedule.reclamation_window_s + CORDON_LEAD_S:
        warnings.append(f"{schedule.path}: lease_grace {_shown_s(schedule.lease_grace_s)} is shorter than the "
                        f"{said} plus {CORDON_LEAD_S:.0f} s: a mining window is given up before its reclaimed leases "
                        "may be closed; make lease_grace longer or forever")
    offered = offered_minutes(schedule)
    if all(offered) or not any(offered):
        return tuple(warnings)
    start = offered.index(False)  # walk the week from a minute that is not offered: every span is whole
    short: dict[tuple[int, int], list[str]] = {}  # (minutes offered, minute of the day it begins) -> days
    run = 0
    for step in range(1, WEEK + 1):
        minute = (start + step) % WEEK
        if offered[minute]:
            run += 1
            continue
        if 0 < run <= lead_min:
            day, at = divmod((minute - run) % WEEK, 1440)
            short.setdefault((run, at), []).append(DAYS[day])
        run = 0
    for (length, at), days in sorted(short.items()):
        warnings.append(f"{schedule.path}: the rig is offered for only {length} min from {at // 60:02d}:{at % 60:02d} "
                        f"({','.join(days)}), not more than the {said} plus {CORDON_LEAD_S:.0f} s: it is never "
                        "offered then (it leaves the market that long before mining)")
    return tuple(dict.fromkeys(warnings))


def _shown_s(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:.0f}s"
