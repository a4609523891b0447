"""What the agent says of a tick: the ledger's line (a change only) and the status record (status.json, the
node's annotation; read back on the controller by rigside/status.py), with the schedule's windows they name."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from miner2provider import __version__
from miner2provider.agent.decide import State
from miner2provider.agent.economy import MinerStats, ProfitQuote
from miner2provider.agent.sight import Sight, iso
from miner2provider.rigside import ledger
from miner2provider.rigside.status import AgentStatus, Lease, Measured, Telemetry
from miner2provider.timeshare import policy
from miner2provider.timeshare.model import Schedule

NEVER = datetime.min.replace(tzinfo=timezone.utc)


@dataclass
class Windows:
    """The schedule's next change and when the rig must next mine unoffered, each computed only when due."""

    _next: tuple[datetime, datetime | None] = (NEVER, None)  # (recompute at, value)
    # When the rig must next mine unoffered: the reclaimer on the farm's server reads it from the status and
    # reclaims the node's leases in time.
    mine_at_value: datetime | None = None

    def anew(self) -> None:
        """The offer changed: the windows' next change is scanned again."""
        self._next = (NEVER, None)

    def next_change(self, schedule: Schedule, now: float, lease_pays: bool) -> datetime | None:
        """The schedule's next change, recomputed only once it has passed: the scan costs tens of ms of CPU
        (minutes over 8 days), too much for every tick of an idle agent."""
        at = datetime.fromtimestamp(now, timezone.utc)
        due, value = self._next
        if at >= due:
            value = policy.next_change(schedule, at, lease_pays=lease_pays)
            self._next = (value if value is not None else at + timedelta(hours=1), value)
        return value

    def mine_at(self, schedule: Schedule, at: datetime, offered: bool, lease_pays: bool) -> datetime | None:
        """When the rig must next mine unoffered.  While offered: the schedule's next change (next_change's
        cached scan), which stops offering it.  While not: since when, kept while it stays so (the minute the
        schedule named, when that has come, else the moment it stopped being offered)."""
        if offered:
            change = self.next_change(schedule, at.timestamp(), lease_pays)
            self.mine_at_value = None if change is None else policy.mine_from(schedule, change, lease_pays)
        elif self.mine_at_value is None or self.mine_at_value > at:
            self.mine_at_value = at
        return self.mine_at_value


@dataclass
class Ledger:
    """The rig's ledger: a line when the mode, the sight of the API or the set of leases changed (never per
    tick); the last line written is the one compared against, across restarts too."""

    directory: Path
    last: ledger.Entry | None = None  # the ledger's last line (read once, at the first tick)

    def record(self, now: float, state: State, blind: bool, gpu_count: int, sight: Sight, stats: MinerStats,
               say: Callable[[str], None]) -> None:
        if self.last is None:
            entries, _ = ledger.read(self.directory)
            self.last = entries[-1] if entries else ledger.Entry(0.0, "")
        last = self.last
        leases = tuple(lease["pod"] for lease in sight.leases) if not blind else last.leases
        leased = sight.leased_gpus(gpu_count) if not blind else last.leased
        m = stats.measured
        # Per-card hand-over: the cards the agent started the miner on beside the leases.
        mining = last.mining if blind else min(len(state.mine_on), gpu_count - leased) if leases else 0
        entry = ledger.Entry(now, state.mode, blind, gpu_count, leases,
                             *((m.algo, m.mhs) if m is not None else ("", ())), leased=leased, mining=mining)
        if entry.same_state(last):
            return
        try:
            ledger.append(self.directory, entry)
        except OSError as exc:  # a full or read-only disk: the rig's work goes on, unrecorded
            say(f"ledger: {exc}")
            return
        self.last = entry


@dataclass(frozen=True)
class Said:
    """What the status says beside the state: the tick's words and the agent's parts that are not State."""

    schedule: str
    marketplace: str
    last_error: str
    hand_over: str
    hand_over_why: str
    watchdog_was: bool | None
    drain: bool
    telemetry: Telemetry | None = None  # the cards as last read (telemetry.py)


def status(state: State, said: Said, change: datetime | None, mine_at: datetime | None, sight: Sight,
           profit: ProfitQuote, stats: MinerStats) -> dict[str, Any]:
    """The status record (rigside/status.py's AgentStatus, which the controller reads back), as status.json and
    the node's annotation carry it."""
    shown = stats.shown
    watchdog = ("" if said.watchdog_was is None else "held while leased (it ran before)" if said.watchdog_was
                else "held while leased (it was stopped before)")
    seen = sight.leases_seen()
    measured = shown.as_status() if shown else None
    record = AgentStatus(
        True, state.mode, iso(state.since), change.isoformat(timespec="seconds") if change else "", said.schedule,
        said.last_error, tuple(Lease(str(lease["pod"]), str(lease["since"])) for lease in seen),
        said.drain, Measured(measured["algo"], tuple(measured["mhs"]), tuple(measured["watts"])) if measured else None,
        mine_at=mine_at.isoformat(timespec="seconds") if mine_at else "", hand_over=said.hand_over,
        hand_over_why=said.hand_over_why, watchdog=watchdog, agent_version=__version__, marketplace=said.marketplace,
        offered=state.offered, measured_samples=measured["samples"] if measured else 0,
        measured_at=iso(shown.at) if shown else "", lease_gpus=tuple(lease.get("gpus") for lease in seen),
        telemetry=said.telemetry, **_quoted(profit))
    return record.as_json()


def _quoted(profit: ProfitQuote) -> dict[str, Any]:
    """Policy profit's quote (rounded as timeshare/profit.py says it) and the offer, as the record's fields."""
    if profit.quote is None:
        return {}
    said = profit.quote.as_status()
    leased: Any = said.get("leased") or {}
    return {"lease_pays": profit.offer.offered, "lease_per_hour": said["lease_per_hour"],
            "floor_per_hour": said["floor_per_hour"], "quote_source": said["source"],
            "quote_missing": said.get("missing", ""), "reclaim_per_hour": said.get("reclaim_per_hour"),
            "leased_gpus": leased.get("gpus", 0), "leased_of": leased.get("of", 0),
            "leased_per_hour": leased.get("per_hour") if leased else None}
