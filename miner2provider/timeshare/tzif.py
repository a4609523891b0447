"""Time zones from the rig's own TZif files, for a python3 without ``zoneinfo`` (3.8).

HiveOS 0.6-227 runs Ubuntu 20.04, whose python3 is 3.8: no ``zoneinfo`` (3.9+), and rigs are
offline, so nothing can be installed.  This reads the compiled zone files (RFC 8536: the
64-bit block of a version 2+ file, or the 32-bit block of a version 1 file, and the POSIX TZ
footer for instants after the last listed transition) and behaves like ``zoneinfo.ZoneInfo``
where the agent needs it: ``astimezone`` with PEP 495 ``fold`` set on a repeated hour, and
``utcoffset`` of a wall time (fold 0: the offset before a transition, fold 1: the one after).
Files are looked up on ``PYTHONTZPATH`` as ``zoneinfo`` does.  Kept Python 3.8-compatible
(``vermin --target=3.8`` in scripts/test); tests compare it with ``zoneinfo`` instant by instant.
"""

from __future__ import annotations

import bisect
import calendar
import os
import re
import struct
from datetime import datetime, timedelta, tzinfo
from typing import Callable, Tuple  # typing.Tuple: the alias below is evaluated, on 3.8 too

DEFAULT_TZPATH = ("/usr/share/zoneinfo", "/usr/lib/zoneinfo", "/usr/share/lib/zoneinfo", "/etc/zoneinfo")
EPOCH = datetime(1970, 1, 1)
_HEADER = struct.Struct(">4sc15x6l")
# A transition: (UTC seconds, offset before, offset after, abbreviation after, DST seconds after).
Transition = Tuple[int, int, int, str, int]


class ZoneInfoNotFoundError(KeyError):
    """No TZif file for the key (the name zoneinfo gives the same failure)."""


def tz_path() -> list[str]:
    configured = os.environ.get("PYTHONTZPATH")
    if configured is None:
        return list(DEFAULT_TZPATH)
    return [p for p in configured.split(os.pathsep) if os.path.isabs(p)]


def find(key: str) -> str:
    if not key or os.path.isabs(key) or ".." in key.split("/") or "\0" in key:
        raise ValueError(f"{key!r} is not a time zone name")
    for folder in tz_path():
        path = os.path.join(folder, key)
        if os.path.isfile(path):
            return path
    raise ZoneInfoNotFoundError(key)


# -- the POSIX TZ footer ----------------------------------------------------------------------

_NAME = r"(?:<[+\-0-9A-Za-z]+>|[A-Za-z]{3,})"
_OFFSET = r"[+\-]?\d{1,3}(?::\d{1,2}){0,2}"
_DATE = r"(?:J\d{1,3}|\d{1,3}|M\d{1,2}\.\d\.\d)"
_POSIX = re.compile(
    rf"^(?P<std>{_NAME})(?P<stdoff>{_OFFSET})"
    rf"(?:(?P<dst>{_NAME})(?P<dstoff>{_OFFSET})?"
    rf"(?:,(?P<start>{_DATE})(?:/(?P<stime>{_OFFSET}))?,(?P<end>{_DATE})(?:/(?P<etime>{_OFFSET}))?)?)?$"
)


def _seconds(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    parts = [int(p) for p in text.lstrip("+-").split(":")] + [0, 0]
    return sign * (parts[0] * 3600 + parts[1] * 60 + parts[2])


def _day_of_year(rule: str, year: int) -> int:
    """Zero-based day of ``year`` that a POSIX rule date names."""
    leap = calendar.isleap(year)
    if rule.startswith("J"):  # 1..365, February 29 never counted
        day = int(rule[1:])
        return day - 1 + (1 if leap and day >= 60 else 0)
    if rule.startswith("M"):
        month, week, weekday = (int(p) for p in rule[1:].split("."))
        first = datetime(year, month, 1)
        # POSIX weekday 0 is Sunday; Python's Monday is 0.
        day = 1 + (weekday - (first.weekday() + 1) % 7) % 7 + (week - 1) * 7
        days_in_month = calendar.monthrange(year, month)[1]
        while day > days_in_month:
            day -= 7
        return (datetime(year, month, day) - datetime(year, 1, 1)).days
    return int(rule)  # 0..365, leap days counted


class PosixRule:
    def __init__(self, text: str) -> None:
        match = _POSIX.match(text)
        if not match:
            raise ValueError(f"unreadable POSIX TZ rule {text!r}")
        self.std_abbr = match["std"].strip("<>")
        self.std = -_seconds(match["stdoff"])  # POSIX offsets count west of Greenwich
        self.dst_abbr = (match["dst"] or "").strip("<>")
        self.dst = -_seconds(match["dstoff"]) if match["dstoff"] else self.std + 3600
        self.start, self.end = match["start"], match["end"]
        self.start_time = _seconds(match["stime"] or "2")
        self.end_time = _seconds(match["etime"] or "2")
        if self.dst_abbr and not self.start:  # POSIX's implementation-defined default: US rules
            self.start, self.end = "M3.2.0", "M11.1.0"

    def transitions(self, year: int) -> list[Transition]:
        if not self.dst_abbr:
            return []
        year_start = (datetime(year, 1, 1) - EPOCH).days * 86400
        to_dst = year_start + _day_of_year(self.start, year) * 86400 + self.start_time - self.std
        to_std = year_start + _day_of_year(self.end, year) * 86400 + self.end_time - self.dst
        return sorted([(to_dst, self.std, self.dst, self.dst_abbr, self.dst - self.std),
                       (to_std, self.dst, self.std, self.std_abbr, 0)])

    def first(self) -> tuple[int, str, int]:
        return self.std, self.std_abbr, 0


# -- the zone -----------------------------------------------------------------------------------


def _parse(data: bytes) -> tuple[list[Transition], tuple[int, str, int], PosixRule | None]:
    magic, version, isut, isstd, leap, timecnt, typecnt, charcnt = _HEADER.unpack_from(data)
    if magic != b"TZif":
        raise ValueError("not a TZif file")
    offset, size = _HEADER.size, 4
    if version >= b"2":  # skip the 32-bit block: the 64-bit one follows its own header
        offset += timecnt * 5 + typecnt * 6 + charcnt + leap * 8 + isstd + isut
        _, _, isut, isstd, leap, timecnt, typecnt, charcnt = _HEADER.unpack_from(data, offset)
        offset, size = offset + _HEADER.size, 8
    times = struct.unpack_from(f">{timecnt}{'q' if size == 8 else 'l'}", data, offset)
    offset += timecnt * size
    indices = data[offset:offset + timecnt]
    offset += timecnt
    types = [struct.unpack_from(">lBB", data, offset + 6 * i) for i in range(typecnt)]
    offset += typecnt * 6
    chars = data[offset:offset + charcnt]
    offset += charcnt + leap * (size + 4) + isstd + isut

    def abbreviation(i: int) -> str:
        start = types[i][2]
        return chars[start:chars.index(b"\0", start)].decode("ascii", "replace")

    # TZif files do not record how much of an offset is DST: as zoneinfo does, a DST type's share is
    # its offset less that of a standard type next to it in time, else one hour.
    dst = [0] * typecnt
    for i, index in enumerate(indices):
        if not types[index][1] or dst[index]:
            continue
        for near in (indices[i - 1] if i > 0 else None, indices[i + 1] if i + 1 < timecnt else None):
            if near is not None and not types[near][1] and types[index][0] != types[near][0]:
                dst[index] = types[index][0] - types[near][0]
                break
    dst = [share or (3600 if isdst else 0) for share, (_, isdst, _) in zip(dst, types)]
    first = (types[0][0], abbreviation(0), dst[0])
    transitions: list[Transition] = []
    before = first[0]
    for when, index in zip(times, indices):
        transitions.append((when, before, types[index][0], abbreviation(index), dst[index]))
        before = types[index][0]
    rule = None
    if version >= b"2":
        footer = data[offset:].strip(b"\n").decode("ascii", "replace")
        rule = PosixRule(footer) if footer else None
    if rule is not None and not transitions:
        first = rule.first()
    return transitions, first, rule


class ZoneInfo(tzinfo):
    """A zone read from a TZif file; what ``zoneinfo.ZoneInfo(key)`` gives on Python 3.9+."""

    _cache: dict[str, ZoneInfo] = {}

    def __new__(cls, key: str) -> ZoneInfo:
        if key not in cls._cache:
            zone = super().__new__(cls)
            zone._load(key)
            cls._cache[key] = zone
        return cls._cache[key]

    def _load(self, key: str) -> None:
        self.key = key
        with open(find(key), "rb") as fh:
            try:
                self._explicit, self._first, self._rule = _parse(fh.read())
            except (struct.error, ValueError, IndexError) as exc:
                raise ValueError(f"time zone {key}: unreadable TZif file ({exc})") from None
        self._last = self._explicit[-1][0] if self._explicit else None

    def __repr__(self) -> str:
        return f"ZoneInfo(key={self.key!r})"

    def __str__(self) -> str:
        return self.key

    # The transitions around an instant: the file's own, or after its last one the rule's (years
    # around the instant, starting with the file's last transition so that nothing falls between).
    def _table(self, when: int) -> list[Transition]:
        if self._rule is None or (self._last is not None and when < self._last):
            return self._explicit
        year = (EPOCH + timedelta(seconds=when)).year
        later = [t for y in (year - 1, year, year + 1) for t in self._rule.transitions(y)
                 if self._last is None or t[0] > self._last]
        return self._explicit[-1:] + later

    def _find(self, when: int, edge: Callable[[Transition], int]) -> Transition | None:
        """The last transition whose ``edge`` is at or before ``when`` (None: before them all)."""
        for table in (self._table(when), self._explicit):
            i = bisect.bisect_right([edge(t) for t in table], when) - 1
            if i >= 0:
                return table[i]
        return None

    def _at_utc(self, when: int) -> tuple[int, str, int, int]:
        """(offset, abbreviation, DST seconds, fold) at UTC second ``when``."""
        found = self._find(when, lambda t: t[0])
        if found is None:
            return self._first[0], self._first[1], self._first[2], 0
        start, before, after, abbr, dst = found
        fold = 1 if before > after and when - start < before - after else 0
        return after, abbr, dst, fold

    def _at_local(self, dt: datetime) -> tuple[int, str, int]:
        local = (dt.replace(tzinfo=None) - EPOCH) // timedelta(seconds=1)
        # A transition's gap or repeated hour begins on the wall clock at start + the smaller offset.
        found = self._find(local, lambda t: t[0] + min(t[1], t[2]))
        if found is None:
            return self._first
        start, before, after, abbr, dst = found
        if local < start + max(before, after) and dt.fold == 0:
            return self._at_utc(start - 1)[:3]  # fold 0 in a gap or a repeated hour: the offset before
        return after, abbr, dst

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        if dt is None:
            return None
        return timedelta(seconds=self._at_local(dt)[0])

    def tzname(self, dt: datetime | None) -> str | None:
        if dt is None:
            return None
        return self._at_local(dt)[1]

    def dst(self, dt: datetime | None) -> timedelta | None:
        if dt is None:
            return None
        return timedelta(seconds=self._at_local(dt)[2])

    def fromutc(self, dt: datetime) -> datetime:
        if dt.tzinfo is not self:
            raise ValueError("fromutc: dt.tzinfo is not self")
        when = (dt.replace(tzinfo=None) - EPOCH) // timedelta(seconds=1)
        offset, _, _, fold = self._at_utc(when)
        return (dt + timedelta(seconds=offset)).replace(fold=fold)
