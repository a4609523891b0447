"""``m2p pricing``: the lowest lease price per GPU at which leasing beats mining on this fleet (pure).

Per card model and VRAM: mining earns ``mining_revenue_per_gpu_day`` / 24 an hour and costs its power,
``gpu_power_watts`` / 1000 x ``power_price_per_kwh``.  A lease draws about the same power (a full CUDA
load; mining rigs often run their cards undervolted, so if anything more), so the floor covers that
power and mining's net by the margin:

    floor per GPU-hour = power cost + (1 + margin) x max(mining net, 0)

The issue asked for "mining revenue minus power" alone; that leases at a loss whenever power is
dear, because the lease pays the power too.  Figures come from the economics file; measured hashrates
(issue 17's agent side) are not there yet, and the output says which source it used.  A model without
a revenue figure has no floor: "unknown", never a guess.

The Akash provider chart's ``price_target_gpu_mappings`` takes USD per GPU-month (keys ``<model>``,
``<model>.<vram>``, ``<model>.<vram>.<interface>``; an unlisted model gets the highest price in the
map: helm-charts provider chart, price_script_generic.sh); a month here is 730 hours (365 x 24 / 12).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from miner2provider.economics import Economics

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


def floors(cards: Iterable[tuple[str, str]], economics: Economics) -> list[Floor]:
    """One Floor per (model, memory) of the fleet's cards."""
    out = []
    for (model, memory), count in sorted(Counter(cards).items()):
        revenue, watts = economics.mining_revenue(model), economics.power(model)
        floor = economics.floor_per_hour(model)
        net = None if revenue is None else revenue / 24 - economics.power_cost_per_hour(model)
        out.append(Floor(model, memory, count, revenue, watts, net, floor))
    return out


def akash_mappings(listed: list[Floor]) -> str:
    """``price_target_gpu_mappings``: ``model.vram=USD per GPU-month`` for every model with a floor."""
    return ",".join(f"{f.key}={f.floor_per_month:.2f}" for f in listed if f.floor_per_month is not None)
