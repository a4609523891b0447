"""What one dashboard sweep knows of the fleet, typed for the alert rules (rules.py): per rig when it last answered,
its mode, whether its miner should mine and does, its cards' health and temperature, its leases; the provider's
answer and the wallet's balance.  ``snapshot_from_history`` maps the dashboard's stored reports into it.

A fact the sweep did not read is None (or ``read`` False for a whole rig): the rules then neither fire nor recover on
it, so a rig that went silent does not "recover" its hot card.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from miner2provider.detect.report import RigReport, farm_reclaimer, stored_report
from miner2provider.market.base import ProviderState
from miner2provider.rigside.status import AgentStatus, Telemetry

HEALTHS = ("ok", "hot", "lost", "xid")  # rigside/status.py's, and "unknown" for anything else
MINING_MODES = ("mining", "idle-mining")  # the agent's modes in which the miner runs


@dataclass(frozen=True)
class Card:
    index: int
    uuid: str = ""
    model: str = ""
    temperature_c: float | None = None
    health: str = "ok"  # HEALTHS, or "unknown"
    why: str = ""  # the health's reason as the rig said it

    @property
    def key(self) -> str:
        """The card's part of an alert's key: its UUID (stable when cards move), else its index."""
        return self.uuid or f"#{self.index}"

    @property
    def said(self) -> str:
        return f"card {self.index}" + (f" ({self.model})" if self.model else "")


@dataclass(frozen=True)
class Rig:
    name: str
    last_seen: float | None  # epoch seconds of its last answer; None: never
    read: bool = True  # this sweep read it: False keeps its card, miner and lease facts out of judgement
    mode: str = ""  # the agent's mode ("": no agent)
    should_mine: bool | None = None  # the agent's mode wants the miner running (None: unknown)
    mining: bool | None = None  # a miner runs (None: unknown)
    cards: tuple[Card, ...] | None = None  # None: the cards' health is not known (an agent before telemetry)
    leases: tuple[str, ...] | None = None  # the leases on the rig (pods, namespace/name); None: unknown
    reclaiming: tuple[str, ...] = ()  # the leases the farm's reclaimer is taking back


@dataclass(frozen=True)
class Snapshot:
    rigs: tuple[Rig, ...]
    provider: str = "unknown"  # "yes" | "no" | "unknown" (no provider configured, or not asked yet)
    provider_why: str = ""  # why it did not answer
    wallet_balance: float | None = None  # None: unknown, or the provider file names no wallet
    wallet_currency: str = ""


def rig_of(name: str, last_seen: float | None, report: RigReport | None, reclaiming: tuple[str, ...] = (),
           telemetry: Telemetry | None = None) -> Rig:
    """One rig from the dashboard's stored report (``RigReport``, its agent status included), when it last
    answered and the leases on it the farm's reclaimer is taking back.  ``telemetry``: the cards' health and
    temperatures; by default the agent status's own (issue 56), so an agent before it gives none rather than
    healthy cards."""
    if report is None or not report.ok or report.facts is None:
        return Rig(name, last_seen, read=False)
    facts = report.facts
    status: AgentStatus = facts.agent_status
    shown = telemetry if telemetry is not None else status.telemetry
    cards = None
    if shown is not None:
        models = {gpu.index: gpu.name for gpu in facts.gpus.gpus}
        cards = tuple(Card(c.index, c.uuid, c.name or models.get(c.index, ""), c.temperature_c,
                           c.health if c.health in HEALTHS else "unknown", c.why) for c in shown.cards)
    present = status.present and status.mode not in ("", "unknown")
    return Rig(name, last_seen, True, status.mode if present else "",
               (status.mode in MINING_MODES) if present else None, facts.miner.running if present else None,
               cards, tuple(lease.pod for lease in status.leases) if present else None, reclaiming)


def provider_of(state: ProviderState | None) -> tuple[str, str]:
    """("yes"|"no"|"unknown", why) from the provider's last status read (None: not asked)."""
    if state is None:
        return "unknown", ""
    return ("no", state.error) if state.error else ("yes", "")


def snapshot_from_history(nodes: Mapping[str, str], latest: Mapping[str, tuple[float, dict[str, Any] | None]],
                          provider: ProviderState | None = None, wallet: tuple[float, str] | None = None) -> Snapshot:
    """The sweep's facts from the history's latest reports (``History.latest_snapshots()``: rig -> (stored at,
    report as stored)) for the inventory's rigs (``nodes``: rig -> its Kubernetes node, Host.node_name), the
    provider's last answer and the wallet's (balance, currency) where known.  A rig whose last read failed
    keeps its last answer's time and is not judged on its stale report."""
    reports: dict[str, tuple[float | None, RigReport | None]] = {}
    for name in nodes:
        _, stored = latest.get(name, (0.0, None))
        seen = stored.get("read_at") if stored else None
        fresh = stored is not None and stored.get("status") != "failed"
        reports[name] = (float(seen) if isinstance(seen, (int, float)) and not isinstance(seen, bool) else None,
                         stored_report(stored) if fresh else None)
    reclaimer = farm_reclaimer([r for _, r in reports.values() if r is not None])
    rigs = [rig_of(name, seen, report, tuple(lease.lease for lease in reclaimer.on_node(nodes[name])
                                              if lease.state == "reclaiming"))
            for name, (seen, report) in reports.items()]
    answered, why = provider_of(provider)
    return Snapshot(tuple(rigs), answered, why, *(wallet if wallet else (None, "")))
