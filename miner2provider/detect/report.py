"""The rig report: what detect found on one rig, and its one JSON schema (``schema: 1``): what ``m2p detect
--json`` and ``m2p status --json`` print, what the history keeps, and what ``report_from_json`` reads back
into the same typed RigReport (no I/O, nothing printed).  A change of shape is a new schema number and a
history migration (dashboard/history.py)."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import asdict, dataclass
from typing import Any

from miner2provider.detect.drift import reasons_to_run
from miner2provider.detect.facts.node import LEDGER_TAIL
from miner2provider.detect.facts.probe import RigFacts
from miner2provider.detect.facts.reclaimer import ReclaimerStatus
from miner2provider.detect.facts.tunnel import Tunnel, age_s
from miner2provider.detect.readiness import Verdict

# WireGuard shakes hands again every 2 minutes while packets flow (REKEY_AFTER_TIME, 120 s), and the rigs' 25 s
# keepalive keeps them flowing: a tunnel whose freshest handshake is older than this is not carrying traffic.
TUNNEL_STALE_S = 180


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


REPORT_SCHEMA = 1


class SchemaError(ValueError):
    """A stored or given report that is not of a schema this m2p reads."""


def report_json(report: RigReport) -> dict[str, Any]:
    data = {"schema": REPORT_SCHEMA, **_plain(report)}
    data["status"] = "failed" if not report.ok else report.verdict.status if report.verdict else "unknown"
    if report.facts:
        data["facts"]["mining_os"]["label"] = report.facts.mining_os.label
        data["facts"]["mining_os"]["miner_control"] = report.facts.mining_os.miner_control
        for row, card in zip(data["facts"]["amd_gpus"], report.facts.amd_gpus, strict=True):
            row.update(model=card.slug, name=card.name)
    return data


def _plain(value: Any) -> Any:
    """``dataclasses.asdict(value)``, the same dictionaries, lists and tuples, at a third of its cost (asdict
    deep-copies every leaf, and a report has ~500: it was a tenth of ``m2p detect --json``'s CPU per rig)."""
    kind = type(value)
    if kind in _LEAVES:
        return value
    names = _field_names(kind) if dataclasses.is_dataclass(kind) else None
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if kind is tuple or kind is list:
        return kind(_plain(v) for v in value)
    return asdict(_Boxed(value))["value"]  # anything else exactly as asdict has it (named tuples, dicts, copies)


_LEAVES = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True)
class _Boxed:
    value: Any


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind))


def farm_reclaimer(reports: list[RigReport]) -> ReclaimerStatus:
    """The farm's reclaimer as its k3s server's report says it (absent when no rig runs one)."""
    return next((r.facts.reclaimer for r in reports if r.facts is not None and r.facts.reclaimer.present),
                ReclaimerStatus(False))


def status_rows(reports: list[RigReport], nodes: dict[str, str],
                tunnel_names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``status_row`` of every report; ``nodes``: rig name -> its Kubernetes node (Host.node_name);
    ``tunnel_names``: tunnel address -> rig (a farm across sites' plan), to name the hub's silent peers."""
    reclaimer = farm_reclaimer(reports)
    return [status_row(r, nodes.get(r.name, r.name), reclaimer, tunnel_names or {}) for r in reports]


def status_row(report: RigReport, node: str = "", reclaimer: ReclaimerStatus | None = None,
               tunnel_names: dict[str, str] | None = None) -> dict[str, Any]:
    """converged: the fingerprint convert left is there and nothing drifted since.  ``node``: the rig's Kubernetes
    node (default its name); ``reclaimer``: the farm's (farm_reclaimer), whose leases on that node the row lists."""
    if not report.ok or report.facts is None:
        return {"schema": REPORT_SCHEMA, "rig": report.name, "state": "failed", "k3s": "-", "node": "-",
                "gpus": report.error or "", "detail": "", "agent": None, "reclaims": [], "reclaimer": None,
                "tunnel": None}
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
                 "ledger": [asdict(entry) for entry in f.agent_ledger[-LEDGER_TAIL:]]}
        del agent["present"]
    node = (node or report.name) if inst.k3s_service else "-"
    own = f.reclaimer
    return {"schema": REPORT_SCHEMA, "rig": report.name, "state": state, "k3s": k3s, "node": node, "gpus": gpus,
            "detail": "; ".join(drift) if f.fingerprint.present else "", "agent": agent,
            # The farm's leases on this rig that its reclaimer handles (their deadlines), and on the server the
            # reclaimer's own last sweep.
            "reclaims": [asdict(lease) for lease in (reclaimer or own).on_node(node)] if node != "-" else [],
            "reclaimer": {"at": own.at, "last_error": own.last_error, "leases": len(own.leases)} if own.present
            else None, "tunnel": tunnel_row(f.tunnel, tunnel_names or {})}


def handshake_said(age_s: int | None) -> str:
    """A tunnel row's handshake age as status and convert's refusal say it (negative: facts/tunnel.age_s)."""
    if age_s is None:
        return "no handshake seen"
    if age_s < 0:
        return "last handshake dated after the rig's clock (it stepped back): its age is unknown"
    return f"last handshake {age_s} s ago"


def _fresh(age: int | None) -> bool:
    return age is not None and 0 <= age <= TUNNEL_STALE_S


def silent_peer_said(peer: dict[str, Any]) -> str:
    """One of the hub's silent peers, as status says it: ``no answer now, last handshake 20 s ago``."""
    return ("no answer now, " if peer.get("answers") is False else "") + handshake_said(peer.get("handshake_age_s"))


def tunnel_row(tunnel: Tunnel, names: dict[str, str] | None = None) -> dict[str, Any] | None:
    """A farm across sites' member: its tunnel's state (``ok`` when up with a handshake in TUNNEL_STALE_S), and
    its peers that carry nothing (on the hub: the rigs, by name where ``names`` (address -> rig) knows them, whose
    site is down or whose tunnel is: no handshake in TUNNEL_STALE_S, or no answer to the hub's knock now)."""
    if not tunnel.present:
        return None
    age = tunnel.handshake_age_s()
    ok = tunnel.link == "up" and _fresh(age)
    silent = []
    for peer in tunnel.handshakes:
        peer_age = age_s(tunnel.now, peer.at)
        # The knock says a site is gone at once; a handshake only 3 minutes later.
        if not _fresh(peer_age) or peer.answers is False:
            named = (names or {}).get(peer.address) or peer.address or peer.peer[:8]
            silent.append({"peer": named, "handshake_age_s": peer_age, "answers": peer.answers})
    return {"ok": ok, "link": tunnel.link or "missing", "mtu": tunnel.mtu, "handshake_age_s": age,
            "peers": len(tunnel.handshakes), "silent": silent}


def report_from_json(data: Any) -> RigReport:
    """The RigReport ``report_json`` wrote (fields it derived for readers, such as ``status``, are not read
    back: the typed report derives them again)."""
    if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise SchemaError(f"a rig report of schema {REPORT_SCHEMA} expected, found {found!r}")
    return typing.cast(RigReport, _typed(RigReport, data))


@functools.cache
def _fields(kind: type) -> tuple[tuple[str, Any], ...]:
    """(name, type) of a dataclass's init fields (type hints resolved once: they cost ~1 ms a report)."""
    hints = typing.get_type_hints(kind)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(kind) if f.init)


def _typed(kind: Any, value: Any) -> Any:
    """``value`` (plain JSON) as ``kind``: dataclasses field by field, tuples, optionals, plain values."""
    origin = typing.get_origin(kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return kind(**{name: _typed(hint, value[name]) for name, hint in _fields(kind) if name in value})
    if origin is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_typed(args[0], v) for v in value)
        return tuple(_typed(a, v) for a, v in zip(args, value, strict=True))
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(kind) if a is not type(None)]
        return _typed(inner, value)
    if kind is float and isinstance(value, int):
        return float(value)
    return value


def stored_report(data: Any) -> RigReport | None:
    """A report as the history keeps it (report_json plus what the sweep adds), typed; None when there is
    none, it holds no facts (a rig never read), or it is of another schema (history migrations upgrade
    every report m2p wrote)."""
    if not isinstance(data, dict) or not data.get("facts"):
        return None
    try:
        return report_from_json(data)
    except (SchemaError, KeyError, TypeError, ValueError):
        return None
