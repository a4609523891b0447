"""A month of a rig's ledger made by the agent's own code, not written by hand (issue 57's "a ledger of 30 days made
by the agent"): every 5 minutes of 30 days, the pure decide() the agent runs on a lease-first schedule (mine
08:00-18:00 UTC, offered the rest of the day), a seeded stream of leases of 1 to all of the rig's GPUs arriving
while the rig is offered, and the agent's ledger writer (agent/record.py ``Ledger.record``) appending its lines to
a real ledger file (agent rotation included).  A rig that must mine while a lease runs drains it (the reclaimer's
work, simulated as the lease ending at its time or at the window, whichever comes first).

No sandbox rig can live a month here: the wall clock of an nspawn rig is the machine's, so the agent's code is
driven with a simulated one, which is the only stand-in.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from miner2provider.agent.decide import START_MINER, STOP_MINER, Observation, State, decide
from miner2provider.agent.economy import MinerStats
from miner2provider.agent.record import Ledger
from miner2provider.agent.sight import Sight
from miner2provider.timeshare import model, policy

START = datetime(2026, 10, 1, tzinfo=UTC)
STEP_S = 300
SCHEDULE = model.parse("timezone: UTC\npolicy: lease-first\nmin_switch_interval: 10m\n"
                       "windows:\n  - {days: daily, from: '08:00', to: '18:00', mode: mine}\n", "month")


def month_ledger(directory: Path, seed: int, gpus: int = 4, days: int = 30) -> float:
    """Writes the rig's ledger into ``directory``; returns the simulated time the month ended (epoch seconds)."""
    rng = random.Random(seed)
    book, state, stats = Ledger(directory), State(), MinerStats()
    miner, lease_until, lease = True, 0.0, None
    steps = days * 86_400 // STEP_S
    for step in range(steps):
        now = START.timestamp() + step * STEP_S
        at = START + timedelta(seconds=step * STEP_S)
        desired = policy.desired_at(SCHEDULE, at)
        if lease is not None and (now >= lease_until or not desired.offered):
            lease = None  # ended at its time, or reclaimed for the mining window
        if lease is None and state.offered and rng.random() < 0.04:
            lease = {"pod": f"lease-{seed}-{step}/web-0", "gpus": rng.randint(1, gpus), "since": at.isoformat()}
            lease_until = now + rng.randint(1, 10) * 3600
        obs = Observation(float(step * STEP_S), desired, True, int(lease is not None), 0, False, miner, miner)
        state, actions = decide(state, obs, None, SCHEDULE.min_switch_interval_s)
        for action in actions:
            if action in (START_MINER, STOP_MINER):
                miner = action == START_MINER
        sight = Sight(leases=[lease] if lease is not None else [])
        book.record(now, state, False, gpus, sight, stats, _silent)
    return START.timestamp() + steps * STEP_S


def _silent(sentence: str) -> None:
    raise AssertionError(f"the agent said {sentence!r} while writing its ledger")
