"""Who is signed in, and who is guessing: the dashboard's sessions and its login rate limit.

A session is a random 256-bit ID the server remembers (never derived from the token, so a stolen cookie
dies with its session, at logout or after SESSION_TTL_S), kept in memory: restarting the dashboard signs
everyone out.  Failed logins are limited per client address and for the whole server, so a local user
or a LAN host cannot try tokens quickly (the token is 256 bits; the limit keeps the log quiet and the
CPU free)."""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

SESSION_TTL_S = 12 * 3600.0  # a working day; then sign in again
MAX_SESSIONS = 256  # the oldest go first beyond this
FAILURES_PER_CLIENT = 5  # within FAILURE_WINDOW_S
FAILURES_IN_ALL = 30
FAILURE_WINDOW_S = 60.0


@dataclass
class Sessions:
    ttl_s: float = SESSION_TTL_S
    clock: Callable[[], float] = time.monotonic
    _expires: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            now = self.clock()
            for old in [s for s, until in self._expires.items() if until <= now]:
                del self._expires[old]
            while len(self._expires) >= MAX_SESSIONS:
                del self._expires[min(self._expires, key=self._expires.__getitem__)]
            self._expires[sid] = now + self.ttl_s
        return sid

    def valid(self, sid: str) -> bool:
        with self._lock:
            until = self._expires.get(sid)
            if until is None:
                return False
            if until <= self.clock():
                del self._expires[sid]
                return False
            return True

    def close(self, sid: str) -> None:
        with self._lock:
            self._expires.pop(sid, None)


@dataclass
class LoginLimiter:
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=dict)
    _all: deque[float] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_s(self, client: str) -> float:
        """0 when ``client`` may try a token now, else the seconds until it may."""
        with self._lock:
            now = self.clock()
            mine = self._failures.get(client, deque())
            for times in (mine, self._all):
                while times and times[0] <= now - FAILURE_WINDOW_S:
                    times.popleft()
            if not mine:
                self._failures.pop(client, None)
            waits = [times[0] + FAILURE_WINDOW_S - now
                     for times, most in ((mine, FAILURES_PER_CLIENT), (self._all, FAILURES_IN_ALL))
                     if len(times) >= most]
            return max(waits, default=0.0)

    def failed(self, client: str) -> None:
        with self._lock:
            now = self.clock()
            self._failures.setdefault(client, deque()).append(now)
            self._all.append(now)
