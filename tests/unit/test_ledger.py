"""The rig's ledger (issue 16): one line per change, torn lines and clock jumps survived, rotation
bounded, and the hours it yields never exceed the wall time."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from miner2provider.detect.facts.base import Output
from miner2provider.rigside import ledger
from miner2provider.rigside.ledger import Entry

T0 = 1_800_000_000.0


def test_lines_are_written_once_per_change_and_read_back(tmp_path):
    ledger.append(tmp_path, Entry(T0, "idle-mining", gpus=2))
    ledger.append(tmp_path, Entry(T0 + 60, "leasing", gpus=2, leases=("tenant/job",), leased=1))
    ledger.append(tmp_path, Entry(T0 + 3660, "idle-mining", blind=True, gpus=2))
    text = (tmp_path / ledger.LEDGER).read_text()
    assert text.splitlines()[1] == '{"at":1800000060.0,"gpus":2,"leased":1,"leases":["tenant/job"],"mode":"leasing"}'
    entries, bad = ledger.read(tmp_path)
    assert bad == 0 and [e.mode for e in entries] == ["idle-mining", "leasing", "idle-mining"]
    assert entries[2].blind and entries[1].leases == ("tenant/job",) and entries[1].leased == 1


def test_a_line_from_before_the_leased_count_leased_the_whole_rig_and_a_bad_count_is_not_believed():
    old = '{"at":1800000060.0,"gpus":3,"leases":["tenant/job"],"mode":"leasing"}'
    bad = '{"at":1800000070.0,"gpus":3,"leased":9,"leases":["tenant/job"],"mode":"leasing"}'
    cpu_only = '{"at":1800000080.0,"gpus":3,"leased":0,"leases":["tenant/web"],"mode":"idle-mining"}'
    entries, _ = ledger.parse("\n".join([old, bad, cpu_only]))
    assert [e.leased for e in entries] == [3, 3, 0]


def test_a_one_gpu_lease_on_a_three_gpu_rig_counts_one_gpu_hour_an_hour():
    from miner2provider.dashboard import views

    lines = [Entry(T0, "idle-mining", gpus=3), Entry(T0 + 3600, "leasing", gpus=3, leases=("l/a",), leased=1),
             Entry(T0 + 3 * 3600, "idle-mining", gpus=3)]
    totals = views.span_totals(ledger.spans(lines, T0 + 4 * 3600), 3)
    assert totals.gpu_seconds_leased == 2 * 3600 * 1  # two hours, one GPU
    assert totals.gpu_seconds_mined == 2 * 3600 * 3  # the hours before and after, every card mining


def test_a_week_of_ledger_with_a_rotation_between_sweeps_is_read_whole(tmp_path):
    """The probe reads the rotated file then the current one: every line of a week (hourly switches) that
    rotated between two sweeps is still read, in order."""
    import subprocess

    from miner2provider.detect.facts.node import AGENT_LEDGER, AgentLedgerFact

    week = [Entry(T0 + hour * 3600, "leasing" if hour % 2 else "idle-mining", gpus=2) for hour in range(168)]
    size = sum(len(e.line()) for e in week[:100])  # the file rotates once, after about 100 lines
    for entry in week:
        ledger.append(tmp_path, entry, max_bytes=size)
    assert (tmp_path / ledger.ROTATED).exists()
    command = AgentLedgerFact.command.replace(str(Path(AGENT_LEDGER).parent), str(tmp_path))
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True).stdout
    read = AgentLedgerFact.parse(Output(out, 0))
    assert [e.at for e in read] == [e.at for e in week]


def test_a_torn_last_line_is_skipped_and_never_joined_to_the_next(tmp_path):
    ledger.append(tmp_path, Entry(T0, "mining", gpus=1))
    with open(tmp_path / ledger.LEDGER, "a") as f:
        f.write('{"at":1800000100.0,"gpus":1,"mo')  # power lost mid-write
    assert [e.mode for e in ledger.read(tmp_path)[0]] == ["mining"]
    ledger.append(tmp_path, Entry(T0 + 200, "leasing", gpus=1))
    entries, bad = ledger.read(tmp_path)
    assert [e.mode for e in entries] == ["mining", "leasing"] and bad == 1


def test_foreign_lines_are_counted_not_read():
    text = '\n'.join(['[1,2]', '{"at":"yesterday","mode":"mining"}', '{"at":true,"mode":"x"}', 'NaN',
                      '{"at":1800000000,"mode":"mining","leases":[3]}', '{"at":1800000000,"mode":"mining"}'])
    entries, bad = ledger.parse(text)
    assert bad == 5 and entries == [Entry(T0, "mining")]


def test_a_clock_that_steps_back_never_makes_time_run_backwards():
    text = "".join(e.line() for e in (Entry(T0, "mining"), Entry(T0 + 100, "leasing"),
                                      Entry(86_400.0, "idle-mining"),  # rebooted in 1970 until NTP
                                      Entry(T0 + 400, "leasing")))
    entries, _ = ledger.parse(text)
    assert [e.at for e in entries] == [T0, T0 + 100, T0 + 100, T0 + 400]
    totals = ledger.seconds_by_mode(ledger.spans(entries, T0 + 500), T0, T0 + 500)
    # idle-mining began (as far as the ledger can tell) when the leasing before it was written
    assert totals == {"mining": 100, "idle-mining": 300, "leasing": 100}


def test_rotation_keeps_the_files_bounded_and_the_history_whole_as_far_as_it_goes(tmp_path):
    for i in range(200):
        ledger.append(tmp_path, Entry(T0 + i, "leasing" if i % 2 else "mining", gpus=8), max_bytes=2000)
    current, rotated = tmp_path / ledger.LEDGER, tmp_path / ledger.ROTATED
    assert current.stat().st_size <= 2000 and rotated.stat().st_size <= 2000
    entries, bad = ledger.read(tmp_path)
    assert bad == 0 and entries[-1].at == T0 + 199
    assert [e.at for e in entries] == sorted(e.at for e in entries)  # the rotated part comes first
    assert len(entries) == sum(1 for _ in rotated.open()) + sum(1 for _ in current.open())


def test_the_last_span_runs_until_now():
    spans = ledger.spans([Entry(T0, "mining"), Entry(T0 + 10, "leasing")], now=T0 + 70)
    assert [(s.mode, s.seconds) for s in spans] == [("mining", 10), ("leasing", 60)]
    assert ledger.spans([Entry(T0, "mining")], now=T0 - 5)[0].seconds == 0  # a clock behind the ledger


MODES = st.sampled_from(["mining", "idle-mining", "leasing", "draining"])
LINES = st.lists(st.one_of(
    st.builds(lambda at, mode, blind: Entry(at, mode, blind).line().rstrip("\n"),
              st.floats(0, 4e9, allow_nan=False), MODES, st.booleans()),
    st.text(max_size=30).map(lambda t: t.replace("\n", " "))), max_size=40)


@given(LINES, st.floats(0, 4e9, allow_nan=False), st.floats(0, 1e7, allow_nan=False),
       st.floats(0, 4e9, allow_nan=False))
def test_hours_never_exceed_the_wall_time(lines, start, length, now):
    """Whatever the ledger holds (torn lines, clocks anywhere), the modes' time within a window adds up
    to no more than the window, and no mode gets negative time."""
    entries, _ = ledger.parse("\n".join(lines))
    totals = ledger.seconds_by_mode(ledger.spans(entries, now), start, start + length)
    assert all(v >= 0 for v in totals.values())
    assert sum(totals.values()) <= length * (1 + 1e-9) + 1e-6


@given(st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), MODES), min_size=1, max_size=30))
def test_a_ledger_in_order_covers_its_whole_span(changes):
    """Written in time order, the ledger accounts for every second from its first line to now."""
    changes.sort()
    entries = [Entry(T0 + at, mode) for at, mode in changes]
    now = T0 + 2e6
    totals = ledger.seconds_by_mode(ledger.spans(entries, now), entries[0].at, now)
    assert abs(sum(totals.values()) - (now - entries[0].at)) < 1e-3
    assert json.loads(entries[0].line())["mode"] == changes[0][1]


def test_a_line_carries_the_measured_miner_and_a_bad_measurement_drops_only_itself():
    entry = ledger.Entry(1_800_000_000.0, "idle-mining", gpus=2, algo="kawpow", mhs=(58.123456, 57.0))
    (back,), bad = ledger.parse(entry.line())
    assert bad == 0 and back == ledger.Entry(1_800_000_000.0, "idle-mining", gpus=2, algo="kawpow", mhs=(58.123, 57.0))
    odd = '{"at": 1800000000, "mode": "mining", "gpus": 2, "algo": "kawpow", "mhs": [58, "x"]}\n'
    (kept,), bad = ledger.parse(odd)
    assert bad == 0 and kept == ledger.Entry(1_800_000_000.0, "mining", gpus=2)
    assert "mhs" not in ledger.Entry(1.0, "mining").line()  # no measurement, no field


def test_a_time_no_clock_gives_is_not_believed(tmp_path):
    """ATTACK (a rig's root writes its own ledger): a line at Infinity, NaN, 1e300 or year 33,658 (json reads them
    all as floats) would become days the dashboard sums one by one (its sweep hung summing 9e18 days); such a line
    is skipped like a torn one, and the lines around it count."""
    lines = [json.dumps({"at": T0, "mode": "mining", "gpus": 1}), '{"at": Infinity, "mode": "leasing", "gpus": 1}',
             '{"at": NaN, "mode": "leasing", "gpus": 1}', json.dumps({"at": 1e300, "mode": "leasing", "gpus": 1}),
             json.dumps({"at": 1e12, "mode": "leasing", "gpus": 1}), json.dumps({"at": -5.0, "mode": "x", "gpus": 1}),
             json.dumps({"at": T0 + 60, "mode": "idle-mining", "gpus": 1})]
    (tmp_path / ledger.LEDGER).write_text("\n".join(lines) + "\n")
    entries, bad = ledger.read(tmp_path)
    assert [(e.at, e.mode) for e in entries] == [(T0, "mining"), (T0 + 60, "idle-mining")] and bad == 5
