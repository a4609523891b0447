"""``m2p pricing``: the lowest lease price per GPU at which leasing beats mining on this fleet (pure).

Per card model and VRAM: mining earns ``mining_revenue_per_gpu_day`` / 24 an hour and costs its power,
``gpu_power_watts`` / 1000 x ``power_price_per_kwh``.  A lease draws about the same power (a full CUDA
load; mining rigs often run their cards undervolted, so if anything more), so the floor covers that
power and mining's net by the margin:

    floor per GPU-hour = power cost + (1 + margin) x max(mining net, 0)

The issue asked for "mining revenue minus power" alone; that leases at a loss whenever power is
dear, because the lease pays the power too.  Where the fleet's agents measured their miners (HiveOS
rigs: agent/measure.py) and the economics file prices the algorithm (``mining_revenue_per_mhs_day``),
a model's floor is the mean of its measured cards' floors (their own hashrate and watts); otherwise
the file's per-GPU figures; the output says which.  A model without a revenue figure has no floor:
"unknown", never a guess.  Measured figures are paired with cards only on rigs of one model with as
many hashrates as cards (the miner's GPU order is not proven to be nvidia-smi's).

Marketplaces take these floors in their own form (Marketplace.price_mappings); a month here is 730 hours
(365 x 24 / 12).
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from miner2provider.core import textfiles
from miner2provider.core.errors import EconomicsError
from miner2provider.detect.facts.amd import AMDGPU_IDS
from miner2provider.market import cards as card_database
from miner2provider.market.cards import Card, amd_combos, cards_of
from miner2provider.rigside.status import Measured
from miner2provider.timeshare import economics as economics_file
from miner2provider.timeshare.economics import Economics

if TYPE_CHECKING:  # base.py imports Floor from here
    from miner2provider.market.base import RigGpus

HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class Floor:
    model: str
    memory: str  # "24Gi"
    gpus: int  # how many the fleet has
    mining_per_day: float | None
    power_watts: float | None
    net_per_hour: float | None  # mining revenue minus power, per GPU-hour
    floor_per_hour: float | None  # the lowest lease price per GPU-hour that beats mining by the margin
    source: str = "economics file"

    @property
    def floor_per_month(self) -> float | None:
        return None if self.floor_per_hour is None else self.floor_per_hour * HOURS_PER_MONTH

    @property
    def key(self) -> str:
        return f"{self.model}.{self.memory}" if self.memory else self.model


@dataclass(frozen=True)
class MeasuredCard:
    model: str
    memory: str
    algo: str
    mhs: float
    watts: float | None


def measured_cards(cards: list[Card], measured: Measured | None) -> list[MeasuredCard]:
    """One rig's cards with their measured hashrates, when they can be paired (see above)."""
    if measured is None or len(measured.mhs) != len(cards) or len({(c.slug, c.memory) for c in cards}) != 1:
        return []
    watts: list[float | None] = list(measured.watts) if len(measured.watts) == len(cards) else [None] * len(cards)
    return [MeasuredCard(c.slug, c.memory, measured.algo, rate, w)
            for c, rate, w in zip(cards, measured.mhs, watts, strict=True)]


def floors(cards: Iterable[tuple[str, str]], economics: Economics,
           measured: Iterable[MeasuredCard] = ()) -> list[Floor]:
    """One Floor per (model, memory) of the fleet's cards."""
    priced: dict[tuple[str, str], list[tuple[float, float, float | None]]] = {}  # (revenue/day, power/h, watts)
    for m in measured:
        per_mhs = economics.mining_per_mhs_day.get(m.algo)
        if per_mhs is not None:
            power = (economics.power_cost_of(m.watts) if m.watts is not None
                     else economics.power_cost_per_hour(m.model))
            if power is None:  # power priced, but neither measured nor in the file: unknown, never free
                continue
            priced.setdefault((m.model, m.memory), []).append((m.mhs * per_mhs, power, m.watts))
    out = []
    for (model, memory), count in sorted(Counter(cards).items()):
        if (model, memory) in priced:
            rows = priced[(model, memory)]
            revenue = _mean(r for r, _, _ in rows)
            watts = [w for _, _, w in rows if w is not None]
            out.append(Floor(model, memory, count, round(revenue, 4),
                             round(_mean(watts), 1) if watts else economics.power(model),
                             _mean(r / 24 - p for r, p, _ in rows), _mean(economics.floor(r, p) for r, p, _ in rows),
                             f"measured ({len(rows)} GPUs)"))
            continue
        figure, watts_figure = economics.mining_revenue(model), economics.power(model)
        power = economics.power_cost_per_hour(model)
        net = None if figure is None or power is None else figure / 24 - power
        out.append(Floor(model, memory, count, figure, watts_figure, net, economics.floor_per_hour(model)))
    return out


def fleet_floors(rigs: Iterable[RigGpus], economics: Economics) -> list[Floor]:
    """The floors of every card a fleet has (NVIDIA and AMD), with its measured hashrates where they pair."""
    listed = list(rigs)
    cards = [(c.slug, c.memory) for rig in listed for c in cards_of(rig.gpus)]
    cards += [(slug, memory) for rig in listed for slug, memory, _ in amd_combos(rig.amd)]
    measured = [m for rig in listed for m in measured_cards(cards_of(rig.gpus), rig.measured)]
    return floors(cards, economics, measured)


def known_models() -> set[str]:
    """Every model name m2p gives a card it knows (its NVIDIA database and the AMD cards detect names): the
    names an economics file may price."""
    return {card.slug for card in card_database.load().values()} | {slug for slug, _ in AMDGPU_IDS.values()}


def check_models(economics: Economics, farm_models: Iterable[str] = ()) -> Economics:
    """A money mistake is an error, never a silent default: every model the file names must be a card m2p knows
    (or one the farm has), with the closest known name offered; with a power price, every model the farm has
    must have its watts (its own or ``default``), since a card without them would be priced as if its power
    were free.  Returns ``economics``."""
    farm = set(farm_models)
    allowed = known_models() | farm
    for model, where in economics.models().items():
        if model not in allowed:
            close = closest_models(model, farm, allowed)
            hint = f"did you mean {' or '.join(close)}?" if close else \
                "`m2p pricing` and `m2p attributes` name each rig's"
            name = textfiles.printable(model if len(model) <= textfiles.SHOWN else model[:textfiles.SHOWN] + "...")
            raise EconomicsError(f"{name} is not a GPU model m2p knows, so its figure would price nothing: {hint}",
                                 where=where)
    if economics.power_price_per_kwh is not None:
        lacking = sorted(m for m in farm if economics.power(m) is None)
        if lacking:
            raise EconomicsError(f"gpu_power_watts has no figure for {', '.join(lacking)} (cards this farm has) and no "
                                 f"default: a card's power is a cost, never free; add {lacking[0]}: <watts>",
                                 where=economics.lines.get("gpu_power_watts", f"{economics.source}:1"))
    return economics


def closest_models(model: str, farm: set[str], allowed: set[str]) -> list[str]:
    """The likeliest meant names, the farm's own first: the name in lower case (RTX3070), then swapped digits
    (rtx3700 for rtx3070), then what difflib finds alike (``default`` among them: defualt)."""
    order = sorted(farm) + sorted(allowed - farm) + ["default"]
    lower = model.lower().replace(" ", "").replace("-", "")
    cased = [m for m in order if m == lower]
    swapped = [m for m in order if sorted(m) == sorted(lower)]
    alike = difflib.get_close_matches(lower, order, n=3, cutoff=0.75)
    return cased or swapped[:3] or alike


def load_checked(path: str | Path, farm_models: Iterable[str] = ()) -> Economics:
    """The economics file at ``path``, read and held to ``check_models``."""
    return check_models(economics_file.load(path), farm_models)


def farm_models(rigs: Iterable[RigGpus]) -> set[str]:
    """The model names of every card the rigs have (NVIDIA and AMD)."""
    listed = list(rigs)
    return {c.slug for rig in listed for c in cards_of(rig.gpus)} | {
        slug for rig in listed for slug, _, _ in amd_combos(rig.amd)}


def _mean(values: Iterable[float]) -> float:
    listed = list(values)
    return sum(listed) / len(listed)
