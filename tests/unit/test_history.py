"""The controller's history (issue 16): idempotent ingestion, migrations, per-day hours."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.core.errors import UsageError
from miner2provider.dashboard.history import MIGRATIONS, History
from miner2provider.rigside.ledger import Entry

DAY = 86_400.0
T0 = 1_800_000_000.0 - 1_800_000_000.0 % DAY  # a UTC midnight


def test_the_same_ledger_read_twice_adds_nothing(tmp_path):
    lines = [Entry(T0, "idle-mining", gpus=2), Entry(T0 + 3600, "leasing", gpus=2, leases=("t/job",))]
    with History(tmp_path / "h.sqlite3") as h:
        assert h.add_ledger("rig01", lines, seen_at=T0 + 7200) == 2
        assert h.add_ledger("rig01", lines, seen_at=T0 + 7300) == 0
        assert h.add_ledger("rig01", [*lines, Entry(T0 + 5400, "idle-mining", gpus=2)], seen_at=T0 + 7400) == 1
        (rig,) = h.rigs()
        assert (rig.name, rig.first_seen, rig.last_seen, rig.ledger_lines) == ("rig01", T0 + 7200, T0 + 7400, 3)
        assert h.ledger("rig01", T0 + 4000, T0 + DAY) == [lines[1], Entry(T0 + 5400, "idle-mining", gpus=2)]


def test_snapshots_keep_the_latest_report(tmp_path):
    with History(tmp_path / "h.sqlite3") as h:
        assert h.add_snapshot("rig01", T0, {"facts": {"mining_os": {"kind": "hiveos"}}})
        assert not h.add_snapshot("rig01", T0, {"facts": {}})  # that instant is stored already
        assert h.add_snapshot("rig01", T0 + 300, {"facts": {"mining_os": {"kind": "msos"}}})
        assert h.latest_snapshot("rig01") == {"facts": {"mining_os": {"kind": "msos"}}}
        assert h.latest_snapshot("nobody") is None


def test_migrations_run_once_and_a_newer_database_is_refused(tmp_path):
    path = tmp_path / "h.sqlite3"
    with History(path) as h:
        assert h.version == len(MIGRATIONS)
        h.add_ledger("rig01", [Entry(T0, "mining")], seen_at=T0)
    with History(path) as h:  # reopened: nothing re-created, the data there
        assert [r.ledger_lines for r in h.rigs()] == [1]
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    db.close()
    with pytest.raises(UsageError, match="newer than this m2p reads"):
        History(path)
    (tmp_path / "junk").write_text("not a database at all, but long enough to be read as one" * 20)
    with pytest.raises(UsageError, match="not an m2p history database"):
        History(tmp_path / "junk")


def test_seconds_per_day_split_at_midnight():
    with History(":memory:") as h:
        h.add_ledger("rig01", [Entry(T0 - 2 * 3600, "mining"), Entry(T0 + 6 * 3600, "leasing"),
                               Entry(T0 + DAY + 3600, "idle-mining")], seen_at=T0)
        days = h.seconds_per_day("rig01", 2, now=T0 + DAY + 2 * 3600, tz=UTC)
    first = datetime.fromtimestamp(T0, UTC).date()
    assert days[0] == (first, {"mining": 6 * 3600, "leasing": 18 * 3600})
    assert days[1][1] == {"leasing": 3600, "idle-mining": 3600}  # today, up to now


CHANGES = st.lists(st.tuples(st.floats(0, 10 * DAY, allow_nan=False),
                             st.sampled_from(["mining", "idle-mining", "leasing", "draining"])), max_size=30)


@settings(max_examples=60, deadline=None)
@given(CHANGES, st.integers(1, 10), st.floats(0, 12 * DAY, allow_nan=False))
def test_a_days_hours_never_exceed_the_day(changes, days, after):
    with History(":memory:") as h:
        h.add_ledger("rig01", [Entry(T0 + at, mode) for at, mode in sorted(changes)], seen_at=T0)
        per_day = h.seconds_per_day("rig01", days, now=T0 + after)
    assert len(per_day) == days
    for _, totals in per_day:
        assert all(v >= 0 for v in totals.values()) and sum(totals.values()) <= DAY + 1e-6


def test_the_latest_report_is_kept_and_history_once_a_day(tmp_path):
    with History(tmp_path / "h.sqlite3") as h:
        for n in range(5):  # five sweeps, five minutes apart
            assert h.add_snapshot("rig01", T0 + 300 * n, {"sweep": n})
        assert not h.add_snapshot("rig01", T0, {"sweep": "late"})  # an older read never wins
        assert h.add_snapshot("rig01", T0 + DAY, {"sweep": "tomorrow"})
        assert h.latest_snapshots() == {"rig01": (T0 + DAY, {"sweep": "tomorrow"})}
        kept = h.db.execute("SELECT at FROM snapshots ORDER BY at").fetchall()
    assert kept == [(T0,), (T0 + DAY,)]


def test_a_first_version_database_moves_forward_with_its_latest_reports(tmp_path):
    path = tmp_path / "h.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + "PRAGMA user_version = 1;")
    db.execute("INSERT INTO rigs VALUES ('rig01', ?, ?)", (T0, T0 + 600))
    db.executemany("INSERT INTO snapshots VALUES ('rig01', ?, ?)", [(T0, '{"n": 1}'), (T0 + 600, '{"n": 2}')])
    db.commit()
    db.close()
    with History(path) as h:
        assert h.version == len(MIGRATIONS)
        assert h.latest_snapshots() == {"rig01": (T0 + 600, {"n": 2, "schema": 1})} and h.nodes() == {}


def test_reports_stored_before_the_schema_read_back_typed_after_the_migration(tmp_path):
    """A version-4 database (reports without ``schema``, as m2p wrote them before it): migration 5 marks
    them schema 1, and report_from_json reads them into the same typed report."""
    from test_readiness import facts  # tests/unit is on sys.path (no package)

    from miner2provider.detect.report import RigReport, report_from_json, report_json, status_row

    report = RigReport("rig01", "10.0.0.1", facts(), None)
    old = {k: v for k, v in report_json(report).items() if k != "schema"}
    old["status_row"] = {k: v for k, v in status_row(report).items() if k != "schema"}
    path = tmp_path / "h.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("".join(MIGRATIONS[:4]) + "PRAGMA user_version = 4;")
    db.execute("INSERT INTO rigs VALUES ('rig01', ?, ?)", (T0, T0))
    db.execute("INSERT INTO snapshots VALUES ('rig01', ?, ?)", (T0, json.dumps(old)))
    db.execute("INSERT INTO latest VALUES ('rig01', ?, ?)", (T0, json.dumps(old)))
    db.commit()
    db.close()
    with History(path) as h:
        stored = h.latest_snapshot("rig01")
        assert stored is not None and stored["schema"] == 1
        assert report_from_json(stored) == report


def test_a_line_far_ahead_of_every_read_is_summed_by_day_only_up_to_the_last_read(tmp_path):
    """ATTACK: a rig whose clock says year 33,658 (or a line built without the ledger's reader): its days are summed
    only up to a day past the dashboard's last read of it, so a sweep stays as quick as ever (it once set out to
    write one row a day for 9e18 days, holding the history's write lock), and the other rigs are stored after it."""
    now = 1_800_000_000.0
    with History(tmp_path / "h.sqlite3") as h:
        h.add_ledger("rig01", [Entry(now - 7200, "mining", gpus=1), Entry(1e12, "leasing", gpus=1),
                               Entry(1e300, "mining", gpus=1)], seen_at=now)
        h.add_ledger("rig02", [Entry(now - 3600, "mining", gpus=1)], seen_at=now)
        days = h.db.execute("SELECT rig, count(*), max(day) FROM ledger_days GROUP BY rig").fetchall()
    assert days == [("rig01", 2, int(now // 86_400) + 1)], days  # today and the day after, no further
