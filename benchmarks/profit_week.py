"""Policy profit over a simulated week of price changes, beside fixed windows and always-mining.

Run:  .venv/bin/python benchmarks/profit_week.py [--seed 7] [--gpus 8] [--lease-price 0.22] [--demand 0.15]

A rig of --gpus RTX 3090s.  Mining revenue per GPU-day follows a random walk, a step each hour
(coin price and difficulty; seeded), around the economics file's figure; power is 300 W at 0.12 per
kWh; the lease price is fixed (the provider's bid).  Leases arrive as a seeded stream of (minute,
hours); one is taken only when the rig is offered and holds no lease.  Every minute the same pure
code the agent runs decides: profit.decide_offer (policy profit only), policy.desired_at and
decide.decide; the simulated rig stops and starts its miner as told, and a lease never ends before
its time (no policy cuts one).  Earnings per minute: a lease pays its price, a running miner earns
the revenue of the hour, and either costs the power.

Printed per policy: hours leased, mined and idle, miner switches, earnings, and the earnings as a
ratio of always-mining's (the baseline, run side by side on the same prices and lease stream).
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from miner2provider.agent.decide import START_MINER, STOP_MINER, Observation, State, decide  # noqa: E402
from miner2provider.timeshare import (  # noqa: E402
    economics,  # noqa: E402
    model,
    policy,
    profit,
)

START = datetime(2026, 11, 23, tzinfo=UTC)  # a Monday
WEEK_MIN = 7 * 24 * 60
POWER_W, POWER_PRICE = 300.0, 0.12
SCHEDULES = {
    "always mining": "timezone: UTC\npolicy: fixed\ndefault: mine\nmin_switch_interval: 10m\n",
    "fixed windows (lease 18:00-08:00)": "timezone: UTC\npolicy: lease-first\nmin_switch_interval: 10m\n"
                                         "windows:\n  - {days: daily, from: '08:00', to: '18:00', mode: mine}\n",
    "profit": "timezone: UTC\npolicy: profit\nmin_switch_interval: 10m\nhysteresis: 0.05\n",
}


@dataclass
class Tally:
    leased_min: int = 0
    mined_min: int = 0
    idle_min: int = 0
    switches: int = 0
    earnings: float = 0.0


def revenue_walk(rng: random.Random, mean_per_day: float) -> list[float]:
    """Mining revenue per GPU-day for each hour of the week: a mean-reverting random walk."""
    value, out = mean_per_day, []
    for _ in range(7 * 24):
        value += 0.15 * (mean_per_day - value) + rng.gauss(0, 0.08 * mean_per_day)
        out.append(max(value, 0.0))
    return out


def lease_stream(rng: random.Random, per_hour: float) -> dict[int, int]:
    """minute -> lease length in minutes: arrivals at ``per_hour`` on average, 1 to 12 hours long."""
    return {m: rng.randint(1, 12) * 60 for m in range(WEEK_MIN) if rng.random() < per_hour / 60}


def simulate(schedule: model.Schedule, revenue: list[float], leases: dict[int, int], gpus: int,
             lease_price: float) -> Tally:
    tally, state, offer = Tally(), State(), profit.Offer()
    miner, lease_ends = True, -1
    power_cost_min = gpus * POWER_W / 1000 * POWER_PRICE / 60
    for minute in range(WEEK_MIN):
        now = minute * 60.0
        per_day = revenue[minute // 60]
        figures = economics.Economics(lease_per_gpu_hour={"rtx3090": lease_price},
                                      mining_per_gpu_day={"rtx3090": per_day}, power_watts={"rtx3090": POWER_W},
                                      power_price_per_kwh=POWER_PRICE)
        if schedule.policy == "profit":
            offer = profit.decide_offer(offer, profit.quote({"rtx3090": gpus}, figures), now, schedule.hysteresis,
                                        schedule.min_switch_interval_s)
        desired = policy.desired_at(schedule, START + timedelta(minutes=minute), offer.offered)
        leased = lease_ends > minute
        if not leased and state.offered and minute in leases:
            lease_ends, leased = minute + leases[minute], True
        obs = Observation(now, desired, True, int(leased), 0, False, miner, miner)
        state, actions = decide(state, obs, None, schedule.min_switch_interval_s)
        for action in actions:
            if action in (START_MINER, STOP_MINER):
                tally.switches += 1
                miner = action == START_MINER
        if leased and miner:
            raise AssertionError(f"minute {minute}: mining beside a lease")
        if leased:
            tally.leased_min += 1
            tally.earnings += gpus * lease_price / 60 - power_cost_min
        elif miner:
            tally.mined_min += 1
            tally.earnings += gpus * per_day / 1440 - power_cost_min
        else:
            tally.idle_min += 1
    return tally


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--lease-price", type=float, default=0.22, help="per GPU-hour")
    parser.add_argument("--mining", type=float, default=3.6, help="mean mining revenue per GPU-day")
    parser.add_argument("--demand", type=float, default=0.15, help="lease arrivals per hour")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    revenue, leases = revenue_walk(rng, args.mining), lease_stream(rng, args.demand)
    floor_now = economics.Economics(mining_per_gpu_day={"m": args.mining}, power_watts={"m": POWER_W},
                                    power_price_per_kwh=POWER_PRICE).floor_per_hour("m")
    print(f"{args.gpus} x rtx3090, lease {args.lease_price:.3f}/GPU-h, mining {min(revenue):.2f}-{max(revenue):.2f}"
          f"/GPU-day (mean {args.mining:.2f}: floor {floor_now:.3f}/GPU-h), {len(leases)} lease offers, seed {args.seed}")
    results = {name: simulate(model.parse(text, name), revenue, leases, args.gpus, args.lease_price)
               for name, text in SCHEDULES.items()}
    base = results["always mining"].earnings
    print(f"{'policy':36} {'leased h':>9} {'mined h':>8} {'idle h':>7} {'switches':>8} {'earnings':>9} {'x base':>7}")
    for name, t in results.items():
        ratio = t.earnings / base if base else float("nan")
        print(f"{name:36} {t.leased_min / 60:9.1f} {t.mined_min / 60:8.1f} {t.idle_min / 60:7.1f} {t.switches:8d} "
              f"{t.earnings:9.2f} {ratio:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
