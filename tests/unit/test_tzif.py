"""m2p's TZif reader (the agent's time zones on python3 3.8) against the standard library's zoneinfo.

Both read the same files of this machine's tzdata; they must agree on every instant: the wall
time, the PEP 495 fold of a repeated hour, the offset, abbreviation and DST share of any wall
time with fold 0 and 1.  Instants run from 1901 to 2191, so the POSIX TZ footer (used after the
file's last transition, 2037 in Debian's files) is compared as well as the listed transitions.
"""

from __future__ import annotations

import struct
import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.timeshare import tzif

# Northern and southern DST, 30- and 45-minute offsets, negative DST (Dublin, Casablanca's Ramadan),
# a zone that skipped a whole day (Apia), Lord Howe's 30-minute DST, and zones without DST.
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "Pacific/Chatham", "America/Sao_Paulo",
         "Asia/Kolkata", "UTC", "Africa/Casablanca", "Europe/Dublin", "America/St_Johns", "Antarctica/Troll",
         "Pacific/Apia", "America/Santiago", "Asia/Tehran", "Australia/Lord_Howe", "Europe/London"]
INSTANTS = st.integers(min_value=-2_140_000_000, max_value=7_000_000_000)


def _utc(seconds: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def _seen(dt: datetime) -> tuple[object, ...]:
    return dt.replace(tzinfo=None), dt.fold, dt.utcoffset(), dt.tzname(), dt.dst()


@settings(max_examples=400, deadline=None)
@given(zone=st.sampled_from(ZONES), when=INSTANTS)
def test_utc_to_wall_time_matches_zoneinfo(zone: str, when: int) -> None:
    at = _utc(when)
    assert _seen(at.astimezone(tzif.ZoneInfo(zone))) == _seen(at.astimezone(zoneinfo.ZoneInfo(zone)))


@settings(max_examples=400, deadline=None)
@given(zone=st.sampled_from(ZONES), when=INSTANTS, shift=st.integers(-7200, 7200), fold=st.sampled_from([0, 1]))
def test_wall_time_offsets_match_zoneinfo(zone: str, when: int, shift: int, fold: int) -> None:
    # Wall times near real ones, so that gaps and repeated hours come up often.
    wall = _utc(when).astimezone(zoneinfo.ZoneInfo(zone)).replace(tzinfo=None) + timedelta(seconds=shift)
    ours = wall.replace(tzinfo=tzif.ZoneInfo(zone), fold=fold)
    theirs = wall.replace(tzinfo=zoneinfo.ZoneInfo(zone), fold=fold)
    assert (ours.utcoffset(), ours.tzname(), ours.dst()) == (theirs.utcoffset(), theirs.tzname(), theirs.dst())


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York", "Australia/Sydney"])
def test_every_transition_of_a_decade_and_its_fold(zone: str) -> None:
    ours, theirs = tzif.ZoneInfo(zone), zoneinfo.ZoneInfo(zone)
    start = int(datetime(2030, 1, 1, tzinfo=UTC).timestamp())
    step, changes = 6 * 3600, 0
    for when in range(start, start + 10 * 366 * 86400, step):  # across 2037, where the footer takes over
        at, later = _utc(when), _utc(when + step)
        assert _seen(at.astimezone(ours)) == _seen(at.astimezone(theirs)), at
        if at.astimezone(theirs).utcoffset() != later.astimezone(theirs).utcoffset():
            changes += 1
            for minute in range(0, step, 300):  # the transition's own hours, five minutes apart
                t = at + timedelta(seconds=minute)
                assert _seen(t.astimezone(ours)) == _seen(t.astimezone(theirs)), t
    assert changes == 20  # two a year: the decade's transitions were all met


def test_zone_files_are_found_on_pythontzpath(tmp_path, monkeypatch) -> None:
    (tmp_path / "Mars").mkdir()
    (tmp_path / "Mars" / "Olympus").write_bytes(open(tzif.find("Asia/Kolkata"), "rb").read())
    monkeypatch.setenv("PYTHONTZPATH", f"relative/ignored:{tmp_path}")
    assert _utc(0).astimezone(tzif.ZoneInfo("Mars/Olympus")).utcoffset() == timedelta(hours=5, minutes=30)
    with pytest.raises(tzif.ZoneInfoNotFoundError):
        tzif.ZoneInfo("Asia/Tokyo")  # not on the path given (and not loaded before: zones are cached)


@pytest.mark.parametrize("key", ["", "/etc/passwd", "../../etc/passwd", "Europe/../../x"])
def test_names_that_are_not_zone_names_are_refused(key: str) -> None:
    with pytest.raises(ValueError):
        tzif.ZoneInfo(key)


def test_a_file_that_is_not_tzif_is_a_value_error(tmp_path, monkeypatch) -> None:
    (tmp_path / "Broken").write_bytes(b"TZif2" + b"\0" * 15 + struct.pack(">6l", 0, 0, 0, 99, 1, 4))
    (tmp_path / "Text").write_text("Europe/Berlin\n")
    monkeypatch.setenv("PYTHONTZPATH", str(tmp_path))
    for key in ("Broken", "Text"):
        with pytest.raises(ValueError, match=f"time zone {key}: unreadable TZif file"):
            tzif.ZoneInfo(key)


@pytest.mark.parametrize(("rule", "year", "expected"), [
    ("CET-1CEST,M3.5.0,M10.5.0/3", 2027, ["2027-03-28T01:00:00+00:00", "2027-10-31T01:00:00+00:00"]),
    ("EST5EDT,M3.2.0,M11.1.0", 2026, ["2026-03-08T07:00:00+00:00", "2026-11-01T06:00:00+00:00"]),
    # Southern hemisphere: DST ends in April and starts in October.
    ("AEST-10AEDT,M10.1.0,M4.1.0/3", 2040, ["2040-03-31T16:00:00+00:00", "2040-10-06T16:00:00+00:00"]),
    # Julian days without Feb 29, zero-based days with it, and hours past 24 (RFC 8536's extension).
    ("<+03>-3<+04>,J60/0,300/26", 2028, ["2028-02-29T21:00:00+00:00", "2028-10-27T22:00:00+00:00"]),
])
def test_posix_footer_rules(rule: str, year: int, expected: list[str]) -> None:
    found = [_utc(t[0]).isoformat() for t in tzif.PosixRule(rule).transitions(year)]
    assert found == expected
