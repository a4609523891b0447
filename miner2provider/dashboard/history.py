"""The controller's history of the fleet (issue 16): every rig's ledger and detect snapshots, in SQLite.

The rigs keep their own ledgers (rigside/ledger.py, bounded and rotated); the controller keeps them for
good, merged without duplicates: the same ledger read twice adds nothing (a line is keyed by rig,
time, mode, API sight and leases).  Snapshots are what `m2p detect --json` reports of a rig; card samples
each card's temperature and power over the last days (the rig page's charts); the alert rules' state is kept
across restarts; each lease's withdrawn amount as the wallet's reads saw it change (the books' payments).  The
schema moves forward by numbered migrations (``PRAGMA user_version``); a database from a newer m2p
is refused rather than misread.  Default place: ``~/.local/share/m2p/history.sqlite3``.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

from miner2provider.core.errors import UsageError
from miner2provider.market.wallet import CLOSED, LeaseRecord
from miner2provider.rigside.ledger import Entry, seconds_by_mode, spans
from miner2provider.rigside.status import Telemetry

DEFAULT_PATH = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local/share") / "m2p/history.sqlite3"

# Migration N brings a database from version N-1 to N.  Never edit a released one: add the next.
MIGRATIONS = (
    """
    CREATE TABLE rigs (name TEXT PRIMARY KEY, first_seen REAL NOT NULL, last_seen REAL NOT NULL);
    CREATE TABLE snapshots (
        rig TEXT NOT NULL REFERENCES rigs(name), at REAL NOT NULL, report TEXT NOT NULL,
        PRIMARY KEY (rig, at));
    CREATE TABLE ledger (
        rig TEXT NOT NULL REFERENCES rigs(name), at REAL NOT NULL, mode TEXT NOT NULL,
        blind INTEGER NOT NULL, gpus INTEGER NOT NULL, leases TEXT NOT NULL,
        PRIMARY KEY (rig, at, mode, blind, leases)) WITHOUT ROWID;
    """,
    # 2: the latest report of each rig in a table of its own; ``snapshots`` keeps one a day (a sweep
    # every 5 minutes of 1,000 rigs would otherwise store tens of GB a month).
    """
    CREATE TABLE latest (rig TEXT PRIMARY KEY REFERENCES rigs(name), at REAL NOT NULL, report TEXT NOT NULL);
    INSERT INTO latest SELECT rig, max(at), report FROM snapshots GROUP BY rig;
    """,
    # 3: what the agents last published on their nodes (m2p.io/mode, m2p.io/status), read from the
    # Kubernetes API of the farm's server; keyed by node name.
    """
    CREATE TABLE nodes (node TEXT PRIMARY KEY, at REAL NOT NULL, mode TEXT NOT NULL, status TEXT NOT NULL);
    """,
    # 4: each ledger line's end (the next line's time; NULL: still in force), kept at ingestion, so that
    # the fleet page sums 1,000 rigs' month in one plain scan.
    """
    ALTER TABLE ledger ADD COLUMN until REAL;
    UPDATE ledger SET until = (SELECT min(n.at) FROM ledger n WHERE n.rig = ledger.rig AND n.at > ledger.at);
    """,
    # 5: stored reports carry their schema (detect/report.py, schema 1: the shape they already had, so
    # marking them is the whole upgrade); a later shape is a later migration.
    """
    UPDATE snapshots SET report = json_set(report, '$.schema', 1) WHERE json_type(report, '$.schema') IS NULL;
    UPDATE latest SET report = json_set(report, '$.schema', 1) WHERE json_type(report, '$.schema') IS NULL;
    """,
    # 6: the GPUs the leases held (rigside/ledger.py ``leased``); a line from before it leased the whole rig.
    """
    ALTER TABLE ledger ADD COLUMN leased INTEGER NOT NULL DEFAULT 0;
    UPDATE ledger SET leased = gpus WHERE leases != '[]';
    """,
    # 7: the GPUs the miner mined on beside the leases (rigside/ledger.py ``mining``: per-card hand-over).
    """
    ALTER TABLE ledger ADD COLUMN mining INTEGER NOT NULL DEFAULT 0;
    """,
    # 8: each card's temperature and power as the agent published them (issue 56: the rig page's day charts),
    # one row per new reading (the agent's ``read_at``), kept CARDS_KEPT_S; and the alert rules' state
    # (alerts/rules.py state_json), one row, so that a restarted dashboard does not fire every alert again.
    """
    CREATE TABLE card_samples (
        rig TEXT NOT NULL, at REAL NOT NULL, card INTEGER NOT NULL, temperature_c REAL, power_w REAL,
        PRIMARY KEY (rig, at, card)) WITHOUT ROWID;
    CREATE TABLE alert_state (one INTEGER PRIMARY KEY CHECK (one = 1), at REAL NOT NULL, state TEXT NOT NULL);
    """,
    # 9: the closed ledger lines summed per rig and UTC day (DAILY_SQL; issue 57's income chart: 1,000 rigs x 30 days
    # summed per day at each page cost ~430 ms, read from here ~20 ms), kept at ingestion; filled by ``_sum_days``.
    # And the lines in force found by an index, not by a scan of every line (``open_lines``, WINDOW_SQL's second part).
    """
    CREATE TABLE ledger_days (
        rig TEXT NOT NULL, day INTEGER NOT NULL, seconds REAL NOT NULL, gpu_seconds REAL NOT NULL,
        bare_seconds REAL NOT NULL, leased REAL NOT NULL, mined REAL NOT NULL, bare_mined REAL NOT NULL,
        PRIMARY KEY (rig, day)) WITHOUT ROWID;
    CREATE INDEX ledger_open ON ledger (rig) WHERE until IS NULL;
    """,
    # 10: what each lease had withdrawn from its escrow, as the dashboard's wallet reads saw it (issue 57: the chain
    # keeps a lease's withdrawn amount to date, not its payments).  A lease's amount only grows on the chain, so a row
    # is kept only where a read found it above every amount kept for the lease (a node that lags, or answers a lease
    # without its escrow as 0, is wrong, never a refund): a lease's rows rise, each step a payment dated at the read
    # that saw it (``lease_payments``).  ``baseline``: the lease's first row was read when it had closed already, so
    # what it withdrew is no payment of m2p's time (a new history's first read would put every past lease on one day).
    # The amount is the wallet reader's float (market/wallet.py LeaseRecord); the lease's namespace and rate as that
    # read gave them, so that the payments are placed on rigs and counted in hours without a read of the chain at hand
    # (``m2p history --csv``).
    """
    CREATE TABLE lease_withdrawals (
        lease TEXT NOT NULL, at REAL NOT NULL, withdrawn REAL NOT NULL, currency TEXT NOT NULL,
        namespace TEXT NOT NULL, rate_per_hour REAL NOT NULL, baseline INTEGER NOT NULL,
        PRIMARY KEY (lease, at)) WITHOUT ROWID;
    CREATE INDEX lease_withdrawals_at ON lease_withdrawals (at, lease);
    CREATE INDEX lease_withdrawals_amount ON lease_withdrawals (lease, withdrawn);
    """,
    # 11: each rig's last stored card reading by the reading's own time (the agent's ``read_at``).  A rig whose
    # clock runs ahead has its samples stored at the sweep's time (a future point would stand on every chart), so
    # card_samples' own time cannot tell that a sweep found the same reading again: this can.
    """
    CREATE TABLE card_reads (rig TEXT PRIMARY KEY, read_at REAL NOT NULL) WITHOUT ROWID;
    """,
)
FILLED_BY_CODE = 9  # the migration whose table ``_sum_days`` fills from the ledger already stored
DAY_S = 86_400  # a UTC day: epoch seconds know no leap second, so epoch // DAY_S is the UTC day
MINING_MODES = ("mining", "idle-mining")  # the ledger's modes in which the miner runs
SNAPSHOT_EVERY_S = 86_400.0  # how far apart the kept reports of a rig are, at least
# How long a card's figures are kept: the charts show a day; two keep a rig whose clock lags a little charted.
# The agent publishes new figures at most every 5 minutes (agent/telemetry.py PUBLISH_S), so a rig stores at
# most 2 x 288 readings a card whatever the sweep's pace (docs/dashboard.md has the cost at 1,000 rigs).
CARDS_KEPT_S = 2 * 86_400.0


@dataclass(frozen=True)
class LeasePayment:
    """What a lease paid the provider between two of the wallet's reads (``History.lease_payments``), dated at the
    later read, the one that saw it; a lease's ``first`` is the whole amount it had paid when m2p first read it
    (the chain keeps no dates), dated at that first read."""

    lease: str  # the lease's id, as the marketplace's tools print it
    at: float  # the read that saw it (epoch seconds)
    amount: float  # above zero, in ``currency``
    currency: str
    namespace: str  # the lease's Kubernetes namespace, as that read gave it ("" unknown)
    rate_per_hour: float  # the lease's rate, as that read gave it (0: unknown)
    first: bool


@dataclass(frozen=True)
class RigSummary:
    name: str
    first_seen: float
    last_seen: float
    ledger_lines: int


class History:
    """One open database.  Writes are transactions: a crash mid-ingest leaves the last complete state."""

    def __init__(self, path: Path | str = DEFAULT_PATH) -> None:
        self.path = Path(path)
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            # check_same_thread off: the dashboard opens one per request in its thread pool and never
            # shares it; WAL lets those reads run while a sweep writes.
            self.db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30)
            self.db.execute("PRAGMA foreign_keys = ON")
            if str(self.path) != ":memory:":
                self.db.execute("PRAGMA journal_mode = WAL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise UsageError(f"not an m2p history database ({exc})", where=str(self.path)) from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        current = self.version
        if current > len(MIGRATIONS):
            raise UsageError(f"history database version {current} is newer than this m2p reads "
                             f"({len(MIGRATIONS)}): upgrade m2p", where=str(self.path))
        for number, script in enumerate(MIGRATIONS[current:], start=current + 1):
            with self._transaction():
                for statement in filter(str.strip, script.split(";")):
                    self.db.execute(statement)
                if number == FILLED_BY_CODE:
                    self._sum_days(None, 0)
                self.db.execute(f"PRAGMA user_version = {number}")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _seen(self, rig: str, at: float) -> None:
        self.db.execute("INSERT INTO rigs VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                        "first_seen = min(first_seen, excluded.first_seen), "
                        "last_seen = max(last_seen, excluded.last_seen)", (rig, at, at))

    # -- ingestion ------------------------------------------------------------------------
    def add_ledger(self, rig: str, entries: Iterable[Entry], seen_at: float) -> int:
        """Store a rig's ledger lines; returns how many were new."""
        rows = [(rig, e.at, e.mode, int(e.blind), e.gpus, json.dumps(list(e.leases)), e.leased, e.mining)
                for e in entries]
        with self._transaction():
            self._seen(rig, seen_at)
            before = self.db.total_changes
            self.db.executemany("INSERT OR IGNORE INTO ledger (rig, at, mode, blind, gpus, leases, leased, mining) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
            added = self.db.total_changes - before
            if added:
                self._link(rig, min(row[1] for row in rows))
            return added

    def _link(self, rig: str, earliest: float) -> None:
        """Set ``until`` of the rig's lines from the one before ``earliest`` on: each ends at the next."""
        start = self.db.execute("SELECT max(at) FROM ledger WHERE rig = ? AND at < ?", (rig, earliest)).fetchone()[0]
        keys = list(self.db.execute(f"SELECT at, mode, blind, leases FROM ledger WHERE rig = ? AND at >= ? {ORDER}",
                                    (rig, earliest if start is None else start)))
        ends = [following[0] for following in keys[1:]] + [None]
        self.db.executemany("UPDATE ledger SET until = ? WHERE rig = ? AND at = ? AND mode = ? AND blind = ? "
                            "AND leases = ?", [(end, rig, *key) for end, key in zip(ends, keys, strict=True)])
        if keys and math.isfinite(keys[0][0]):
            self._sum_days(rig, int(keys[0][0] // DAY_S))

    def _sum_days(self, rig: str | None, first_day: int) -> None:
        """(Re)write ``ledger_days`` of ``rig`` (None: every rig) from UTC day ``first_day`` (epoch days) on."""
        where = "" if rig is None else "AND rig = :rig"
        since = first_day * DAY_S
        # Summed up to a day past the last read of the rig (of any rig: every rig's), never further: a line from a
        # clock far ahead (or one not read through rigside/ledger.py) would otherwise be one row a day for as many
        # days as it claims.  One rig's is its primary key's row, not a scan of every rig's at each sweep.
        last_read = self.db.execute("SELECT max(last_seen) FROM rigs" + ("" if rig is None else " WHERE name = ?"),
                                    () if rig is None else (rig,)).fetchone()[0]
        cap = (since if last_read is None else max(float(last_read), since)) + DAY_S
        found = self.db.execute(f"SELECT min(max(until), :cap), max(CAST(min(until, :cap) / {DAY_S} AS INTEGER) - "
                                f"CAST(max(at, :since) / {DAY_S} AS INTEGER)) FROM ledger WHERE until > :since "
                                f"AND at < :cap {where}", {"since": since, "rig": rig, "cap": cap}).fetchone()
        self.db.execute(f"DELETE FROM ledger_days WHERE day >= :day {where}", {"day": first_day, "rig": rig})
        if found[0] is None:
            return
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS day_offsets (k INTEGER PRIMARY KEY)")
        self.db.executemany("INSERT OR IGNORE INTO temp.day_offsets VALUES (?)", ((k,) for k in range(found[1] + 1)))
        names = {f"m{n}": mode for n, mode in enumerate(MINING_MODES)}
        mining = f"mode IN ({', '.join(':' + name for name in names)})"
        self.db.execute("INSERT INTO ledger_days " + DAILY_SQL.format(mining=mining, rig=where),
                        {"since": since, "until": found[0], "rig": rig, **names})

    def add_snapshot(self, rig: str, at: float, report: dict[str, Any]) -> bool:
        """Store one detect report of a rig (``reports.report_json``) as its latest; it is also kept in
        the rig's history when the last kept one is a day old.  False if the latest is newer or as new."""
        text = json.dumps(report, sort_keys=True)
        with self._transaction():
            self._seen(rig, at)
            cursor = self.db.execute("INSERT INTO latest VALUES (?, ?, ?) ON CONFLICT(rig) DO UPDATE SET "
                                     "at = excluded.at, report = excluded.report WHERE excluded.at > latest.at",
                                     (rig, at, text))
            if cursor.rowcount != 1:
                return False
            kept = self.db.execute("SELECT max(at) FROM snapshots WHERE rig = ?", (rig,)).fetchone()[0]
            if kept is None or at - kept >= SNAPSHOT_EVERY_S:
                self.db.execute("INSERT OR IGNORE INTO snapshots VALUES (?, ?, ?)", (rig, at, text))
            return True

    def set_nodes(self, nodes: dict[str, tuple[str, dict[str, Any]]], at: float) -> None:
        """What one list of the API's nodes said: node -> (mode, status)."""
        with self._transaction():
            self.db.executemany("INSERT INTO nodes VALUES (?, ?, ?, ?) ON CONFLICT(node) DO UPDATE SET "
                                "at = excluded.at, mode = excluded.mode, status = excluded.status",
                                [(node, at, mode, json.dumps(status, sort_keys=True))
                                 for node, (mode, status) in nodes.items()])

    def nodes(self) -> dict[str, tuple[float, str, dict[str, Any]]]:
        return {node: (at, mode, json.loads(status))
                for node, at, mode, status in self.db.execute("SELECT * FROM nodes")}

    def add_cards(self, rig: str, telemetry: Telemetry | None, now: float) -> int:
        """Store the cards' temperature and power of one reading of the agent (keyed by its ``read_at``: the
        same reading swept again adds nothing), and forget the rig's readings older than CARDS_KEPT_S.  A
        reading dated after ``now`` (the rig's clock ahead) is stored at ``now``.  Returns the rows added."""
        return self.add_cards_of([(rig, telemetry)], now)

    def add_cards_of(self, readings: Iterable[tuple[str, Telemetry | None]], now: float) -> int:
        """``add_cards`` for many rigs' readings in one transaction (an API sweep's 1,000 nodes: one commit, not one a
        node).  Returns the rows added."""
        added = 0
        with self._transaction():
            for rig, telemetry in readings:
                read_at = telemetry.read_at_s() if telemetry is not None else None
                if telemetry is None or read_at is None or not telemetry.cards:
                    continue
                at = min(read_at, now)  # a rig's clock ahead: stored at the sweep's time, once (card_reads)
                if self.db.execute("SELECT 1 FROM card_reads WHERE rig = ? AND read_at = ?", (rig, read_at)).fetchone():
                    continue  # stored already: most sweeps (a minute apart) find the same reading (5 minutes apart)
                self.db.execute("INSERT INTO card_reads VALUES (?, ?) ON CONFLICT(rig) DO UPDATE SET "
                                "read_at = excluded.read_at", (rig, read_at))
                rows = [(rig, at, card.index, card.temperature_c, card.power_w) for card in telemetry.cards]
                before = self.db.total_changes
                self.db.executemany("INSERT OR IGNORE INTO card_samples VALUES (?, ?, ?, ?, ?)", rows)
                added += self.db.total_changes - before
                self.db.execute("DELETE FROM card_samples WHERE rig = ? AND at < ?", (rig, now - CARDS_KEPT_S))
        return added

    def card_samples(self, rig: str, since: float) -> dict[int, list[tuple[float, float | None, float | None]]]:
        """The rig's card readings from ``since`` on: card index -> [(at, temperature °C, power W)], oldest first."""
        out: dict[int, list[tuple[float, float | None, float | None]]] = {}
        for at, card, temperature, power in self.db.execute(
                "SELECT at, card, temperature_c, power_w FROM card_samples WHERE rig = ? AND at >= ? ORDER BY at",
                (rig, since)):
            out.setdefault(card, []).append((at, temperature, power))
        return out

    def save_alert_state(self, state: dict[str, Any], at: float) -> None:
        """The alert rules' state (alerts/rules.py state_json) after a sweep's judgement."""
        self.db.execute("INSERT INTO alert_state VALUES (1, ?, ?) ON CONFLICT(one) DO UPDATE SET "
                        "at = excluded.at, state = excluded.state", (at, json.dumps(state, sort_keys=True)))

    def alert_state(self) -> Any:
        """The alert rules' state as last saved (None: never saved); state_from_json reads it."""
        row = self.db.execute("SELECT state FROM alert_state").fetchone()
        return json.loads(row[0]) if row else None

    def record_withdrawals(self, at: float, leases: Iterable[LeaseRecord]) -> int:
        """Keep what each of a wallet read's ``leases`` has withdrawn, read at ``at``: a row for a lease only where
        its amount is above every amount kept for it, in the currency of its first row (a lease paid every hour and
        read every 5 minutes keeps ~24 rows a day, not 288; a lower amount or another currency is a wrong answer,
        kept nowhere).  A lease first read closed keeps its first row as a baseline, not a payment.  An amount that
        is no number, or below zero, is not kept.  Returns the rows added."""
        latest = {lease.id: lease for lease in leases
                  if math.isfinite(lease.withdrawn) and lease.withdrawn >= 0}  # a lease listed twice: its last
        with self._transaction():
            rows = []
            for lease in latest.values():
                currency, highest = self.db.execute("SELECT min(currency), max(withdrawn) FROM lease_withdrawals "
                                                    "WHERE lease = ?", (lease.id,)).fetchone()
                if highest is None or (lease.currency == currency and lease.withdrawn > highest):
                    rate = lease.rate_per_hour if math.isfinite(lease.rate_per_hour) else 0.0
                    baseline = highest is None and lease.status == CLOSED
                    rows.append((lease.id, at, lease.withdrawn, lease.currency, lease.namespace, rate, int(baseline)))
            before = self.db.total_changes
            self.db.executemany("INSERT OR IGNORE INTO lease_withdrawals VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            return self.db.total_changes - before

    # -- queries --------------------------------------------------------------------------
    def lease_payments(self, since: float, until: float, page: int = 2000) -> Iterator[LeasePayment]:
        """The leases' payments seen by reads within [since, until), by time then lease: each kept row of a lease
        (``record_withdrawals``: they rise) less the lease's highest amount below it, which may lie before ``since``
        (by amount, not time: a clock stepped back dates a payment oddly but never counts it twice).  A lease's first
        row is one payment of its whole amount (withdrawn before m2p first read the lease), unless it is a baseline.
        Read ``page`` rows at a time, each page a statement of its own: a slow download holds no read open, and a
        year of 1,000 leases is never held whole."""
        after: tuple[float, str] = (since, "")
        while True:
            rows = self.db.execute(
                "SELECT w.lease, w.at, w.withdrawn, w.currency, w.namespace, w.rate_per_hour, w.baseline, (SELECT "
                "max(b.withdrawn) FROM lease_withdrawals b WHERE b.lease = w.lease AND b.withdrawn < w.withdrawn) "
                "FROM lease_withdrawals w WHERE (w.at, w.lease) > (?, ?) AND w.at < ? ORDER BY w.at, w.lease LIMIT ?",
                (*after, until, page)).fetchall()
            for lease, at, withdrawn, currency, namespace, rate, baseline, before in rows:
                first = before is None
                if first and baseline:
                    continue
                amount = withdrawn - (before or 0.0)
                if amount > 0:
                    yield LeasePayment(lease, at, amount, currency, namespace, rate, first)
            if len(rows) < page:
                return
            after = (rows[-1][1], rows[-1][0])

    def rigs(self) -> list[RigSummary]:
        rows = self.db.execute("SELECT r.name, r.first_seen, r.last_seen, count(l.at) FROM rigs r "
                               "LEFT JOIN ledger l ON l.rig = r.name GROUP BY r.name ORDER BY r.name")
        return [RigSummary(*row) for row in rows]

    def latest_snapshot(self, rig: str) -> dict[str, Any] | None:
        found = self.latest(rig)
        return found[1] if found else None

    def latest(self, rig: str) -> tuple[float, dict[str, Any]] | None:
        """The rig's latest report and when it was stored."""
        row = self.db.execute("SELECT at, report FROM latest WHERE rig = ?", (rig,)).fetchone()
        return (row[0], json.loads(row[1])) if row else None

    def latest_times(self) -> dict[str, float]:
        """When each rig's latest report was stored (its report left unread: a cache asks what changed)."""
        return dict(self.db.execute("SELECT rig, at FROM latest"))

    def latest_snapshots(self) -> dict[str, tuple[float, dict[str, Any]]]:
        """Every rig's latest report and when it was read."""
        return {rig: (at, json.loads(report)) for rig, at, report in self.db.execute("SELECT * FROM latest")}

    def ledger(self, rig: str, since: float, until: float) -> list[Entry]:
        """The lines within [since, until), led by the last one before ``since`` (the mode the window
        opens in)."""
        rows = list(self.db.execute(f"SELECT {LINE} FROM ledger WHERE rig = ? AND at >= ? AND at < ? {ORDER}",
                                    (rig, since, until)))
        before = self.db.execute(f"SELECT {LINE} FROM ledger WHERE rig = ? AND at < ? ORDER BY at DESC, mode DESC, "
                                 "blind DESC, leases DESC LIMIT 1", (rig, since)).fetchone()
        return [_entry(row) for row in ([before] if before else []) + rows]

    def windows(self, since: float, until: float) -> dict[str, Window]:
        """Every rig's ``Window`` over [since, until)."""
        closed: dict[str, list[tuple[str, int, int, float, int]]] = {}
        last: dict[str, Entry] = {}
        for rig, mode, leased, gpus, mining, value, leases in self.db.execute(
                WINDOW_SQL, {"since": since, "until": until}):
            if leases is None:
                closed.setdefault(rig, []).append((mode, leased, gpus, value, mining))
            else:
                last[rig] = Entry(value, mode, False, gpus, tuple(json.loads(leases)), leased=leased, mining=mining)
        return {rig: Window(tuple(closed.get(rig, ())), last.get(rig)) for rig in {*closed, *last}}

    def open_lines(self, until: float) -> dict[str, Entry]:
        """Each rig's line in force (no end yet) that began before ``until``, as ``windows`` gives it."""
        return {rig: _entry(row) for rig, *row in self.db.execute(
            f"SELECT rig, {LINE} FROM ledger WHERE until IS NULL AND at < ?", (until,))}

    def day_sums(self, first: int, last: int, classes: dict[str, int]) -> list[tuple[Any, ...]]:
        """``ledger_days`` from UTC day ``first`` to ``last`` (epoch days, both in) of the rigs ``classes`` names,
        summed per (class, day): rigs valued alike share a class, so a fleet's month comes back in a few rows."""
        self.db.execute("CREATE TEMP TABLE IF NOT EXISTS rig_classes (rig TEXT PRIMARY KEY, class INTEGER NOT NULL) "
                        "WITHOUT ROWID")
        self.db.execute("DELETE FROM temp.rig_classes")
        self.db.executemany("INSERT INTO temp.rig_classes VALUES (?, ?)", classes.items())
        return list(self.db.execute(
            "SELECT c.class, d.day, sum(seconds), sum(gpu_seconds), sum(bare_seconds), sum(leased), sum(mined), "
            # CROSS JOIN: each rig's days read by their key, for one rig as for a thousand
            "sum(bare_mined) FROM temp.rig_classes c CROSS JOIN ledger_days d ON d.rig = c.rig "
            "WHERE d.day >= ? AND d.day <= ? GROUP BY c.class, d.day", (first, last)))

    def seconds_per_day(self, rig: str, days: int, now: float,
                        tz: tzinfo = UTC) -> list[tuple[date, dict[str, float]]]:
        """Seconds in each mode per calendar day (in ``tz``), the last ``days`` days up to ``now``."""
        today = datetime.fromtimestamp(now, tz).date()
        first = today - timedelta(days=days - 1)
        start = datetime(first.year, first.month, first.day, tzinfo=tz).timestamp()
        all_spans = spans(self.ledger(rig, start, now), now)
        out = []
        for n in range(days):
            day = first + timedelta(days=n)
            lo = datetime(day.year, day.month, day.day, tzinfo=tz).timestamp()
            nxt = day + timedelta(days=1)
            hi = min(datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz).timestamp(), now)
            out.append((day, seconds_by_mode(all_spans, lo, hi)))
        return out


class LatestReports:
    """``History.latest_snapshots()`` that decodes only the reports stored since its last read, keyed by when each was
    stored: one a process, shared by the pages and the alerts' judgement after each sweep (1,000 rigs of 8 cards: ~110
    ms of json.loads a read otherwise, though a sweep changes few).  Read by the pages' worker threads and the sweep's
    at once: one reads at a time, so a report is decoded once."""

    def __init__(self) -> None:
        self._reports: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.changes = 0  # how many reports were decoded or dropped so far (the pages' gc.freeze follows it)

    def read(self, history: History) -> dict[str, tuple[float, dict[str, Any]]]:
        """Every rig's latest report and when it was stored, as ``history`` holds them now."""
        with self._lock:
            stored = history.latest_times()
            for rig, at in stored.items():
                if self._reports.get(rig, (None,))[0] != at:
                    found = history.latest(rig)  # a sweep may have stored a newer one since: it comes with its time
                    if found is not None:
                        self._reports[rig] = found
                        self.changes += 1
            for rig in self._reports.keys() - stored.keys():
                del self._reports[rig]
                self.changes += 1
            return dict(self._reports)  # a copy: the next read changes the cache, not what a caller holds


# The ledger's closed lines cut at UTC midnights and summed per (rig, UTC day) (the income chart's 1,000 rigs x 30 days
# in one scan): a line is joined with the day offsets it spans (``day_offsets``' rowid: a range, a row or two a line).
# The sums follow views.totals (a test holds them to it): seconds; GPU-seconds of the line's own count; seconds of
# lines that gave none (the rig's count serves); GPU-seconds leased; mined (beside a lease: the line's ``mining``;
# without: every card while the mode mines); and mining seconds of lines that gave no count.
DAILY_SQL = """
SELECT rig, day, sum(len), sum(len * gpus), sum(CASE WHEN gpus = 0 THEN len ELSE 0 END), sum(len * leased),
       sum(len * CASE WHEN leased > 0 THEN mining WHEN {mining} THEN gpus ELSE 0 END),
       sum(CASE WHEN leased = 0 AND gpus = 0 AND {mining} THEN len ELSE 0 END)
FROM (SELECT rig, mode, gpus, leased, mining, first + n.k AS day,
             min(until, :until, (first + n.k + 1) * 86400.0) - max(at, :since, (first + n.k) * 86400.0) AS len
      FROM (SELECT rig, mode, gpus, leased, mining, at, until, CAST(max(at, :since) / 86400 AS INTEGER) AS first,
                   CAST(min(until, :until) / 86400 AS INTEGER) AS last
            FROM ledger WHERE until > :since AND at < :until {rig}) AS l
      JOIN temp.day_offsets n ON n.k <= l.last - l.first)
WHERE len > 0 GROUP BY rig, day
"""
WINDOW_SQL = """
SELECT rig, mode, leased, gpus, mining, sum(min(until, :until) - max(at, :since)), NULL FROM ledger
    WHERE until > :since AND at < :until GROUP BY rig, mode, leased, gpus, mining
UNION ALL
SELECT rig, mode, leased, gpus, mining, at, leases FROM ledger WHERE until IS NULL AND at < :until
"""
LINE = "at, mode, blind, gpus, leases, leased, mining"
ORDER = "ORDER BY at, mode, blind, leases"  # the primary key's order: lines at one instant in a fixed order


@dataclass(frozen=True)
class Window:
    """A rig's ledger summed over a window in SQL (the fleet page's 1,000 rigs x 30 days): seconds per
    (mode, GPUs the leases held, GPU count; with the GPUs mined beside them) of the spans that ended, and the
    line still in force."""

    closed: tuple[tuple[str, int, int, float, int], ...]
    last: Entry | None


def _entry(row: tuple[Any, ...]) -> Entry:
    at, mode, blind, gpus, leases, leased, mining = row
    return Entry(at, mode, bool(blind), gpus, tuple(json.loads(leases)), leased=leased, mining=mining)
