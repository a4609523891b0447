"""What the schedule asks for at an instant, and when that changes.  Pure.

The schedule gives two things at every instant (``Desired``):

- ``offered``: the node is offered to leases (schedulable; the marketplace lists its GPUs);
- ``idle_mining``: the miner may run while no lease holds the GPUs (a lease then preempts it).

| policy      | in a window                       | outside windows                     |
|-------------|-----------------------------------|-------------------------------------|
| fixed       | the window's mode, strictly       | ``default``, strictly               |
| lease-first | ``mine``: not offered, mining     | offered, idle mining                |
| mine-first  | ``lease``: offered, idle mining   | not offered, mining                 |
| profit      | ``mine``: not offered, mining     | offered (idle mining) while a lease |
|             |                                   | pays more than mining (profit.py)   |

"Strictly" means a fixed lease window keeps the GPUs free even with no lease (fast start for
renters), and a fixed mine window is not offered.

**Daylight saving time.** Windows are wall-clock times in the schedule's timezone.  In the
spring-forward gap the skipped times never occur: a boundary inside the gap takes effect
at the first wall time after it (02:30 -> 03:00).  In the fall-back hour, wall times repeat:
a boundary takes effect at its first occurrence, and the mode in force at the end of the
first pass holds through the repeated hour, so a rig never switches twice for one boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from miner2provider.timeshare.model import CORDON_LEAD_S, Schedule, Window

MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Desired:
    offered: bool
    idle_mining: bool
    window: Window | None = None  # the window in force, None outside windows

    @property
    def label(self) -> str:
        if not self.offered:
            return "mine"
        return "lease (idle mining)" if self.idle_mining else "lease"

    @property
    def key(self) -> tuple[bool, bool]:
        """What the agent acts on (the window it came from does not matter)."""
        return self.offered, self.idle_mining

    def same(self, other: Desired) -> bool:
        return self.key == other.key


def _utc(at: datetime) -> datetime:
    if at.tzinfo is None:
        raise ValueError("schedules need aware datetimes")
    return at.astimezone(timezone.utc)


def _wall(schedule: Schedule, at: datetime) -> tuple[int, int]:
    """(weekday, minute of day) of the wall clock at ``at``, with the fall-back rule above."""
    at = _utc(at)
    local = at.astimezone(schedule.zone)
    if local.fold == 1:
        # Second pass of a repeated hour: hold the wall time the first pass ended with.
        back = at
        while back.astimezone(schedule.zone).fold == 1:
            back -= MINUTE
        local = back.astimezone(schedule.zone)
    return local.weekday(), local.hour * 60 + local.minute


def window_at(schedule: Schedule, at: datetime) -> Window | None:
    weekday, minute = _wall(schedule, at)
    index = schedule.by_minute[weekday * 1440 + minute]
    return schedule.windows[index] if index >= 0 else None


def desired_at(schedule: Schedule, at: datetime, lease_pays: bool = False) -> Desired:
    """``lease_pays``: policy profit's offer now (profit.decide_offer); the other policies ignore it."""
    window = window_at(schedule, at)
    if schedule.policy == "fixed":
        mode = window.mode if window else schedule.default
        return Desired(mode == "lease", mode == "mine", window)
    if schedule.policy == "lease-first":
        return Desired(window is None, True, window)
    if schedule.policy == "profit":
        return Desired(window is None and lease_pays, True, window)
    return Desired(window is not None, True, window)  # mine-first


def mine_from(schedule: Schedule, at: datetime, lease_pays: bool = False,
              horizon: timedelta = timedelta(days=8)) -> datetime | None:
    """When the rig must next mine unoffered (the marketplace's leases gone): ``at`` itself when it is not
    offered now, else the first change that stops offering it; None within ``horizon``.  (Every change of
    ``Desired`` the policies make flips ``offered``, so this is ``next_change`` checked once.)"""
    t: datetime | None = _utc(at)
    end = _utc(at) + horizon
    while t is not None and desired_at(schedule, t, lease_pays).offered:
        t = next_change(schedule, t, horizon=end - t, lease_pays=lease_pays)
    return t


def with_lead(schedule: Schedule, desired: Desired, at: datetime, mining_at: datetime | None) -> Desired:
    """With a reclamation window W, the rig leaves the market W plus CORDON_LEAD_S before mining: a lease won
    later could not be reclaimed in time.  Then it mines while no lease runs (the GPUs would idle)."""
    window = schedule.reclamation_window_s
    if window is None or not desired.offered or mining_at is None:
        return desired
    if (_utc(mining_at) - _utc(at)).total_seconds() > window + CORDON_LEAD_S:
        return desired
    return Desired(False, True, desired.window)


def next_change(schedule: Schedule, at: datetime, horizon: timedelta = timedelta(days=8),
                lease_pays: bool = False) -> datetime | None:
    """The first minute after ``at`` at which ``desired_at`` differs; None within ``horizon``.  Policy
    profit: the next change the windows make while the offer stays ``lease_pays`` (prices are not known
    ahead)."""
    at = _utc(at)  # arithmetic on zone-aware datetimes is wall-clock arithmetic in Python: use UTC
    now = desired_at(schedule, at, lease_pays)
    t = at.replace(second=0, microsecond=0) + MINUTE
    end = at + horizon
    while t <= end:
        if not desired_at(schedule, t, lease_pays).same(now):
            return t
        t += MINUTE
    return None


def timeline(schedule: Schedule, start: datetime, days: int,
             lease_pays: bool = False) -> list[tuple[datetime, datetime, Desired]]:
    """Consecutive spans [from, to) of one Desired each (UTC), from ``start`` for ``days`` days (policy
    profit: with the offer ``lease_pays`` throughout)."""
    start = _utc(start)
    end = start + timedelta(days=days)
    spans = []
    t = start
    while t < end:
        d = desired_at(schedule, t, lease_pays)
        nxt = next_change(schedule, t, horizon=end - t, lease_pays=lease_pays)
        stop = min(nxt, end) if nxt else end
        spans.append((t, stop, d))
        t = stop
    return spans
