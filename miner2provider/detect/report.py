"""The rig report: what detect found on one rig, and the JSON-ready dicts ``m2p detect --json`` and
``m2p status --json`` print and the history keeps (no I/O, nothing printed)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from miner2provider.detect.drift import reasons_to_run
from miner2provider.detect.facts.probe import RigFacts
from miner2provider.detect.readiness import Verdict


@dataclass(frozen=True)
class RigReport:
    name: str
    address: str
    facts: RigFacts | None
    verdict: Verdict | None
    failure: str | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.failure is None


def report_json(report: RigReport) -> dict[str, Any]:
    data = asdict(report)
    data["status"] = "failed" if not report.ok else report.verdict.status if report.verdict else "unknown"
    if report.facts:
        data["facts"]["mining_os"]["label"] = report.facts.mining_os.label
        data["facts"]["mining_os"]["miner_control"] = report.facts.mining_os.miner_control
        for row, card in zip(data["facts"]["amd_gpus"], report.facts.amd_gpus, strict=True):
            row.update(model=card.slug, name=card.name)
    return data


def status_row(report: RigReport) -> dict[str, Any]:
    """converged: the fingerprint convert left is there and nothing drifted since."""
    if not report.ok or report.facts is None:
        return {"rig": report.name, "state": "failed", "k3s": "-", "node": "-", "gpus": report.error or "",
                "detail": "", "agent": None}
    f = report.facts
    inst = f.installed
    drift = reasons_to_run(f.fingerprint, f.gpus, None)
    state = "not converged" if not f.fingerprint.present else "drifted" if drift else "converged"
    gpus = f"{len(f.gpus.gpus)} x {', '.join(f.gpus.models)}" if f.gpus.state == "ok" else f.gpus.state
    if inst.k3s_service:
        k3s = f"{inst.k3s_service} {inst.k3s}"
    else:
        k3s = f"{inst.k3s} (not running)" if inst.k3s else "-"
    agent = None
    if f.agent_status.present or inst.agent:
        agent = {"service": inst.agent or "not installed", **asdict(f.agent_status),
                 "ledger": [asdict(entry) for entry in f.agent_ledger]}
        del agent["present"]
    return {"rig": report.name, "state": state, "k3s": k3s, "node": f.hostname if inst.k3s_service else "-",
            "gpus": gpus, "detail": "; ".join(drift) if f.fingerprint.present else "", "agent": agent}
