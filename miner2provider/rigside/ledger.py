"""The rig's ledger: what the rig did over time, one line per change (issue 16's history starts here).

The agent appends a JSON line each time its mode changes (``mining``, ``idle-mining``, ``leasing``,
``draining``) or it goes blind or sees again (the Kubernetes API unreachable), never per tick:
rigs run from USB sticks, so writes stay bounded (one short line and one fsync per change).  A
line says when the mode began; its end is the next line's start.  Leases are named by their pod
(``namespace/name``) and nothing else of the tenant's.  Where the agent measures the miner (HiveOS:
measure.py), each line also carries the rolling average at that moment (``algo``, ``mhs`` per GPU): a
record of what mining was worth when the rig switched.

The file lives in the agent's state directory and survives reboots.  Past ``MAX_BYTES`` it is
rotated once (``ledger.1.jsonl``; the older one is dropped), so it never grows without bound.
Reading tolerates what a rig with flaky power leaves: a torn last line (the write was cut) and a
clock that steps back (a rig without an RTC battery boots in the past until NTP answers).
Python 3.8 (the oldest python3 the agent runs on).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

LEDGER = "ledger.jsonl"
ROTATED = "ledger.1.jsonl"
MAX_GPUS = 64  # measured hashrates in one line: more is not a rig
ALGO_CHARS = 32  # an algorithm's name is short; anything longer is cut, never trusted as a key
MAX_BYTES = 256 * 1024  # about 2,000 changes per file; a rig that switches hourly fills one in a month
# A time no clock gives (json reads Infinity, NaN and 1e300 as floats): before the epoch or from 2100 on, the line is
# not believed.  The dashboard sums a ledger by day, and a line in year 33,658 would be millions of days.
LATEST_AT = 4_102_444_800.0  # 2100-01-01 UTC


@dataclass(frozen=True)
class Entry:
    at: float  # epoch seconds: when this mode began
    mode: str
    blind: bool = False  # the agent could not read the Kubernetes API
    gpus: int = 0
    leases: tuple[str, ...] = ()  # namespace/name of the lease pods on the node
    algo: str = ""  # the miner's measured average when the line was written (measure.py), if any
    mhs: tuple[float, ...] = ()
    leased: int = 0  # the GPUs the leases hold (their pods' limits); lines before it: all ``gpus`` when leased
    mining: int = 0  # the GPUs the miner mines on beside the leases (per-card hand-over); 0: none mine

    def line(self) -> str:
        data: dict[str, object] = {"at": round(self.at, 3), "mode": self.mode, "gpus": self.gpus}
        if self.blind:
            data["blind"] = True
        if self.leases:
            data["leases"] = list(self.leases)
            data["leased"] = self.leased
            if self.mining:
                data["mining"] = self.mining
        if self.mhs:
            data["algo"], data["mhs"] = self.algo, [round(v, 3) for v in self.mhs]
        return json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"

    def same_state(self, other: Entry | None) -> bool:
        return other is not None and (self.mode, self.blind, self.leases, self.leased, self.mining) == (
            other.mode, other.blind, other.leases, other.leased, other.mining)


@dataclass(frozen=True)
class Span:
    mode: str
    start: float
    end: float
    blind: bool
    gpus: int
    leases: tuple[str, ...]
    leased: int = 0
    mining: int = 0

    @property
    def seconds(self) -> float:
        return self.end - self.start


def append(directory: Path, entry: Entry, max_bytes: int = MAX_BYTES) -> None:
    """Add one line; rotate first when it would pass ``max_bytes``.  A torn last line (a write cut
    by power loss) is ended first, so the new line never joins it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LEDGER
    line = entry.line().encode()
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        size = 0
    if size and size + len(line) > max_bytes:
        os.replace(path, directory / ROTATED)
        size = 0
    with open(path, "ab") as f:
        if size and not _ends_with_newline(path):
            f.write(b"\n")
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def parse(text: str) -> tuple[list[Entry], int]:
    """Entries in the order written, and how many lines were unreadable (torn or foreign).  A time
    earlier than the line before (the clock stepped back) is read as that earlier line's time: the
    change happened after it, whatever the clock said."""
    entries: list[Entry] = []
    bad = 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        entry = _entry(raw)
        if entry is None:
            bad += 1
            continue
        if entries and entry.at < entries[-1].at:
            entry = replace(entry, at=entries[-1].at)
        entries.append(entry)
    return entries, bad


def _entry(raw: str) -> Entry | None:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    at, mode, gpus = data.get("at"), data.get("mode"), data.get("gpus", 0)
    leases = data.get("leases", [])
    if (isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or not 0 <= at < LATEST_AT
            or not isinstance(mode, str) or not mode
            or isinstance(gpus, bool) or not isinstance(gpus, int) or not isinstance(leases, list)
            or not all(isinstance(x, str) for x in leases)):
        return None
    leased = data.get("leased", gpus if leases else 0)  # a line from before the count: the whole rig
    if isinstance(leased, bool) or not isinstance(leased, int) or not 0 <= leased <= max(gpus, 0):
        leased = gpus if leases else 0
    mining = data.get("mining", 0)  # never more than the cards no lease holds
    if isinstance(mining, bool) or not isinstance(mining, int) or not leases or not 0 <= mining <= gpus - leased:
        mining = 0
    mhs, algo = data.get("mhs", []), data.get("algo", "")
    if (not isinstance(mhs, list) or len(mhs) > MAX_GPUS or not isinstance(algo, str)
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in mhs)):
        mhs, algo = [], ""  # a measurement the line cannot vouch for: the line itself still counts
    return Entry(float(at), mode[:32], data.get("blind") is True, gpus, tuple(x[:300] for x in leases),
                 algo[:ALGO_CHARS] if mhs else "", tuple(float(v) for v in mhs), leased if leases else 0, mining)


def read(directory: Path) -> tuple[list[Entry], int]:
    """The rotated file then the current one, as one ledger."""
    text = ""
    for name in (ROTATED, LEDGER):
        try:
            chunk = (directory / name).read_text(errors="replace")
        except FileNotFoundError:
            continue
        text += chunk if chunk.endswith("\n") or not chunk else chunk + "\n"
    return parse(text)


def spans(entries: Iterable[Entry], now: float) -> list[Span]:
    """Each entry until the next one; the last until ``now`` (never before it began)."""
    listed = list(entries)
    out: list[Span] = []
    for entry, following in zip(listed, listed[1:] + [None]):
        end = following.at if following is not None else max(now, entry.at)
        out.append(Span(entry.mode, entry.at, end, entry.blind, entry.gpus, entry.leases, entry.leased, entry.mining))
    return out


def seconds_by_mode(all_spans: Iterable[Span], start: float, end: float) -> dict[str, float]:
    """Seconds spent in each mode within [start, end): every span clipped to the window."""
    totals: dict[str, float] = {}
    for span in all_spans:
        overlap = min(span.end, end) - max(span.start, start)
        if overlap > 0:
            totals[span.mode] = totals.get(span.mode, 0.0) + overlap
    return totals
