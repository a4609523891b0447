"""Who is signed in, and who is guessing: the dashboard's sessions and its login rate limit.

A session is a random 256-bit ID the server remembers (never derived from the token, so a stolen cookie
dies with its session, at logout or after SESSION_TTL_S), kept in memory: restarting the dashboard signs
everyone out.  Each session is bound to who opened it (the local user on this machine, else the address:
peer.py) and the port it was opened on; the same cookie from anyone else, or on another port, is no
session.

Wrong tokens (the login form's and Bearer's alike) are limited per guesser, and beyond loopback for all
addresses together.  A guesser over its limit waits even with the right token (the limit is on trying,
so the token cannot be guessed faster than the limit), which is why the guesser must be the one who
waits: keyed by address, every local user is 127.0.0.1 and one of them locked the operator out; keyed by
local user, wrong guesses slow only their own user.  Local users are not in the limit for all: each is
one key that cannot pass for another, while addresses beyond this machine are many and cheap."""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .peer import Client

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
    _bound: dict[str, str] = field(default_factory=dict)  # session -> what it is bound to (Sessions.binding)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def binding(client: Client, port: int) -> str:
        return f"{client.key()} on port {port}"

    def open(self, binding: str) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            now = self.clock()
            for old in [s for s, until in self._expires.items() if until <= now]:
                self._drop(old)
            while len(self._expires) >= MAX_SESSIONS:
                self._drop(min(self._expires, key=self._expires.__getitem__))
            self._expires[sid] = now + self.ttl_s
            self._bound[sid] = binding
        return sid

    def valid(self, sid: str, binding: str) -> bool:
        """``sid`` is a live session opened by ``binding``'s client on its port (a replay by anyone else is
        refused, and leaves the session as it was: the intruder cannot end the operator's)."""
        return self.bound_to(sid) == binding

    def bound_to(self, sid: str) -> str | None:
        """What the live session ``sid`` is bound to; None when there is no such session (asked first, so a
        request with no session costs no look-up of its client)."""
        with self._lock:
            until = self._expires.get(sid)
            if until is not None and until <= self.clock():
                self._drop(sid)
                return None
            return None if until is None else self._bound[sid]

    def close(self, sid: str, binding: str) -> None:
        if self.valid(sid, binding):
            with self._lock:
                self._drop(sid)

    def _drop(self, sid: str) -> None:
        self._expires.pop(sid, None)
        self._bound.pop(sid, None)


@dataclass
class LoginLimiter:
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=dict)
    _all: deque[float] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_s(self, client: Client) -> float:
        """0 when ``client`` may try a token now, else the seconds until it may."""
        with self._lock:
            now = self.clock()
            mine = self._failures.get(client.key(), deque())
            for times in (mine, self._all):
                while times and times[0] <= now - FAILURE_WINDOW_S:
                    times.popleft()
            if not mine:
                self._failures.pop(client.key(), None)
            limits = [(mine, FAILURES_PER_CLIENT)] + ([(self._all, FAILURES_IN_ALL)] if client.uid is None else [])
            waits = [times[0] + FAILURE_WINDOW_S - now for times, most in limits if len(times) >= most]
            return max(waits, default=0.0)

    def failed(self, client: Client) -> None:
        with self._lock:
            now = self.clock()
            self._failures.setdefault(client.key(), deque()).append(now)
            if client.uid is None:
                self._all.append(now)
