"""The provider's uptime as the dashboard saw it: one sample per read of the provider's status (answered or not),
kept in a small SQLite file of its own beside the history, and the share answered over the last 7 days.

The share counts reads, not seconds: each read the dashboard makes at its interval weighs the same, as a status
checker's uptime does (the tenant-facing figure is the share of such checks that found the provider up).  Reads
made while the dashboard was not running do not exist, so they count neither way; the view says how many reads a
figure rests on.  Samples older than ``KEEP_S`` are dropped as new ones come in.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

WEEK_S = 7 * 86_400.0
KEEP_S = 8 * 86_400.0  # a day more than the window, so a figure never lacks its oldest reads


@dataclass(frozen=True)
class Uptime:
    share: float | None  # 0..1; None without a single read in the window
    reads: int
    answered: int
    since: float  # the window's start


class UptimeLog:
    """Samples in ``path`` (beside the history database, in its 0700 folder).  A connection per call: the reader
    thread writes, the request threads read."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS samples (at REAL NOT NULL, up INTEGER NOT NULL)")
            db.execute("CREATE INDEX IF NOT EXISTS samples_at ON samples (at)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=5)

    def add(self, at: float, up: bool) -> None:
        with self._lock, self._connect() as db:
            db.execute("INSERT INTO samples (at, up) VALUES (?, ?)", (at, int(up)))
            db.execute("DELETE FROM samples WHERE at < ?", (at - KEEP_S,))

    def over(self, now: float, window_s: float = WEEK_S) -> Uptime:
        since = now - window_s
        with self._lock, self._connect() as db:
            reads, answered = db.execute("SELECT COUNT(*), COALESCE(SUM(up), 0) FROM samples WHERE at > ? AND at <= ?",
                                         (since, now)).fetchone()
        return Uptime(answered / reads if reads else None, int(reads), int(answered), since)
