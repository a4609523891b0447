"""What of the GPU stack is already on the rig: container toolkit, k3s, m2p's agent and its status."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from miner2provider.detect.facts.base import Fact, Output
from miner2provider.rigside.disk import LEDGER_FILE, LEDGER_ROTATED, STATUS_FILE
from miner2provider.rigside.ledger import Entry
from miner2provider.rigside.ledger import parse as parse_ledger
from miner2provider.rigside.status import AgentStatus, agent_status_from

AGENT_UNIT = "m2p-agent.service"  # roles/timeshare_agent
AGENT_STATUS = STATUS_FILE  # the agent writes it (rigside/status.py)
AGENT_LEDGER, AGENT_LEDGER_ROTATED = LEDGER_FILE, LEDGER_ROTATED  # the agent's ledger files (rigside/ledger.py)
# The lines the probe reads: a week of a rig switching hourly, twice over, whatever the rotation did in between
# (the dashboard's history stores each line once); reports keep the last LEDGER_TAIL (what status shows).
LEDGER_READ = 500
LEDGER_TAIL = 20


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


class AgentStatusFact(Fact[AgentStatus]):
    """The agent's ``status.json`` (``{"mode", "since", "next_change", "schedule", "last_error",
    "agent_version", "leases": [{"pod", "since"}], "drain"}``), or nothing when no agent has run on the rig."""

    name = "agent_status"
    # `[ -e ]` first: a rig without an agent (most of a fleet) starts no process for it.
    command = f"[ -e {AGENT_STATUS} ] && cat {AGENT_STATUS} 2>/dev/null; true"

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


class AgentLedgerFact(Fact[tuple[Entry, ...]]):
    """The last lines of the agent's ledger (``{"at", "mode", "gpus", "blind"?, "leases"?}`` per line);
    empty when no agent has run.  A torn or foreign line is skipped (rigside/ledger.py reads it)."""

    name = "agent_ledger"
    # The rotated file, then the current one: a sweep after a rotation still reads the lines before it.
    command = (f"if [ -e {AGENT_LEDGER_ROTATED} ] || [ -e {AGENT_LEDGER} ]; then "
               f"cat {AGENT_LEDGER_ROTATED} {AGENT_LEDGER} 2>/dev/null | tail -n {LEDGER_READ}; fi; true")

    @staticmethod
    def parse(out: Output) -> tuple[Entry, ...]:
        return tuple(parse_ledger(out.text)[0][-LEDGER_READ:])
