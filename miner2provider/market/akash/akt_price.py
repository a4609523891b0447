"""The AKT price in USD from where Akash's own bid script gets it, for the wallet's USD value when the provider file
says ``akt_usd: feed``: DIA's quotation of AKT on Osmosis, then CoinGecko's (akash-network/helm-charts f3d8d46
charts/akash-provider/scripts/price_script_generic.sh, get_akt_price: the same two URLs in that order, a price
taken only when it is a number above 0 and at most 1,000,000, and kept 60 minutes "to reduce the API pressure").

    DIA:       {"Symbol": "AKT", "Name": "Akash Network", "Price": 0.85, "PriceYesterday": ..., "Time": "...", ...}
    CoinGecko: {"akash-network": {"usd": 0.85}}

Each is one HTTPS read through core/deadline.py (certificate verified, no redirect, a size cap, a deadline); what
fails is a reason naming the feed, never its text.  Asked only when the owner chose it: by default m2p asks no one.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
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


def _price_in(name: str, doc: Any) -> float:
    value = doc["Price"] if name == "DIA" else doc["akash-network"]["usd"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("not a number")
    if not (math.isfinite(value) and 0 < value <= MAX_USD):
        raise ValueError("out of range")
    return float(value)


def usd_per_akt(feeds: tuple[tuple[str, str], ...] = FEEDS, timeout_s: float = TIMEOUT_S) -> tuple[float, str] | str:
    """(price, where it came from) from the first feed that gives one, or why none did."""
    why = []
    for name, url in feeds:
        try:
            _, body = exchange(url, timeout_s, MAX_BYTES)
            return _price_in(name, json.loads(body)), f"{name}, as Akash's bid script reads it"
        except NoAnswer as exc:
            why.append(f"{name}: {exc}")
        except (ValueError, TypeError, KeyError, RecursionError):
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
