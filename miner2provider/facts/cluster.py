"""What of the GPU stack is already on the rig: container toolkit, k3s, m2p's agent."""

from __future__ import annotations

import re
from dataclasses import dataclass

from miner2provider.facts.base import Fact, Output

AGENT_UNIT = "m2p-timeshare-agent.service"


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
