"""Per-card telemetry and health on the rig: every card's figures once per ``telemetry_interval_s`` (never per
tick; card_read.py: NVML kept open where it opens, else one ``nvidia-smi --query-gpu`` call) and the kernel log's
new NVRM Xid lines, into rigside/status.py's Card records, each card ``ok``, ``hot`` (over the owner's limit),
``lost`` (NVML or nvidia-smi: "GPU is lost") or ``xid`` (an Xid within XID_HOLD_S).  Reading only: what the health
does is decide.py's (off the market) and rules.py's (the gate).

The cost: through NVML a reading is a few dozen calls of microseconds each; nvidia-smi is a process of its own
that initialises NVML at every call (tens of ms of CPU, a good part of a second on a weak CPU), so the fallback
reads every SMI_EVERY-th interval (docs/benchmarks.md).  The kernel log is read from ``/dev/kmsg``, kept open
without blocking: each read returns one record, so an interval costs a read per new record and one that finds
none (``journalctl -k --since`` would start a process every interval).  Py38."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from miner2provider.agent import nvml
from miner2provider.agent.card_read import Nvml, by_nvidia_smi, pci_key
from miner2provider.agent.sight import iso
from miner2provider.rigside.status import Card, Telemetry

# An Xid keeps its card off the market this long after it was logged: one Xid that does not come again returns
# the card; a card that keeps throwing them (a riser, a dying card) stays off (NVIDIA's Xid catalogue: most Xids a
# card throws under load are its hardware's, power's or driver's, and end a tenant's job).
XID_HOLD_S = 3600.0
# Xids a program's own fault raises (NVIDIA's Xid catalogue, docs.nvidia.com/deploy/xid-errors: 13 graphics engine
# exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive cleanup after a process ended; each
# "user application error" among its causes, the immediate action RESTART_APP): they say nothing of the card, and
# held against it they would let any tenant take the rig off the market for an hour with a bad kernel.
PROGRAM_XIDS = frozenset({13, 31, 43, 45})
# A hot card comes back once this much under the limit: temperatures wander by a few degrees, and the node's
# cordon should not follow every one of them.
HOT_BACK_C = 5.0
# The status (status.json on a USB stick, the node's annotation in the farm's datastore) takes new figures at most
# this often; a change of a card's health, or of the reading's error, at once.  Power and clocks change at every
# reading: published every 30 s they would rewrite both 2,880 times a day.
PUBLISH_S = 300.0
UNKNOWN_CARD = "?"  # in unhealthy(): a lost card never listed (its UUID unknown)
# Without NVML, nvidia-smi reads every SMI_EVERY-th interval (60 s by default): each call costs the stand-in's
# 60-odd ms of CPU here and a real one's tens to hundreds, 0.2 points of the agent's 0.5 % idle budget at 30 s.
SMI_EVERY = 2
XID = re.compile(rb"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): ([0-9]{1,9})")
MAX_READS = 5000  # records read per interval (the first read meets the whole buffer since boot)


@dataclass
class KernelLog:
    """The kernel log's new NVRM Xid lines, from a descriptor kept open (``/dev/kmsg``; a sandbox rig's stand-in
    writes a file in its format): (PCI address, Xid, seconds since boot) each."""

    path: str
    fd: int | None = None
    rest: bytes = b""
    error: str = ""

    def xids(self) -> list[tuple[str, int, float | None]]:
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError as exc:
                self.error = f"kernel log {self.path}: {exc.strerror}: Xid errors unseen"
                return []
        chunks = [self.rest]
        for _ in range(MAX_READS):
            try:
                chunk = os.read(self.fd, 8192)
            except BlockingIOError:
                break  # no new record
            except BrokenPipeError:
                continue  # records overwritten in the ring buffer before this read: the next one follows
            if not chunk:
                break  # the end of a file
            chunks.append(chunk)
        *lines, self.rest = b"".join(chunks).split(b"\n")
        out = []
        for line in lines:
            match = XID.search(line)
            if match is not None:
                head = line.split(b";", 1)[0].split(b",")  # /dev/kmsg: priority,sequence,usec,flags;text
                usec = head[2] if len(head) > 2 and head[2].isdigit() else b""
                out.append((pci_key(match.group(1).decode()), int(match.group(2)),
                            int(usec) / 1e6 if usec else None))
        return out


@dataclass
class CardWatch:
    """The cards as last read and their health, read again once ``interval_s`` has passed (monotonic)."""

    interval_s: float
    limit_c: float | None  # the owner's temperature limit (None: no temperature rule)
    kernel: KernelLog
    info_dir: str = nvml.GPU_INFO_DIR
    cards: tuple[Card, ...] = ()
    error: str = ""
    _due: float = float("-inf")
    _lost: set[str] = field(default_factory=set)  # PCI addresses said lost (until the agent restarts)
    _xids: dict[str, tuple[int, float]] = field(default_factory=dict)  # PCI address -> (last Xid, when: monotonic)
    _hot: set[str] = field(default_factory=set)  # UUIDs over the limit (back once HOT_BACK_C under it)
    card_map: dict[int, str] | None = None  # device minor -> UUID (the driver's), for the gate's records
    leased: dict[str, frozenset[str]] = field(default_factory=dict)  # pod -> the cards its containers ran on
    shown: tuple[Telemetry | None, float, tuple[str, ...]] = (None, float("-inf"), ())  # (status, when, health)
    run: Callable[..., Any] = subprocess.run  # nvidia-smi's runner (the tests' seam)
    nvml: Nvml = field(default_factory=Nvml)  # NVML, kept open between readings (the tests give a fake module)

    def read(self, mono: float, wall: float) -> None:
        if mono < self._due:
            return
        opened = self.nvml.open()
        self._due = mono + self.interval_s * (1 if opened else SMI_EVERY)
        try:
            rows, lost, self.error = self.nvml.read(self.cards) if opened else by_nvidia_smi(self.run)
        except Exception as exc:  # noqa: BLE001 - a reading never ends the tick: said, the cards kept as last read
            rows, lost, self.error = [], set(), f"NVML: {type(exc).__name__}: {exc}"[:200]
        self._lost |= lost
        if rows:
            self.cards = tuple(rows)
        for pci, xid, at in self.kernel.xids():
            if xid not in PROGRAM_XIDS:
                self._xids[pci] = (xid, mono if at is None or at > mono else at)
        self.cards = tuple(self._judge(card, mono) for card in self._with_lost())
        error = "; ".join(filter(None, (self.error, self.kernel.error)))
        health = (error, *(f"{card.uuid} {card.health}" for card in self.cards))
        if health != self.shown[2] or mono - self.shown[1] >= PUBLISH_S:
            self.shown = (Telemetry(iso(wall), self.cards, error), mono, health)

    def _with_lost(self) -> list[Card]:
        """The cards as last listed, and a lost card never listed (its UUID unknown)."""
        known = {pci_key(card.pci) for card in self.cards}
        extra = sorted(pci for pci in self._lost if pci not in known)
        return [*self.cards, *(Card(len(self.cards) + n, UNKNOWN_CARD, pci=pci) for n, pci in enumerate(extra))]

    def _judge(self, card: Card, mono: float) -> Card:
        pci = pci_key(card.pci)
        xid = self._xids.get(pci)
        temperature = card.temperature_c
        hot = self.limit_c is not None and temperature is not None and (
            temperature > self.limit_c or (card.uuid in self._hot and temperature > self.limit_c - HOT_BACK_C))
        (self._hot.add if hot else self._hot.discard)(card.uuid)
        if pci in self._lost:
            health, why = "lost", "GPU is lost (fallen off the bus?): back after a reboot"
        elif xid is not None and mono - xid[1] < XID_HOLD_S:
            health, why = "xid", f"Xid {xid[0]} in the kernel log (NVRM), within the last {XID_HOLD_S / 3600:g} h"
        elif hot:
            health, why = "hot", f"{temperature:g} °C, over the owner's limit of {self.limit_c:g} °C"
        else:
            health, why = "ok", ""
        return replace(card, health=health, why=why)

    def unhealthy(self) -> frozenset[str]:
        """The cards (UUIDs; UNKNOWN_CARD for a lost card never listed) that are not ``ok``."""
        return frozenset(card.uuid for card in self.cards if card.health != "ok")

    def said(self) -> tuple[str, ...]:
        return tuple(f"card {card.index} ({card.uuid}) {card.health}: {card.why}" for card in self.cards
                     if card.health != "ok")

    def status(self) -> Telemetry | None:
        """The cards as the status shows them: read again at most every PUBLISH_S, at once on a change of health."""
        return self.shown[0]

    def at_gate(self, waiting: list[dict[str, Any]], gated: list[dict[str, Any]], listed: set[str] | None) -> str:
        """Why some lease's container at the gate must not get its cards ("": every one may)."""
        return self.refusals(waiting, gated, listed)[0]

    def refusals(self, waiting: list[dict[str, Any]], gated: list[dict[str, Any]],
                 listed: set[str] | None) -> tuple[str, tuple[int, ...]]:
        """The lease containers at the gate (their places in ``waiting``) that must not get their cards, and why:
        one of their cards is not ``ok`` and no container of its pod ran on it through the gate (``gated``,
        remembered while the API lists the pod: a lease's container restarting keeps its cards, a lease is never
        cut), or their cards are unknown while some card is not ``ok``.  The others wait as usual: one lease
        asking for a sick card never holds back a lease asking for healthy ones."""
        if self.card_map is None and (waiting or gated):
            self.card_map = nvml.card_uuids(self.info_dir)
        for record in gated:
            pod = str(record.get("pod") or "")
            self.leased[pod] = self.leased.get(pod, frozenset()) | (self._cards(record) - {UNKNOWN_CARD})
        if listed is not None:
            self.leased = {pod: cards for pod, cards in self.leased.items() if pod in listed}
        bad = self.unhealthy()
        refused = []
        for n, record in enumerate(waiting if bad else []):
            new = self._cards(record) - self.leased.get(str(record.get("pod") or ""), frozenset())
            if new & bad or UNKNOWN_CARD in new:
                refused.append(n)
        if not refused:
            return "", ()
        return ("a card of this rig is unhealthy (" + "; ".join(self.said())[:300] + "): m2p hands it to no lease",
                tuple(refused))

    def _cards(self, record: dict[str, Any]) -> frozenset[str]:
        """A gate record's cards by UUID (its device minors, the driver's map); UNKNOWN_CARD for one unknown."""
        minors = record.get("gpus")
        if not isinstance(minors, list) or not minors:
            return frozenset({UNKNOWN_CARD})
        return frozenset((self.card_map or {}).get(m, UNKNOWN_CARD) if isinstance(m, int) else UNKNOWN_CARD
                         for m in minors)
