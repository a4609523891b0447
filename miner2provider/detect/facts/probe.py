"""The detect probe: every fact's command in one POSIX sh script, one SSH round trip.

Output framing, one block per fact::

    @@m2p-fact os_release
    <the command's stdout and stderr>
    @@m2p-rc 0

``split`` turns that back into ``{fact name: Output}``; ``gather`` parses it into a
``RigFacts``.  Pure: no I/O here (the SSH layer sends the script and returns the text).
"""

from __future__ import annotations

import base64
import shlex
from dataclasses import dataclass
from typing import Any

from miner2provider.detect.facts import ALL_FACTS, FACTS_BY_NAME
from miner2provider.detect.facts.amd import AmdGpu
from miner2provider.detect.facts.base import Output, whole
from miner2provider.detect.facts.fingerprint import Fingerprint
from miner2provider.detect.facts.gpu import Gpus
from miner2provider.detect.facts.health import DefaultRoute, XidErrors
from miner2provider.detect.facts.holders import Holder
from miner2provider.detect.facts.mining_os import MinerState, MiningOs
from miner2provider.detect.facts.node import Installed
from miner2provider.detect.facts.reclaimer import ReclaimerStatus
from miner2provider.detect.facts.system import Cgroups, Cpu, Kernel, Memory, Mount, OsRelease, Python, Sudo
from miner2provider.detect.facts.tunnel import Tunnel
from miner2provider.rigside.ledger import Entry
from miner2provider.rigside.status import AgentStatus

FACT_MARK = "@@m2p-fact "
RC_MARK = "@@m2p-rc "
PROBE_VERSION = 2
BATCH_BYTES = 1 << 20  # a report is ~100 KB on a 13-card rig: one block


def script(python: str | None = None) -> str:
    """The probe; ``python``: the rig's python3 to report (m2p_python_interpreter), else python3."""
    lines = ["#!/bin/sh", f"# m2p detect probe v{PROBE_VERSION}: read-only", "LC_ALL=C; export LC_ALL",
             f"M2P_PYTHON={shlex.quote(python or 'python3')}"]
    lines.append("{")
    for fact in ALL_FACTS:
        # A subshell each: one fact's failure or `exit` cannot stop the others.
        lines.append(f"echo '{FACT_MARK}{fact.name}'; ( {fact.command} ) 2>&1 </dev/null; echo \"{RC_MARK}$?\"")
    # The report leaves the rig in one write, not one per echo and command (~50): sshd sends each write as its
    # own SSH packet, and the controller decrypts and checks each packet in Python (benchmarks/detect_fanout.py).
    # dd gathers its input blocks into one output block (ibs != obs) and writes the bytes unchanged; where there
    # is no dd, cat passes them on as they come.
    lines.append(f"}} | {{ dd ibs=65536 obs={BATCH_BYTES} 2>/dev/null || cat; }}")
    return "\n".join(lines) + "\n"


def inline_command(script: str) -> str:
    """A command line that runs ``script`` with sh: base64 in the command line, not on stdin,
    so it works the same with and without become and pipelining (the action plugins use it)."""
    return f"printf %s {base64.b64encode(script.encode()).decode()} | base64 -d | sh -s"


def split(text: str) -> dict[str, Output]:
    outputs: dict[str, Output] = {}
    name: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith(FACT_MARK):
            name, body = line[len(FACT_MARK):].strip(), []
        elif name is not None and RC_MARK in line:
            # The mark ends the fact; output without a final newline (a file `cat` printed) comes
            # before it on the same line.
            head, _, rc_text = line.rpartition(RC_MARK)
            if head:
                body.append(head)
            rc = whole(rc_text)
            outputs[name] = Output("\n".join(body) + ("\n" if body else ""), -1 if rc is None else rc)
            name = None
        elif name is not None:
            body.append(line)
    return outputs


@dataclass(frozen=True)
class RigFacts:
    os_release: OsRelease
    kernel: Kernel
    cgroup: Cgroups
    cpu: Cpu
    memory: Memory
    disks: tuple[Mount, ...]
    python: Python
    sudo: Sudo
    mining_os: MiningOs
    miner: MinerState
    gpus: Gpus
    cuda: str
    amd_gpus: tuple[AmdGpu, ...]
    installed: Installed
    hostname: str
    default_route: DefaultRoute
    xid: XidErrors
    fingerprint: Fingerprint
    agent_status: AgentStatus
    agent_ledger: tuple[Entry, ...]
    # The farm's reclaimer (the k3s server only); absent from reports stored before it was probed.
    reclaimer: ReclaimerStatus = ReclaimerStatus(False)
    tunnel: Tunnel = Tunnel(False)  # a farm across sites' member (absent from older stored reports too)
    holders: tuple[Holder, ...] = ()  # the processes holding its GPUs (issue 38)


class ProbeIncomplete(ValueError):
    """The probe's output lacks some facts (the connection dropped, or it was cut)."""


class ProbeUnreadable(ValueError):
    """A fact's output is something its parser cannot read (the rig printed what no rig should)."""


# Outputs up to this size are parsed once per fan-out (``gather``'s ``seen``): most of a fleet prints the same OS,
# kernel, python, sudo, mining OS and empty files, and a larger output (a ledger, a process list) is one rig's own.
SHARED_OUTPUT = 4 << 10  # bytes


def gather(text: str, seen: dict[tuple[str, Output], Any] | None = None) -> RigFacts:
    """The rig's facts from the probe's output.  ``seen``: the values parsed for the other rigs of a fan-out, by
    fact and output (a parse is pure and its value immutable, so an output another rig printed is not parsed
    again)."""
    outputs = split(text)
    missing = [f.name for f in ALL_FACTS if f.name not in outputs]
    if missing:
        raise ProbeIncomplete(f"probe output lacks {', '.join(missing)}")
    seen = {} if seen is None else seen
    parsed: dict[str, Any] = {}
    for name, out in outputs.items():
        fact = FACTS_BY_NAME.get(name)
        if fact is None:
            continue
        key = (name, out)
        if key in seen:
            parsed[name] = seen[key]
            continue
        try:
            parsed[name] = fact.parse(out)
        except Exception as exc:  # noqa: BLE001 - one rig's odd output is that rig's failure, never the fleet's
            raise ProbeUnreadable(f"m2p cannot read the rig's {name} output ({type(exc).__name__})") from exc
        if len(out.text) <= SHARED_OUTPUT:
            seen[key] = parsed[name]
    return RigFacts(**parsed)
