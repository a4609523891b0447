"""The AKT price in USD from where Akash's own bid script gets it, for the wallet's USD value when the provider file
says ``akt_usd: feed``: DIA's quotation of AKT on Osmosis, then CoinGecko's (akash-network/helm-charts f3d8d46
charts/akash-provider/scripts/price_script_generic.sh, get_akt_price: the same two URLs in that order, a price
taken only when it is a number above 0 and at most 1,000,000, and kept 60 minutes "to reduce the API pressure").

    DIA:       {"Symbol": "AKT", "Name": "Akash Network", "Price": 0.85, "PriceYesterday": ..., "Time": "...", ...}
    CoinGecko: {"akash-network": {"usd": 0.85}}

DIA's quotation counts only while its ``Time`` (RFC 3339, as Go writes it: "2026-11-29T14:05:12.123456789Z") is at
most MAX_QUOTE_AGE_S old and not ahead of this machine's clock by more than CLOCK_SKEW_S; otherwise CoinGecko, which
carries no time, is asked.  Each is one HTTPS read through core/deadline.py (certificate verified, no redirect, a size
cap, a deadline); what fails is a reason naming the feed, never its text.  Asked only when the owner chose it: by
default m2p asks no one.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from miner2provider.core.deadline import NoAnswer, exchange

DIA = ("https://api.diadata.org/v1/assetQuotation/Osmosis/"
       "ibc-C2CFB1C37C146CF95B0784FD518F8030FEFC76C5800105B1742FB65FFE65F873")
COINGECKO = "https://api.coingecko.com/api/v3/simple/price?ids=akash-network&vs_currencies=usd"
FEEDS = (("DIA", DIA), ("CoinGecko", COINGECKO))
TIMEOUT_S = 3.0  # the bid script's --max-time 3
MAX_BYTES = 64 * 1024
MAX_USD = 1_000_000.0
KEEP_S = 3600.0  # the bid script's cache
# DIA recomputes a live quotation far more often than hourly (its Time is when; not measured here), so two hours
# leaves room for a slow spell of theirs, and a price kept another hour (KEEP_S) is then at most three hours old,
# where a quotation DIA stopped recomputing days ago would otherwise be shown as today's.
MAX_QUOTE_AGE_S = 2 * 3600.0
CLOCK_SKEW_S = 300.0  # how far DIA's clock may run ahead of this machine's before its time is not believed
# RFC 3339 date-time as Go writes it (up to 9 fractional digits), strictly: its offset required, the extended form
# only.  datetime.fromisoformat takes more (no offset, a naive time read as local; the basic form) and refuses less.
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
                      r"(?:([Zz])|([+-])(\d{2}):(\d{2}))", re.ASCII)


class _NotCurrent(Exception):
    """A quotation that is a price but not one of now; its argument is the reason, in m2p's words."""


def _price_in(name: str, doc: Any) -> float:
    value = doc["Price"] if name == "DIA" else doc["akash-network"]["usd"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("not a number")
    if not (math.isfinite(value) and 0 < value <= MAX_USD):
        raise ValueError("out of range")
    return float(value)


def _rfc3339_time(text: Any) -> datetime | None:
    """The moment, in UTC, an RFC 3339 date-time names (fractions past microseconds dropped), or None when it names
    none."""
    found = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if found is None:
        return None
    year, month, day, hour, minute, second, fraction, _zulu, sign, offset_h, offset_m = found.groups()
    try:
        offset = timedelta(hours=int(offset_h or 0), minutes=int(offset_m or 0)) * (-1 if sign == "-" else 1)
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                        int((fraction or "0")[:6].ljust(6, "0")), timezone(offset)).astimezone(UTC)
    except (ValueError, OverflowError):  # a day, hour or offset out of range (a leap second's :60 too), or UTC's
        return None                      # moment before year 1 or after 9999


def _check_current(doc: Any, now: float) -> None:
    """Raise _NotCurrent unless DIA's quotation says when it was made and that is recent by ``now``'s clock."""
    quoted = _rfc3339_time(doc.get("Time"))
    if quoted is None:
        raise _NotCurrent("its quotation has no time")
    age_s = now - quoted.timestamp()
    said = f"{quoted:%Y-%m-%dT%H:%M:%SZ}"  # the time as parsed, never as the feed wrote it
    if age_s < -CLOCK_SKEW_S:
        raise _NotCurrent(f"its quotation's time ({said}) is ahead of this machine's clock")
    if age_s > MAX_QUOTE_AGE_S:
        raise _NotCurrent(f"its quotation is stale (from {said})")


def usd_per_akt(feeds: tuple[tuple[str, str], ...] = FEEDS, timeout_s: float = TIMEOUT_S,
                clock: Callable[[], float] = time.time) -> tuple[float, str] | str:
    """(price, where it came from) from the first feed that gives one, or why none did; ``clock`` is the wall
    clock DIA's quotation time is held against."""
    why = []
    for name, url in feeds:
        try:
            _, body = exchange(url, timeout_s, MAX_BYTES)
            doc = json.loads(body)
            price = _price_in(name, doc)
            if name == "DIA":
                _check_current(doc, clock())
            return price, f"{name}, as Akash's bid script reads it"
        except (NoAnswer, _NotCurrent) as exc:
            why.append(f"{name}: {exc}")
        except (ValueError, TypeError, KeyError, RecursionError, OverflowError):  # a 400-digit Price overflows
            why.append(f"{name}: not its price quotation")
    return "no AKT price: " + "; ".join(why)


def kept(ask: Callable[[], tuple[float, str] | str], clock: Callable[[], float] = time.monotonic,
         keep_s: float = KEEP_S) -> Callable[[], tuple[float, str] | str]:
    """``ask`` answered from its last price for ``keep_s``; a failure is never kept (the next read asks again)."""
    lock = threading.Lock()
    last: list[tuple[float, tuple[float, str]]] = []

    def price() -> tuple[float, str] | str:
        with lock:
            if last and clock() - last[0][0] < keep_s:
                return last[0][1]
        got = ask()
        if not isinstance(got, str):
            with lock:
                last[:] = [(clock(), got)]
        return got
    return price
