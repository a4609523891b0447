"""Schedules: validation with file:line, what they ask for when, and daylight saving time."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.cli import main
from miner2provider.core.errors import ScheduleError
from miner2provider.timeshare.model import load, parse
from miner2provider.timeshare.policy import desired_at, next_change, timeline

BERLIN = ZoneInfo("Europe/Berlin")
NIGHTS = """\
timezone: Europe/Berlin
policy: fixed
default: mine
windows:
  - days: mon-fri
    from: "18:00"
    to: "08:00"
    mode: lease
  - days: weekends
    from: 00:00
    to: "24:00"
    mode: lease
lease_grace: 2h
min_switch_interval: 10m
"""


def at(text):
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN)


def test_a_fixed_schedule_leases_nights_and_weekends():
    s = parse(NIGHTS, "farm.yml")
    assert (s.policy, s.lease_grace_s, s.min_switch_interval_s) == ("fixed", 7200.0, 600.0)
    assert desired_at(s, at("2026-11-23T12:00")).label == "mine"  # Monday noon
    assert desired_at(s, at("2026-11-23T19:00")).label == "lease"
    assert desired_at(s, at("2026-11-24T07:59")).label == "lease"  # crossed midnight
    assert desired_at(s, at("2026-11-28T12:00")).label == "lease"  # Saturday
    assert desired_at(s, at("2026-11-30T07:00")).label == "mine"  # Monday early: Sunday is not mon-fri
    assert next_change(s, at("2026-11-23T12:00")) == at("2026-11-23T18:00").astimezone(UTC)


def test_policies_map_windows_to_offer_and_idle_mining():
    lease_first = parse("timezone: UTC\npolicy: lease-first\nwindows:\n"
                        "  - {days: daily, from: '20:00', to: '23:00', mode: mine}\n")
    assert (desired_at(lease_first, at("2026-11-23T12:00")).offered, desired_at(lease_first, at("2026-11-23T12:00")).idle_mining) == (True, True)
    assert desired_at(lease_first, datetime(2026, 11, 23, 21, tzinfo=UTC)).label == "mine"
    mine_first = parse("timezone: UTC\npolicy: mine-first\nwindows:\n"
                       "  - {days: sat, from: '00:00', to: '24:00', mode: lease}\n")
    assert desired_at(mine_first, datetime(2026, 11, 28, 9, tzinfo=UTC)).label == "lease (idle mining)"
    assert desired_at(mine_first, datetime(2026, 11, 27, 9, tzinfo=UTC)).label == "mine"


@pytest.mark.parametrize("text, line, message", [
    ("timezone: Mars/Olympus\npolicy: fixed\n", 1, "unknown timezone 'Mars/Olympus'"),
    ("timezone: UTC\npolicy:\n", 2, "policy is empty"),
    ("timezone: UTC\npolicy: greedy\n", 2, "policy is 'greedy'"),
    ("timezone: UTC\npolicy: fixed\nwindows:\n  - days: mon\n    from: '25:00'\n    to: '08:00'\n    mode: lease\n",
     5, "time '25:00'"),
    ("timezone: UTC\npolicy: fixed\nwindows:\n  - days: mon\n    from: '08:00'\n    to: '08:00'\n    mode: lease\n",
     6, "an empty window"),
    ("timezone: UTC\npolicy: fixed\nwindows:\n  - {days: mon-fri, from: '18:00', to: '08:00', mode: lease}\n"
     "  - {days: tue, from: '06:00', to: '09:00', mode: mine}\n", 5,
     "overlaps the window at line 4 (lease) on tue from 06:00"),
    ("timezone: UTC\npolicy: fixed\nwindows:\n  - {days: sun, from: '22:00', to: '02:00', mode: lease}\n"
     "  - {days: mon, from: '01:00', to: '03:00', mode: mine}\n", 5, "on mon from 01:00"),  # across the week's end
    ("timezone: UTC\npolicy: lease-first\nwindows:\n  - {days: mon, from: '01:00', to: '03:00', mode: lease}\n",
     4, "under policy lease-first a window's mode is mine"),
    ("timezone: UTC\npolicy: fixed\nwindows:\n  - {days: funday, from: '01:00', to: '03:00', mode: lease}\n",
     4, "days 'funday'"),
    ("timezone: UTC\npolicy: fixed\nlease_grace: soon\n", 3, "duration 'soon'"),
    ("timezone: UTC\npolicy: fixed\nmin_switch_interval: forever\n", 3, "duration 'forever'"),
    ("timezone: UTC\npolicy: mine-first\ndefault: lease\n", 3, "default applies to policy fixed only"),
    ("timezone: UTC\npolicy: fixed\nwindow: []\n", 3, "unknown schedule key 'window'"),
    ("timezone: UTC\npolicy: fixed\nwindows:\n  - {days: mon, from: '01:00', mode: lease}\n", 4, "window lacks to"),
    ("timezone: UTC\npolicy: [fixed\n", 3, "YAML syntax error"),  # noticed at the end of the file
])
def test_mistakes_are_one_line_with_file_and_line(text, line, message):
    with pytest.raises(ScheduleError) as err:
        parse(text, "farm.yml")
    assert err.value.where == f"farm.yml:{line}", str(err.value)
    assert message in err.value.message


def test_agreeing_overlaps_are_fine():
    s = parse("timezone: UTC\npolicy: fixed\nwindows:\n  - {days: mon-fri, from: '18:00', to: '08:00', mode: lease}\n"
              "  - {days: tue, from: '06:00', to: '09:00', mode: lease}\n")
    assert desired_at(s, datetime(2026, 11, 24, 8, 30, tzinfo=UTC)).label == "lease"


def test_spring_forward_a_boundary_in_the_gap_takes_effect_after_it():
    s = parse("timezone: Europe/Berlin\npolicy: fixed\nwindows:\n"
              "  - {days: sun, from: '02:30', to: '06:00', mode: lease}\n")
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 never happens.
    before = datetime(2026, 3, 29, 0, 59, tzinfo=UTC)  # 01:59 CET
    assert desired_at(s, before).label == "mine"
    assert next_change(s, before) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST


def test_fall_back_a_boundary_in_the_repeated_hour_switches_once():
    s = parse("timezone: Europe/Berlin\npolicy: fixed\nwindows:\n"
              "  - {days: sun, from: '00:00', to: '02:30', mode: lease}\n")
    # 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:00-03:00 happens twice.
    start = datetime(2026, 10, 24, 23, 0, tzinfo=UTC)  # 01:00 CEST
    first = next_change(s, start)
    assert first == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # the first 02:30 (CEST)
    assert next_change(s, first, horizon=timedelta(hours=20)) is None  # not back to lease at 02:00 CET
    spans = timeline(s, start, 1)
    assert [d.label for _, _, d in spans] == ["lease", "mine"]


windows = st.lists(st.fixed_dictionaries({
    "days": st.sampled_from(["mon", "tue", "sat", "sun", "mon-fri", "fri-mon", "daily", "weekends"]),
    "from": st.integers(0, 23 * 4).map(lambda q: f"{q // 4:02d}:{q % 4 * 15:02d}"),
    "hours": st.integers(1, 30),
}), max_size=4)


@settings(max_examples=60, deadline=None)
@given(windows=windows, tz=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
       policy=st.sampled_from(["lease-first", "mine-first"]),
       start=st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 12, 31)))
def test_timeline_spans_are_contiguous_and_each_is_one_mode(windows, tz, policy, start):
    mode = "mine" if policy == "lease-first" else "lease"
    lines = [f"timezone: {tz}", f"policy: {policy}", "windows:"]
    for w in windows:
        end_minute = (int(w["from"][:2]) * 60 + int(w["from"][3:]) + w["hours"] * 60) % 1440
        to = f"{end_minute // 60:02d}:{end_minute % 60:02d}" if end_minute else "24:00"
        if to == w["from"]:
            continue
        lines.append(f"  - {{days: {w['days']}, from: '{w['from']}', to: '{to}', mode: {mode}}}")
    s = parse("\n".join(lines) + "\n")
    begin = start.replace(tzinfo=UTC, second=0, microsecond=0)
    spans = timeline(s, begin, 2)
    assert spans[0][0] == begin and spans[-1][1] == begin + timedelta(days=2)
    for (a, b, d), nxt in zip(spans, spans[1:] + [None], strict=True):
        assert a < b
        for probe in (a, a + (b - a) / 2, b - timedelta(minutes=1)):
            assert desired_at(s, probe).same(d)
        if nxt:
            assert nxt[0] == b and not nxt[2].same(d)


def test_cli_check_and_show(tmp_path, capsys):
    good = tmp_path / "farm.yml"
    good.write_text(NIGHTS)
    assert main(["schedule", "check", str(good)]) == 0
    assert "ok (policy fixed, timezone Europe/Berlin, 2 windows" in capsys.readouterr().out
    assert main(["schedule", "show", str(good), "--days", "2", "--from", "2026-11-23T12:00"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["Mon", "2026-11-23", "12:00", "CET", "->", "Mon", "18:00", "CET", "6.0", "h", "mine"]
    assert out[2].split()[-3:] == ["h", "lease"] or out[2].split()[-2:] == ["h", "lease"]
    bad = tmp_path / "bad.yml"
    bad.write_text("timezone: UTC\npolicy: fixed\nwindows:\n  - {days: mon, from: '9', to: '10:00', mode: lease}\n")
    assert main(["schedule", "check", str(bad)]) == ScheduleError.exit_code
    assert f"{bad}:4: time '9'" in capsys.readouterr().err
    assert load(good).name == "farm"


# AEP-82 reclamation (issue 36): a schedule that knows the provider's reclamation window W.
RECLAIMING = """\
timezone: UTC
policy: fixed
default: lease
windows:
  - days: daily
    from: "18:00"
    to: "20:00"
    mode: mine
reclamation_window: 1h
lease_grace: forever
"""


def utc(text):
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_reclamation_window_takes_the_rig_off_the_market_w_plus_the_lead_before_mining():
    from miner2provider.timeshare.model import CORDON_LEAD_S
    from miner2provider.timeshare.policy import mine_from, with_lead

    s = parse(RECLAIMING, "farm.yml")
    assert s.reclamation_window_s == 3600.0 and s.warnings == ()
    lead = timedelta(seconds=3600 + CORDON_LEAD_S)
    mining = utc("2026-11-23T18:00")
    for now, offered in ((mining - lead - timedelta(minutes=1), True), (mining - lead, False),
                         (mining - timedelta(minutes=5), False)):
        raw = desired_at(s, now)
        assert raw.offered and mine_from(s, now) == mining
        assert with_lead(s, raw, now, mine_from(s, now)).offered is offered, now
    inside = utc("2026-11-23T19:00")
    assert mine_from(s, inside) == inside and not with_lead(s, desired_at(s, inside), inside, inside).offered
    no_window = parse(RECLAIMING.replace("reclamation_window: 1h\n", ""), "farm.yml")
    now = mining - timedelta(minutes=5)  # without a window nothing changes: offered until the window
    assert with_lead(no_window, desired_at(no_window, now), now, mine_from(no_window, now)).offered


def test_schedule_check_warns_when_the_window_outlasts_an_offered_span_or_the_grace():
    s = parse(RECLAIMING.replace("1h", "23h").replace("forever", "2h"), "farm.yml")
    assert s.warnings == (
        "farm.yml: lease_grace 2h is shorter than the reclamation_window 23h plus 120 s: a mining window is given "
        "up before its reclaimed leases may be closed; make lease_grace longer or forever",
        "farm.yml: the rig is offered for only 1320 min from 20:00 (mon,tue,wed,thu,fri,sat,sun), not more than "
        "the reclamation_window 23h plus 120 s: it is never offered then (it leaves the market that long before "
        "mining)")
    with pytest.raises(ScheduleError, match=r"farm.yml:9: duration '721h' is longer than 30d"):
        parse(RECLAIMING.replace("1h", "721h"), "farm.yml")
