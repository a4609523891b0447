"""What a GPU-hour is worth leased and mined: the user's economics file (issue 16; issue 17 will feed
measured figures into the same shape).

    currency: USD
    lease_price_per_gpu_hour:      # what a lease pays per GPU-hour, by model name
      default: 0.15
      rtx3090: 0.22
    mining_revenue_per_gpu_day:    # what mining earns per GPU-day after pool fees, before power
      default: 0.40
      rtx3090: 0.95
    gpu_power_watts:               # what a card draws mining (for m2p pricing: power is a cost)
      default: 200
    power_price_per_kwh: 0.12
    margin: 0.15                   # how much more than mining's net a lease must pay (0.15: 15 %)
    mining_revenue_per_mhs_day:    # what 1 MH/s earns a day per algorithm (coin and pool, after fees):
      kawpow: 0.024                # with the agent's measured hashrates, this replaces the per-GPU figure

Models are the names m2p's GPU labels use (``m2p.io/gpu.model.rtx3090``: ``rtx3090``, ``cmp90hx``);
``default`` serves a model the file does not list.  A model with neither its own figure nor a default has
no estimate: it is shown as unknown, never guessed; with a power price, a model without watts has no floor (its power
is unknown, never free).  The names themselves are held to m2p's card database on the controller
(market/pricing.py ``check_models``): this parser runs on rigs too and knows no marketplace.
Every mistake is an EconomicsError at its file:line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from miner2provider.core import textfiles
from miner2provider.core.errors import EconomicsError

PRICES = ("lease_price_per_gpu_hour", "mining_revenue_per_gpu_day", "gpu_power_watts", "mining_revenue_per_mhs_day")
PER_MODEL = PRICES[:3]  # keyed by GPU model; the last is keyed by algorithm
SCALARS = ("power_price_per_kwh", "margin")
KEYS = {"currency", *PRICES, *SCALARS}
MAX_PRICE = 1_000_000.0  # per GPU-hour or GPU-day: anything above is a typo, not a market
MAX_MARGIN = 10.0  # 1000 %


@dataclass(frozen=True)
class Economics:
    source: str = ""
    currency: str = "USD"
    lease_per_gpu_hour: dict[str, float] = field(default_factory=dict)
    mining_per_gpu_day: dict[str, float] = field(default_factory=dict)
    power_watts: dict[str, float] = field(default_factory=dict)
    power_price_per_kwh: float | None = None
    margin: float = 0.0
    mining_per_mhs_day: dict[str, float] = field(default_factory=dict)  # by algorithm
    # "key.model" -> "file:line", for the per-model maps: where a model's figure was written
    lines: dict[str, str] = field(default_factory=dict, compare=False)

    def models(self) -> dict[str, str]:
        """Every model the per-GPU maps name (not ``default``), with where it was first written."""
        found: dict[str, str] = {}
        for name, where in self.lines.items():
            key, _, model = name.partition(".")
            if key in PER_MODEL and model and model != "default":
                found.setdefault(model, where)
        return found

    def lease_price(self, model: str) -> float | None:
        return self.lease_per_gpu_hour.get(model, self.lease_per_gpu_hour.get("default"))

    def mining_revenue(self, model: str) -> float | None:
        return self.mining_per_gpu_day.get(model, self.mining_per_gpu_day.get("default"))

    def power(self, model: str) -> float | None:
        return self.power_watts.get(model, self.power_watts.get("default"))

    def power_cost_per_hour(self, model: str) -> float | None:
        """What one card of ``model`` costs in power per hour, by the file's watts: 0 when the file prices no
        power (power is then counted for no card), None when it prices power but gives ``model`` no watts (its
        own or ``default``): unknown, never free."""
        if self.power_price_per_kwh is None:
            return 0.0
        watts = self.power(model)
        return None if watts is None else self.power_cost_of(watts)

    def power_cost_of(self, watts: float) -> float:
        """What drawing ``watts`` (a figure or the agent's measurement) costs per hour (0 without a power price)."""
        if self.power_price_per_kwh is None:
            return 0.0
        return watts / 1000 * self.power_price_per_kwh

    def floor_per_hour(self, model: str) -> float | None:
        """The lowest lease price per GPU-hour that beats mining by the margin (pricing.py says why the
        lease covers the power too); None without a mining revenue figure for the model, or without its
        watts when power has a price (``lacking`` says which)."""
        revenue, power = self.mining_revenue(model), self.power_cost_per_hour(model)
        if revenue is None or power is None:
            return None
        return self.floor(revenue, power)

    def lacking(self, model: str) -> str:
        """Why ``model`` has no floor (the key it lacks), or "" when it has one."""
        if self.mining_revenue(model) is None:
            return "mining_revenue_per_gpu_day"
        return "gpu_power_watts" if self.power_cost_per_hour(model) is None else ""

    def floor(self, revenue_per_day: float, power_per_hour: float) -> float:
        """The floor for one card earning ``revenue_per_day`` mining and costing ``power_per_hour``."""
        return power_per_hour + (1 + self.margin) * max(revenue_per_day / 24 - power_per_hour, 0.0)


NONE = Economics()


def load(path: str | Path) -> Economics:
    return parse(textfiles.read_text(path, "economics file", EconomicsError), str(path))


def parse(text: str, path: str = "<economics>") -> Economics:
    root = textfiles.yaml_tree(text, path, EconomicsError)
    if not isinstance(root, yaml.MappingNode):
        raise EconomicsError(f"an economics file is a mapping with currency, {' and '.join(PRICES)}",
                             where=f"{path}:1")
    fields = textfiles.fields(root, path, EconomicsError, "economics", KEYS)
    currency: object = "USD"
    if "currency" in fields:
        node, currency = fields["currency"]
        if not isinstance(currency, str) or not currency.isalpha() or not 2 <= len(currency) <= 5:
            raise EconomicsError(f"currency {textfiles.shown(currency)}: use a code such as USD or AKT",
                                 where=textfiles.at(path, node))
    prices: dict[str, dict[str, float]] = {}
    lines: dict[str, str] = {}
    for key in PRICES:
        if key not in fields:
            prices[key] = {}
            continue
        node, _ = fields[key]
        lines[key] = textfiles.at(path, node)
        if not isinstance(node, yaml.MappingNode):
            raise EconomicsError(f"{key} is a mapping of model: price (and default: price)",
                                 where=textfiles.at(path, node))
        models = textfiles.fields(node, path, EconomicsError, key, None)
        prices[key] = {model: _price(path, key, model, value_node, value)
                       for model, (value_node, value) in models.items()}
        lines.update({f"{key}.{model}": textfiles.at(path, value_node) for model, (value_node, _) in models.items()})
    scalars: dict[str, float | None] = {}
    for key in SCALARS:
        if key in fields:
            scalar_node, value = fields[key]
            scalars[key] = _price(path, key, "", scalar_node, value, most=MAX_MARGIN if key == "margin" else MAX_PRICE)
        else:
            scalars[key] = None
    margin = scalars["margin"] or 0.0
    return Economics(path, str(currency), prices[PRICES[0]], prices[PRICES[1]], prices[PRICES[2]],
                     scalars["power_price_per_kwh"], margin, mining_per_mhs_day=prices[PRICES[3]], lines=lines)


def _price(path: str, key: str, model: str, node: yaml.Node, value: object, most: float = MAX_PRICE) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 <= value <= most:
        name = f"{key}.{model}" if model else key
        raise EconomicsError(f"{name} is {textfiles.shown(value)}: a number from 0 to {most:g}",
                             where=textfiles.at(path, node))
    return float(value)
