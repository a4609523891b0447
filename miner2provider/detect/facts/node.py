"""What of the GPU stack is already on the rig: container toolkit, k3s, m2p's agent and its status."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from miner2provider.agent.ledger import MAX_GPUS, Entry
from miner2provider.agent.ledger import parse as parse_ledger
from miner2provider.agent.measure import ALGO_CHARS
from miner2provider.detect.facts.base import Fact, Output

AGENT_UNIT = "m2p-agent.service"  # roles/timeshare_agent
AGENT_STATUS = "/var/lib/m2p/agent/status.json"  # written by the agent (service.py) when it changes, 0644
AGENT_LEDGER = "/var/lib/m2p/agent/ledger.jsonl"  # one line per change of mode (agent/ledger.py), 0644
LEDGER_TAIL = 20  # the lines the probe reads: what status shows; the dashboard's sweep keeps the rest


@dataclass(frozen=True)
class Installed:
    container_toolkit: str  # version, or "" when absent
    k3s: str  # version, or ""
    k3s_service: str  # "k3s", "k3s-agent" or "" (the active one)
    agent: str  # systemd state of m2p's agent: active | inactive | failed | "" (not installed)


class InstalledFact(Fact[Installed]):
    """``toolkit <nvidia-ctk --version line>``, ``k3s <k3s --version line>``,
    ``unit <name> <is-active>`` for k3s, k3s-agent and m2p's agent."""

    name = "installed"
    command = (
        'command -v nvidia-ctk >/dev/null 2>&1 && echo "toolkit $(nvidia-ctk --version 2>/dev/null | head -n1)"; '
        'command -v k3s >/dev/null 2>&1 && echo "k3s $(k3s --version 2>/dev/null | head -n1)"; '
        f"for u in k3s.service k3s-agent.service {AGENT_UNIT}; do "
        '[ -e "/etc/systemd/system/$u" ] || [ -e "/lib/systemd/system/$u" ] || continue; '
        'echo "unit $u $(systemctl is-active "$u" 2>/dev/null)"; done; true'
    )

    @staticmethod
    def parse(out: Output) -> Installed:
        toolkit = k3s = k3s_service = agent = ""
        for line in out.text.splitlines():
            key, _, rest = line.partition(" ")
            if key == "toolkit":
                m = re.search(r"version\s+v?([0-9][0-9.]*)", rest)
                toolkit = m.group(1) if m else rest.strip() or "unknown"
            elif key == "k3s":
                m = re.search(r"(v[0-9]+\.[0-9]+\.[0-9]+\+k3s[0-9]+)", rest)
                k3s = m.group(1) if m else rest.strip() or "unknown"
            elif key == "unit":
                unit, _, state = rest.partition(" ")
                if unit == AGENT_UNIT:
                    agent = state or "unknown"
                elif state == "active":
                    k3s_service = unit.removesuffix(".service")
        return Installed(toolkit, k3s, k3s_service, agent)


@dataclass(frozen=True)
class Lease:
    pod: str  # namespace/name
    since: str  # ISO 8601 ("" when the API did not say)


@dataclass(frozen=True)
class Measured:
    """The miner's hashrate and power per GPU as the agent averaged them (agent/measure.py)."""

    algo: str
    mhs: tuple[float, ...]
    watts: tuple[float, ...]


@dataclass(frozen=True)
class AgentStatus:
    present: bool  # the agent has written a status
    mode: str = ""  # mining | idle-mining | leasing | draining | unknown (status unreadable)
    since: str = ""  # ISO 8601
    next_change: str = ""  # ISO 8601, or "" when the schedule never changes
    schedule: str = ""
    last_error: str = ""
    leases: tuple[Lease, ...] = ()  # tenant pods on the rig's node, as the agent last read them
    drain: bool = False  # m2p asked the agent to cordon the node (--drain)
    measured: Measured | None = None  # HiveOS rigs: the running miner's own stats, averaged
    lease_pays: bool | None = None  # policy profit: the agent's offer (None: another policy)
    floor_per_hour: float | None = None  # policy profit: the rig's lease floor, all its GPUs
    quote_source: str = ""  # "economics file" or "measured kawpow hashrate of 2 GPUs"


class AgentStatusFact(Fact[AgentStatus]):
    """The agent's ``status.json`` (``{"mode", "since", "next_change", "schedule", "last_error",
    "agent_version", "leases": [{"pod", "since"}], "drain"}``), or nothing when no agent has run on the rig."""

    name = "agent_status"
    command = f"cat {AGENT_STATUS} 2>/dev/null; true"

    @staticmethod
    def parse(out: Output) -> AgentStatus:
        if not out.text.strip():
            return AgentStatus(False)
        try:
            raw = json.loads(out.text)
        except (ValueError, RecursionError) as exc:
            reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)[:120]
            return AgentStatus(True, "unknown", last_error=f"{AGENT_STATUS} unreadable: {reason}")
        return agent_status_from(raw)


def agent_status_from(raw: object) -> AgentStatus:
    """The one reader of the agent's status, decoded: from the rig's status.json (above) and from the
    ``m2p.io/status`` annotation the agent publishes on its node (the dashboard).  Every field is
    checked: the rig, and whoever can annotate its node, may send anything."""
    if not isinstance(raw, dict):
        return AgentStatus(True, "unknown", last_error=f"{AGENT_STATUS} unreadable: not a JSON object")
    listed = raw.get("leases")
    leases = tuple(Lease(_field(item, "pod", 300) or "?", _field(item, "since"))
                   for item in (listed if isinstance(listed, list) else []) if isinstance(item, dict))
    found = raw.get("profit")
    profit: dict[str, Any] = found if isinstance(found, dict) else {}
    lease_pays = profit.get("lease_pays")
    return AgentStatus(True, _field(raw, "mode") or "unknown", _field(raw, "since"),
                       _field(raw, "next_change"), _field(raw, "schedule"),
                       _field(raw, "last_error", 300), leases, raw.get("drain") is True,
                       measured_from(raw.get("measured")), lease_pays if isinstance(lease_pays, bool) else None,
                       _number(profit.get("floor_per_hour")), _field(profit, "source"))


def _field(raw: dict[str, Any], key: str, cut: int = 100) -> str:
    """One text field of status.json (a file on the rig): a string, cut; anything else reads as absent."""
    value = raw.get(key)
    return value[:cut] if isinstance(value, str) else ""


class AgentLedgerFact(Fact[tuple[Entry, ...]]):
    """The last lines of the agent's ledger (``{"at", "mode", "gpus", "blind"?, "leases"?}`` per line);
    empty when no agent has run.  A torn or foreign line is skipped (agent/ledger.py reads it)."""

    name = "agent_ledger"
    command = f"tail -n {LEDGER_TAIL} {AGENT_LEDGER} 2>/dev/null; true"

    @staticmethod
    def parse(out: Output) -> tuple[Entry, ...]:
        return tuple(parse_ledger(out.text)[0][-LEDGER_TAIL:])


def _number(value: object) -> float | None:
    """A finite, non-negative number from status.json; anything else reads as absent."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def measured_from(raw: object) -> Measured | None:
    """``measured`` of status.json (or of a saved report's agent_status), checked; None when absent or odd."""
    if not isinstance(raw, dict) or not isinstance(raw.get("mhs"), list):
        return None
    mhs = [_number(v) for v in raw["mhs"]][:MAX_GPUS]
    watts = [_number(v) for v in raw.get("watts") or []][:MAX_GPUS] if isinstance(raw.get("watts"), list) else []
    if not mhs or None in mhs or None in watts:
        return None
    return Measured(_field(raw, "algo", ALGO_CHARS) or "unknown", tuple(v for v in mhs if v is not None),
                    tuple(v for v in watts if v is not None))
