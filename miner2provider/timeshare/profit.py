"""Policy ``profit``: does a lease pay more than mining on this rig, now?  Pure, so it is property-tested.

The rig's quote sums its cards (a rig of mixed models is offered as a whole, as the agent offers it):

    lease  = sum over cards of the lease price per GPU-hour of the card's model
    floor  = sum over cards of economics.floor_per_hour(model)
             (power + (1 + margin) x max(mining net, 0): pricing.py says why a lease covers its power)

With the agent's measured hashrates (agent/measure.py: the mining OS's own stats, averaged) and the
file's ``mining_revenue_per_mhs_day`` for the algorithm mined, each GPU's floor comes from its own
hashrate (and its measured watts, when the OS reports them) instead of the per-GPU figure: the
quote says which (``source``).

The rig is offered when ``lease >= floor x (1 + hysteresis) + reclaim`` and stays offered until
``lease < floor x (1 - hysteresis)``: a price that wobbles around the floor does not flip the rig.

``reclaim`` prices the reclamation window W (issue 36), when the provider offers one: a withdrawal takes
effect only W after it is decided (the tenant is reclaimed, paid in full, and mining waits), so every offer
ends with up to W hours leased at a price below mining's.  The rig withdraws once the lease pays less than
``floor x (1 - h)``, so mining then beats the lease by at least ``floor x h`` an hour, for W hours.  That
cost is spread over the offer it ends, which lasts at least ``max(W, min_switch_interval)`` (a lease won
is held at least W):

    reclaim = floor x h x W / max(W, min_switch_interval)

It is the least the hand-back costs at the band's edge (mining may climb further during W; an offer may
last longer): an estimate, said in the status, never a promise.  Without a window, or with no
hysteresis, it is 0 and the offer is as before.
The offer never changes sooner than ``min_switch_interval`` after its last change.  A missing
figure decides nothing: the offer stays as it is and the agent reports what is missing (a rig with
no decision yet mines, as it did before m2p).  Whatever the offer, a running lease is never cut:
decide.py drains, it does not evict.

What is really leased (``leased``): a lease of k of the rig's N GPUs earns ``lease x k / N``.  Where the rig
hands over whole (every mining OS but HiveOS; agent status ``hand_over``) the whole rig's mining is forgone
for it; where it hands over per card (decide.py) only those k cards' mining is.  The quote says what the
leases pay while they last (``leased_per_hour``, beside the whole rig's ``floor``).  The offer is not
withdrawn for it: withdrawing cuts no lease, it only keeps the rig's idle cards from being leased too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Tuple  # noqa: UP035 (see Hashrates)

from miner2provider.timeshare.economics import Economics

# m2p's own per-model label with the count as value (market/labels.py): m2p.io/gpu.model.rtx3090=2.  The
# marketplace's labels are its own business (they say the same today, and may change with it).
_MODEL_LABEL = re.compile(r"^m2p\.io/gpu\.model\.([A-Za-z0-9_-]+)$")


@dataclass(frozen=True)
class Quote:
    lease_per_hour: float | None  # what leases pay for all the rig's GPUs, per hour
    floor_per_hour: float | None  # the lease income above which leasing beats mining by the margin
    missing: str = ""  # "lease_price_per_gpu_hour for rtx3090": why a figure is None
    source: str = "economics file"  # or "measured kawpow hashrate"
    reclaim_per_hour: float = 0.0  # the reclamation window's price, added to the offer's threshold (priced)
    leased_gpus: int = 0  # the GPUs the running leases hold, at most ``gpus`` (leased)
    gpus: int = 0  # the rig's GPUs

    @property
    def leased_per_hour(self) -> float | None:
        """What the running leases pay: their share of ``lease_per_hour`` (the module's docstring)."""
        if self.lease_per_hour is None or not self.leased_gpus or not self.gpus:
            return None
        return self.lease_per_hour * self.leased_gpus / self.gpus

    def as_status(self) -> dict[str, object]:
        leased = self.leased_per_hour
        return {"lease_per_hour": _cents(self.lease_per_hour), "floor_per_hour": _cents(self.floor_per_hour),
                "source": self.source, **({"missing": self.missing} if self.missing else {}),
                **({"reclaim_per_hour": _cents(self.reclaim_per_hour)} if self.reclaim_per_hour else {}),
                **({"leased": {"gpus": self.leased_gpus, "of": self.gpus, "per_hour": _cents(leased)}}
                   if leased is not None else {})}


@dataclass(frozen=True)
class Offer:
    offered: bool = False  # mining until the first quote says otherwise
    changed: float = float("-inf")  # when ``offered`` last changed


def cards_from_labels(labels: Mapping[str, str]) -> dict[str, int]:
    """model -> count from the rig's node labels (``/var/lib/m2p/node-labels.json``)."""
    cards: dict[str, int] = {}
    for key, value in labels.items():
        match = _MODEL_LABEL.match(key)
        if match and str(value).isdigit():
            cards[match.group(1)] = cards.get(match.group(1), 0) + int(value)
    return cards


# (algorithm, MH/s per GPU, watts per GPU or empty): the agent's rolling average of the miner's stats.
# typing's Tuple: this alias is evaluated, and the agent runs on python3 3.8.
Hashrates = Tuple[str, Tuple[float, ...], Tuple[float, ...]]  # noqa: UP006


def quote(cards: Mapping[str, int], economics: Economics, measured: Hashrates | None = None) -> Quote:
    """``cards``: model -> count (the rig's m2p.io/gpu.model labels)."""
    file_quote = _file_quote(cards, economics)
    if measured is None or not cards or any(economics.lease_price(m) is None for m in cards):
        return file_quote
    algo, mhs, watts = measured
    per_mhs = economics.mining_per_mhs_day.get(algo)
    if per_mhs is None:
        return Quote(file_quote.lease_per_hour, file_quote.floor_per_hour, file_quote.missing,
                     f"economics file (no mining_revenue_per_mhs_day for the measured {algo})")
    lease = sum(n * (economics.lease_price(m) or 0.0) for m, n in cards.items())
    gpus = sum(cards.values())
    if watts:  # the agent's measured watts: the file's are not needed
        powers = [economics.power_cost_of(w) for w in watts]
    else:
        costs = {m: economics.power_cost_per_hour(m) for m in cards}
        unknown = sorted(m for m, cost in costs.items() if cost is None)
        if unknown:  # power priced but these models have no watts: unknown, never free
            return Quote(lease, None, "; ".join(f"gpu_power_watts for {m}" for m in unknown),
                         f"measured {algo} hashrate of {len(mhs)} GPUs")
        powers = [sum(n * (costs[m] or 0.0) for m, n in cards.items()) / max(gpus, 1)] * len(mhs)
    floor = sum(economics.floor(rate * per_mhs, power) for rate, power in zip(mhs, powers))
    return Quote(lease, floor, "", f"measured {algo} hashrate of {len(mhs)} GPUs")


def _file_quote(cards: Mapping[str, int], economics: Economics) -> Quote:
    lease, floor, missing = 0.0, 0.0, []
    for model, count in sorted(cards.items()):
        price, model_floor = economics.lease_price(model), economics.floor_per_hour(model)
        if price is None:
            missing.append(f"lease_price_per_gpu_hour for {model}")
        else:
            lease += count * price
        if model_floor is None:
            missing.append(f"{economics.lacking(model)} for {model}")
        else:
            floor += count * model_floor
    if not cards:
        missing.append("the rig's GPU models (no m2p.io/gpu.model labels yet: run m2p convert)")
    return Quote(None if missing else lease, None if missing else floor, "; ".join(missing))


def priced(rig_quote: Quote, hysteresis: float, window_s: float | None, min_switch_interval_s: float) -> Quote:
    """``rig_quote`` with the reclamation window's price (``reclaim_per_hour``, the module's docstring says why)."""
    floor = rig_quote.floor_per_hour
    if floor is None or not window_s or window_s <= 0:
        return replace(rig_quote, reclaim_per_hour=0.0)
    return replace(rig_quote, reclaim_per_hour=max(floor, 0.0) * hysteresis * window_s
                   / max(window_s, min_switch_interval_s))


def leased(rig_quote: Quote, leased_gpus: int, gpus: int) -> Quote:
    """``rig_quote`` saying what the running leases hold: ``leased_gpus`` of the rig's ``gpus`` (never more)."""
    gpus = max(gpus, 0)
    return replace(rig_quote, leased_gpus=min(max(leased_gpus, 0), gpus), gpus=gpus)


def decide_offer(offer: Offer, rig_quote: Quote, now: float, hysteresis: float,
                 min_switch_interval_s: float) -> Offer:
    if rig_quote.lease_per_hour is None or rig_quote.floor_per_hour is None:
        return offer
    lease, floor = rig_quote.lease_per_hour, rig_quote.floor_per_hour
    wanted = (lease >= floor * (1 - hysteresis) if offer.offered
              else lease >= floor * (1 + hysteresis) + rig_quote.reclaim_per_hour)
    # ``changed`` is wall clock (it outlives a reboot): a clock stepped back to before it serves the interval
    # rather than holding the offer for as long as the step.
    if wanted == offer.offered or 0 <= now - offer.changed < min_switch_interval_s:
        return offer
    return Offer(wanted, now)


def _cents(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
