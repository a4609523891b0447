"""Next month's income from the last 30 days' utilisation (issue 57): each card earns next month what the same cards
earned per GPU-hour the ledger covered, leased share and mined share as they were, never "every card leased".

Per class of rigs valued alike (income.py): the leased share is the GPU-hours leased over the GPU-hours the ledger
covered, the mined share likewise; next month's GPU-hours (the class's GPUs today x 24 x the month's days) are
split by those shares and valued by views.py's own ``values``.  A class with no hours in the basis (rigs new to the
history) forecasts nothing and is counted as such: a forecast is never guessed.  Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any

from miner2provider.dashboard import views


def next_month(basis: Iterable[tuple[views.Rates, float, float, float, int]], today: date) -> dict[str, Any]:
    """From (rates, GPU-seconds covered, leased, mined, GPUs today) per class: next calendar month's forecast."""
    following = date(today.year + today.month // 12, today.month % 12 + 1, 1)
    after = date(following.year + following.month // 12, following.month % 12 + 1, 1)
    days = (after - following).days
    money: dict[str, float | None] = {"lease": 0.0, "mining": 0.0, "mining_equivalent": 0.0}
    covered = leased = mined = 0.0
    gpus = without = 0
    for rates, available, leased_s, mined_s, count in basis:
        gpus += count
        if available <= 0:
            without += count
            continue
        covered, leased, mined = covered + available, leased + leased_s, mined + mined_s
        ahead = count * days * views.DAY  # next month's GPU-seconds of the class
        valued = views.values(ahead * leased_s / available, ahead * mined_s / available, rates)
        for name, value, share in zip(money, valued, (leased_s, mined_s, leased_s), strict=True):
            if share:
                found = money[name]
                money[name] = None if value is None or found is None else found + value
    lease, mining = money["lease"], money["mining"]
    return {"month": following.strftime("%Y-%m"), "days": days, "gpus": gpus, "gpus_without_history": without,
            "leased_share": round(leased / covered, 4) if covered else None,
            "mined_share": round(mined / covered, 4) if covered else None,
            **{name: None if value is None else round(value, 2) for name, value in money.items()},
            "total": None if lease is None or mining is None else round(lease + mining, 2)}
