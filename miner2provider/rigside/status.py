"""The agent's status: the one schema the agent writes (status.json on the rig, the ``m2p.io/status``
annotation on its node) and the one reader of it (``agent_status_from``), for the controller's detect
probe and dashboard alike.  py38-safe: it ships in the agent's zipapp.

``schema``: STATUS_SCHEMA; a status without one is of schema 1 (agents before the field).  A reader
meets a newer schema as an unreadable status, said so, never as a wrong one.  A field added within a schema is
optional and reads as absent from a status written before it (``telemetry``: None).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from miner2provider.rigside.disk import STATUS_FILE
from miner2provider.rigside.ledger import ALGO_CHARS, MAX_GPUS

STATUS_SCHEMA = 1
# Where the agent publishes on its node (publish.py): its mode label and its status annotation.
MODE_LABEL, STATUS_ANNOTATION = "m2p.io/mode", "m2p.io/status"


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


HEALTHS = ("ok", "hot", "lost", "xid")  # a card's health (agent/telemetry.py); a reader says "unknown" for any other


@dataclass(frozen=True)
class Card:
    """One card as nvidia-smi last read it (agent/telemetry.py): None where the card answers ``[N/A]`` or
    ``[Not Supported]`` (a GeForce's ECC, a passive card's fan) or could not be read (a lost card)."""

    index: int
    uuid: str
    name: str = ""
    pci: str = ""  # its PCI address as nvidia-smi names it (00000000:01:00.0)
    health: str = "ok"  # HEALTHS
    why: str = ""  # the health's reason, said ("91 °C, the limit is 85 °C", "Xid 79 at ...", "GPU is lost")
    temperature_c: float | None = None
    fan_percent: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_mhz: float | None = None
    memory_mhz: float | None = None
    utilization_percent: float | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    throttle: int | None = None  # clocks_throttle_reasons.active: NVML's bitmask (0x20, 0x40: thermal slowdown)
    ecc_uncorrected: int | None = None  # ecc.errors.uncorrected.volatile.total (None: a card without ECC)


@dataclass(frozen=True)
class Telemetry:
    """The rig's cards as last read, and when: ``read_at`` (ISO 8601) gives their age; ``error`` says why the last
    read failed (the cards then are as read before it, a lost one marked so)."""

    read_at: str
    cards: tuple[Card, ...] = ()
    error: str = ""

    def read_at_s(self) -> float | None:
        """``read_at`` as Unix time (None: unreadable, or without its zone: the agent always writes one)."""
        try:
            found = datetime.fromisoformat(self.read_at)
        except ValueError:
            return None
        return found.timestamp() if found.tzinfo is not None else None


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
    mine_at: str = ""  # ISO 8601: when the rig must next mine unoffered (the farm's reclaimer reads it)
    reclaim_per_hour: float | None = None  # policy profit with a reclamation window: its price (timeshare/profit.py)
    # Policy profit while leased: the GPUs the leases hold of the rig's (see hand_over for what mines meanwhile), and
    # what they pay an hour (timeshare/profit.py, "What is really leased").
    leased_gpus: int = 0
    leased_of: int = 0
    leased_per_hour: float | None = None
    # What a lease stops: "per card" (the miner mines on the cards no lease holds) or "whole rig" ("": unsaid).
    hand_over: str = ""
    hand_over_why: str = ""  # what in the OS's configuration hands the whole rig over where per card could be
    # The mining OS's watchdog held by the agent while leased, and how it was before ("": not held).
    watchdog: str = ""
    # The rest of what the agent writes (issue 54: one record, the agent's to write, everyone's to read).
    agent_version: str = ""
    marketplace: str = ""  # the marketplace the rig is offered on ("": none)
    offered: bool = False  # the agent has uncordoned the node and not cordoned it since
    lease_per_hour: float | None = None  # policy profit: what a lease pays the rig an hour
    quote_missing: str = ""  # policy profit: what the quote lacks (a model's watts), said
    measured_samples: int = 0  # the samples behind ``measured``
    measured_at: str = ""  # ISO 8601: when ``measured`` was last shown
    # Each lease's GPUs, in ``leases``' order (None: unsaid: a container through the gate the API has not listed);
    # beside the leases, not in them, so that the detect report's leases keep their shape.
    lease_gpus: tuple[int | None, ...] = ()
    telemetry: Telemetry | None = None  # per-card telemetry and health (None: an agent before it, or none read)

    def as_json(self) -> dict[str, Any]:
        """The record as the agent writes it (status.json, the node's annotation); ``agent_status_from`` reads
        it back."""
        out: dict[str, Any] = {
            "schema": STATUS_SCHEMA, "mode": self.mode, "since": self.since, "next_change": self.next_change or None,
            "mine_at": self.mine_at or None, "schedule": self.schedule, "marketplace": self.marketplace,
            "last_error": self.last_error, "agent_version": self.agent_version, "hand_over": self.hand_over,
            "hand_over_why": self.hand_over_why, "watchdog": self.watchdog, "drain": self.drain,
            "offered": self.offered, "leases": [{"pod": lease.pod, "since": lease.since, **(
                {"gpus": gpus} if gpus is not None else {})} for lease, gpus in zip(self.leases, self._gpus())]}
        if self.lease_pays is not None:
            out["profit"] = {"lease_pays": self.lease_pays, "lease_per_hour": self.lease_per_hour,
                             "floor_per_hour": self.floor_per_hour, "source": self.quote_source,
                             **({"missing": self.quote_missing} if self.quote_missing else {}),
                             **({"reclaim_per_hour": self.reclaim_per_hour} if self.reclaim_per_hour is not None
                                else {}),
                             **({"leased": {"gpus": self.leased_gpus, "of": self.leased_of,
                                            "per_hour": self.leased_per_hour}}
                                if self.leased_per_hour is not None else {})}
        if self.measured is not None:
            out["measured"] = {"algo": self.measured.algo, "mhs": list(self.measured.mhs),
                               "watts": list(self.measured.watts), "samples": self.measured_samples,
                               "at": self.measured_at}
        if self.telemetry is not None:
            out["telemetry"] = telemetry_json(self.telemetry)
        return out

    def _gpus(self) -> tuple[int | None, ...]:
        return (*self.lease_gpus, *(None,) * (len(self.leases) - len(self.lease_gpus)))


def agent_status_from(raw: object) -> AgentStatus:
    """The one reader of the agent's status, decoded: from the rig's status.json (above) and from the
    ``m2p.io/status`` annotation the agent publishes on its node (the dashboard).  Every field is
    checked: the rig, and whoever can annotate its node, may send anything."""
    if not isinstance(raw, dict):
        return AgentStatus(True, "unknown", last_error=f"{STATUS_FILE} unreadable: not a JSON object")
    schema = raw.get("schema", 1)
    if schema != STATUS_SCHEMA:
        return AgentStatus(True, "unknown", last_error=f"{STATUS_FILE}: status schema {str(schema)[:20]!r} is not "
                                                       f"{STATUS_SCHEMA}, which this m2p reads: upgrade m2p")
    listed = raw.get("leases")
    items = [item for item in (listed if isinstance(listed, list) else []) if isinstance(item, dict)]
    leases = tuple(Lease(_field(item, "pod", 300) or "?", _field(item, "since")) for item in items)
    found = raw.get("profit")
    profit: dict[str, Any] = found if isinstance(found, dict) else {}
    lease_pays = profit.get("lease_pays")
    leased = _leased(profit.get("leased"))
    hand_over = raw.get("hand_over")
    return AgentStatus(True, _field(raw, "mode") or "unknown", _field(raw, "since"),
                       _field(raw, "next_change"), _field(raw, "schedule"),
                       _field(raw, "last_error", 300), leases, raw.get("drain") is True,
                       measured_from(raw.get("measured")), lease_pays if isinstance(lease_pays, bool) else None,
                       _number(profit.get("floor_per_hour")), _field(profit, "source"), _field(raw, "mine_at"),
                       _number(profit.get("reclaim_per_hour")), *leased,
                       hand_over=hand_over if hand_over in HAND_OVERS else "",
                       hand_over_why=_field(raw, "hand_over_why", 200), watchdog=_field(raw, "watchdog"),
                       agent_version=_field(raw, "agent_version"), marketplace=_field(raw, "marketplace"),
                       offered=raw.get("offered") is True, lease_per_hour=_number(profit.get("lease_per_hour")),
                       quote_missing=_field(profit, "missing", 200), **_measured_when(raw.get("measured")),
                       lease_gpus=tuple(_count(item.get("gpus")) for item in items),
                       telemetry=telemetry_from(raw.get("telemetry")))


CARD_NUMBERS = ("temperature_c", "fan_percent", "power_w", "power_limit_w", "sm_mhz", "memory_mhz",
                "utilization_percent", "memory_used_mib", "memory_total_mib")
CARD_COUNTS = ("pcie_gen", "pcie_width", "throttle", "ecc_uncorrected")


def telemetry_json(telemetry: Telemetry) -> dict[str, Any]:
    """``telemetry`` as status.json carries it: a card's unread figures are left out (read back as None)."""
    cards = []
    for card in telemetry.cards:
        row: dict[str, Any] = {"index": card.index, "uuid": card.uuid, "name": card.name, "pci": card.pci,
                               "health": card.health, "why": card.why}
        row.update((key, getattr(card, key)) for key in (*CARD_NUMBERS, *CARD_COUNTS)
                   if getattr(card, key) is not None)
        cards.append(row)
    return {"read_at": telemetry.read_at, "error": telemetry.error, "cards": cards}


def telemetry_from(raw: object) -> Telemetry | None:
    """``telemetry`` of status.json, checked field by field (None: absent, or not an object); at most MAX_GPUS
    cards, each with a whole index; an odd figure reads as unread, an odd health as unknown."""
    if not isinstance(raw, dict):
        return None
    listed = raw.get("cards")
    cards = []
    for item in (listed if isinstance(listed, list) else [])[:MAX_GPUS]:
        index = _whole(item.get("index")) if isinstance(item, dict) else None
        if not isinstance(item, dict) or index is None or index >= 2**31:
            continue
        health = item.get("health")
        figures: dict[str, Any] = {key: _number(item.get(key)) for key in CARD_NUMBERS}
        figures.update((key, _whole(item.get(key))) for key in CARD_COUNTS)
        cards.append(Card(index, _field(item, "uuid"), _field(item, "name"), _field(item, "pci", 20),
                          health if health in HEALTHS else "unknown", _field(item, "why", 200), **figures))
    return Telemetry(_field(raw, "read_at"), tuple(cards), _field(raw, "error", 300))


def _whole(value: object) -> int | None:
    """A whole, non-negative number below 2**64 (a bitmask, a count); anything else reads as unread."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64 else None


def _count(value: object) -> int | None:
    """A lease's GPUs: a whole number up to MAX_GPUS; anything else reads as unsaid."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_GPUS else None


def _measured_when(raw: object) -> dict[str, Any]:
    """``measured``'s samples and time, beside the figures (measured_from)."""
    if not isinstance(raw, dict) or measured_from(raw) is None:
        return {}
    samples = raw.get("samples")
    return {"measured_samples": samples if isinstance(samples, int) and not isinstance(samples, bool)
            and 0 <= samples < 2**31 else 0, "measured_at": _field(raw, "at")}


HAND_OVERS = ("per card", "whole rig")


def hand_over_said(hand_over: str) -> str:
    """What a lease does to the miner, in words (m2p status, the dashboard)."""
    return ("the miner mines on the cards no lease holds" if hand_over == "per card"
            else "the miner stops on every card")


def _leased(raw: object) -> tuple[int, int, float | None]:
    """``profit.leased`` ({gpus, of, per_hour}), checked: k of N GPUs, 0 < k <= N <= MAX_GPUS; else none."""
    if not isinstance(raw, dict):
        return 0, 0, None
    gpus, of, per_hour = raw.get("gpus"), raw.get("of"), _number(raw.get("per_hour"))
    if (isinstance(gpus, bool) or isinstance(of, bool) or not isinstance(gpus, int) or not isinstance(of, int)
            or not 0 < gpus <= of <= MAX_GPUS or per_hour is None):
        return 0, 0, None
    return gpus, of, per_hour


def _field(raw: dict[str, Any], key: str, cut: int = 100) -> str:
    """One text field of status.json (a file on the rig): a string, cut; anything else reads as absent."""
    value = raw.get(key)
    return value[:cut] if isinstance(value, str) else ""


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


def node_states(items: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """node name -> (mode, the agent's status) of every node an agent labels (a NodeList's items); an unreadable
    annotation is an empty status.  Read by the dashboard's API sweep and the farm's reclaimer."""
    out = {}
    for node in items:
        meta = node.get("metadata") or {}
        mode = (meta.get("labels") or {}).get(MODE_LABEL)
        if not isinstance(mode, str) or not meta.get("name"):
            continue
        try:
            status = json.loads((meta.get("annotations") or {}).get(STATUS_ANNOTATION) or "{}")
        except (ValueError, RecursionError):  # a rig may annotate its node with JSON nested past the parser's depth
            status = {}
        # A label value is at most 63 characters in Kubernetes; whoever can label the node may still try more.
        out[str(meta["name"])[:253]] = (mode[:63], status if isinstance(status, dict) else {})
    return out
