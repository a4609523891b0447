"""The agent's decision: from what it sees now to the next actions.  Pure, so it is property-tested.

Modes of a rig:

- ``mining``: the miner runs; the node is cordoned, so the marketplace does not offer it
  (the marketplace's inventory drops an unschedulable node; a taint would leave it on offer).
- ``idle-mining``: the node is offered (uncordoned) and the miner runs, **and no pod holds
  the GPUs**: the marketplace counts them free and bids.  A lease that lands here gets its GPUs only
  through m2p's gate: the container runtime runs the gate (a CDI hook, ``gate.py``) before
  the lease's container starts; the gate asks the agent, which stops the miner, checks
  through NVML that no process outside a container holds a GPU, and only then lets it
  through.  A lease pod seen in the API stops the miner at once (the image pull runs
  meanwhile), so the gate rarely waits for long.
- ``leasing``: offered, the miner stopped, the GPUs free for leases (or in use by them).
- ``draining``: cordoned (a mining window began) while leases still run; the miner starts
  once they have all ended.  After ``lease_grace`` the agent gives this mining window up
  and offers the node again: it never cuts a lease (its identity may only read pods and
  patch its own node, so it could not evict one anyway).

Per card: see per_card.py.

A lease is a marketplace lease's pod bound to the node with GPUs (from the API; kube.LeaseRule)
or a lease's container the gate let through that still runs (from the rig itself: this holds
while the API is unreachable).  The miner is never started while either exists.

Health: a card that is lost, threw an Xid or passes the owner's temperature limit (``Observation.unhealthy``)
takes the rig off the market (cordoned, as outside offered time: the marketplace's inventory drops the node) until
every card is well again.  Nothing else changes: the mode, the miner and the leases are as they would be (mining is
never blamed for a lost card, and a running lease on a hot card runs on: it is said, never cut); rules.py refuses
the card to a lease at the gate.

Switching limits: the miner is never started sooner than ``min_switch_interval`` after the
previous start or stop (on the monotonic clock: a stepped wall clock moves no interval).  A
stop that a lease needs is never delayed.  If the Kubernetes API cannot be read, the agent
keeps its mode and never starts the miner while NVML shows a GPU process or a gated
container runs.
"""

from __future__ import annotations

from dataclasses import replace

from miner2provider.agent import per_card
from miner2provider.agent.modes import (
    CAME_BACK_LIMIT,
    GRANT,
    OFFER,
    RESET_CLOCKS,
    START_MINER,
    STOP_MINER,
    UNOFFER,
    Observation,
    State,
    ToMode,
    leased,
    offer,
)

__all__ = ["CAME_BACK_LIMIT", "GRANT", "OFFER", "RESET_CLOCKS", "START_MINER", "STOP_MINER", "UNOFFER", "Observation",
           "State", "decide"]


def decide(state: State, obs: Observation, lease_grace_s: float | None,
           min_switch_interval_s: float) -> tuple[State, list[str]]:
    new, actions = _decide(state, obs, lease_grace_s, min_switch_interval_s)
    if START_MINER in actions:
        new = replace(new, last_was_stop=False, mine_on=new.mine_on if per_card.in_part(new, obs) else ())
    elif STOP_MINER in actions:
        new = replace(new, last_was_stop=True)
    if obs.api_ok and not leased(obs) and new.came_back:
        new = replace(new, came_back=0)
    if obs.retuned and new.mode in {"leasing", "draining"}:
        actions = [*actions, RESET_CLOCKS]  # a lease never computes on the mining OS's tuning
    if obs.unhealthy:  # off the market, and nothing else: the miner and the leases are the mode's
        actions = [a for a in actions if a not in (OFFER, UNOFFER)] + ([UNOFFER] if state.offered else [])
        new = replace(new, offered=False)
    return new, actions


def _decide(state: State, obs: Observation, lease_grace_s: float | None,
            min_switch_interval_s: float) -> tuple[State, list[str]]:
    def to(mode: str, **changes: object) -> State:
        since = (obs.now if obs.wall is None else obs.wall) if mode != state.mode else state.since
        return replace(state, mode=mode, since=since, **changes)  # type: ignore[arg-type]

    interval_ok = obs.now - state.last_switch >= min_switch_interval_s
    if per_card.in_part(state, obs):
        return per_card.per_card(state, obs, to, interval_ok)

    # A container waits at the gate: it is on this node whatever the mode (bound before a
    # cordon, or a lease's container restarting), so the miner stops now and the container
    # starts once NVML shows the GPUs free.  Node-local: works without the API.
    if obs.gate_waiting:
        if state.mode in {"mining", "idle-mining"}:
            mode = "leasing" if obs.desired.offered or not obs.api_ok else "draining"
            state = to(mode, drain_started=None if mode == "leasing" else obs.now)
        # A mining window: no new lease while this one runs.
        state, cordon = offer(state, False) if state.mode == "draining" else (state, [])
        if obs.miner_running:
            return replace(state, last_switch=obs.now), [*cordon, STOP_MINER]
        if obs.gpus_busy:
            return state, cordon  # the miner still letting go (the gate waits, bounded)
        return state, [*cordon, GRANT]
    # The leases that held some cards have all ended (before the re-assertion below, which a draining window's
    # miner on the free cards would otherwise meet).
    if state.mine_on and not leased(obs):
        if not obs.miner_running:
            state = replace(state, mine_on=())
        else:
            widened = per_card.widen(state, obs, to, interval_ok)
            if widened is not None:
                return widened
    # The mining OS fights back (HiveOS `hello`, a dashboard push, a reboot): re-assert at once
    # where a lease may hold the GPUs (or may not be seen: the API is down) or the window is strict.
    if state.mode in {"leasing", "draining"} and obs.miner_running and (
            leased(obs) or not obs.api_ok or state.mode == "draining" or not obs.desired.idle_mining):
        return state, [STOP_MINER]
    if not obs.api_ok:
        # Blind: keep the mode.  Mining may resume only on GPUs no container and no process holds.
        if (state.mode in {"mining", "idle-mining"} and not obs.miner_running and not obs.gpus_busy
                and not obs.gated and interval_ok):
            return replace(state, last_switch=obs.now), [START_MINER]
        return state, []

    if state.gave_up is not None and state.gave_up != obs.desired.key:
        state = replace(state, gave_up=None)
    handler = {"mining": _mining, "idle-mining": _idle_mining, "leasing": _leasing}.get(state.mode, _draining)
    return handler(state, obs, to, interval_ok, lease_grace_s)


def _mining(state: State, obs: Observation, to: ToMode, interval_ok: bool,
            grace: float | None) -> tuple[State, list[str]]:
    if leased(obs):  # bound before the cordon took effect: it gets the GPUs, the window drains
        mode = "leasing" if obs.desired.offered else "draining"
        stop = [STOP_MINER] if obs.miner_running else []
        return to(mode, last_switch=obs.now if stop else state.last_switch,
                  drain_started=None if mode == "leasing" else obs.now), stop
    if obs.desired.offered:
        if obs.desired.idle_mining:
            return offer(to("idle-mining"), True)
        if not interval_ok:
            return state, []
        # Offered once NVML shows the GPUs free (in _leasing): the gate stays the exception.
        return to("leasing", last_switch=obs.now), [STOP_MINER]
    if not obs.miner_running and not obs.gpus_busy and interval_ok:
        return replace(state, last_switch=obs.now), [START_MINER]  # re-assert mining
    return offer(state, False)


def _idle_mining(state: State, obs: Observation, to: ToMode, interval_ok: bool,
                 grace: float | None) -> tuple[State, list[str]]:
    if leased(obs):  # a lease is bound: stop now, its image pulls meanwhile; the gate hands over
        stop = [STOP_MINER] if obs.miner_running else []
        return to("leasing", last_switch=obs.now if stop else state.last_switch), stop
    if not obs.desired.offered:
        return offer(to("mining"), False)
    if not obs.desired.idle_mining:  # a strict lease window
        if not interval_ok:
            return state, []
        return to("leasing", last_switch=obs.now), [STOP_MINER]
    if not obs.miner_running and not obs.gpus_busy and interval_ok:
        return replace(state, last_switch=obs.now), [START_MINER]  # re-assert idle mining
    return offer(state, True)


def _leasing(state: State, obs: Observation, to: ToMode, interval_ok: bool,
             grace: float | None) -> tuple[State, list[str]]:
    if not obs.desired.offered and state.gave_up != obs.desired.key:
        return offer(to("draining", drain_started=obs.now), False)
    if obs.desired.idle_mining and not leased(obs) and obs.miner_running:
        # No lease and the miner runs (a hand-over the miner refused, the OS restarting it): idle mining.
        return offer(to("idle-mining"), True)
    if obs.desired.idle_mining and not leased(obs):
        if obs.gpus_busy or not interval_ok:
            return state, []
        new, actions = offer(to("idle-mining", last_switch=obs.now), True)
        return new, [START_MINER, *actions]
    if not obs.miner_running and not obs.gpus_busy:
        return offer(state, True)
    return state, []


def _draining(state: State, obs: Observation, to: ToMode, interval_ok: bool,
              grace: float | None) -> tuple[State, list[str]]:
    if obs.desired.offered:
        return offer(to("leasing", drain_started=None), True)
    if not leased(obs):
        if obs.gpus_busy or not interval_ok:
            return offer(state, False)
        new, actions = offer(to("mining", drain_started=None, last_switch=obs.now), False)
        return new, [*actions, START_MINER]
    started = state.drain_started if state.drain_started is not None else obs.now
    if grace is not None and obs.now - started >= grace:
        return offer(to("leasing", drain_started=None, gave_up=obs.desired.key), True)
    return offer(state, False)
