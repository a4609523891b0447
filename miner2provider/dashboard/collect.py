"""Filling the history from the rigs: one sweep is the detect probe over SSH (one round trip per rig),
its report kept as the rig's latest and its ledger lines merged without duplicates."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from miner2provider.core.inventory import Host
from miner2provider.dashboard.history import History
from miner2provider.detect.facts.node import LEDGER_TAIL
from miner2provider.detect.report import RigReport, report_json, status_row
from miner2provider.detect.ssh import SshOptions
from miner2provider.detect.survey import detect
from miner2provider.fleet.pipeline import farm_status


def snapshot(report: RigReport, row: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the history keeps of one report: ``m2p detect --json``'s row and ``m2p status --json``'s (``row``; by
    default the report's alone, without the farm's reclaimer).  The ledger's lines go to their own table
    (add_ledger): a snapshot keeps the last few, as status shows them."""
    if report.facts is not None:
        report = replace(report, facts=replace(report.facts, agent_ledger=report.facts.agent_ledger[-LEDGER_TAIL:]))
    return {**report_json(report), "status_row": status_row(report) if row is None else row}


def sweep(history: History, hosts: list[Host], ssh: SshOptions, now: float | None = None) -> list[RigReport]:
    """Read every rig once and store what it said; a rig that fails keeps its last report, marked failed
    (``read_at``: when it last answered, up to which its ledger counts)."""
    now = time.time() if now is None else now
    reports = detect(hosts, ssh)
    rows = farm_status(reports, hosts)
    for report, row in zip(reports, rows, strict=True):
        if report.ok and report.facts:
            history.add_snapshot(report.name, now, {**snapshot(report, row), "read_at": now})
            history.add_ledger(report.name, report.facts.agent_ledger, seen_at=now)
            history.add_cards(report.name, report.facts.agent_status.telemetry, now)
        else:
            old = history.latest_snapshot(report.name) or {}
            history.add_snapshot(report.name, now, {**old, "failure": report.failure, "error": report.error,
                                                    "status": "failed"})
    return reports
