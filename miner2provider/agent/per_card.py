"""Per card (a mining OS whose miner can be started on chosen cards, ``Observation.cards``): while leases
hold some of the cards and the schedule wants mining (a mining window, or idle mining), the miner runs on
the others, started with only those cards visible (``State.mine_on``).  A card is never mined and leased
at once: a miner seen on a leased card (the OS restarted it on every card) is stopped at once and started
on the free cards again; the second time, the rig hands over whole until its leases end.  A lease whose
cards are unknown (its pod bound, its container not yet at the gate) makes the whole rig the unit.
"""

from __future__ import annotations

from dataclasses import replace

from miner2provider.agent.modes import GRANT, START_MINER, STOP_MINER, Observation, State, ToMode, offer


def in_part(state: State, obs: Observation) -> bool:
    """Leases hold some cards, all of them known, and the others may mine.  Blind too (the API unreachable): the
    cards are the rig's own records' (the gate's), and a lease the API has not shown comes through the gate."""
    held = obs.held
    return (bool(obs.cards) and held is not None and bool(held) and not state.whole_rig
            and any(card not in held for card in obs.cards)
            and (not obs.desired.offered or obs.desired.idle_mining))



def per_card(state: State, obs: Observation, to: ToMode, interval_ok: bool) -> tuple[State, list[str]]:
    """Leases hold some cards; the miner mines on the rest (a mining window, or idle mining)."""
    held = obs.held or frozenset()
    free = tuple(card for card in obs.cards if card not in held)
    mode = "leasing" if obs.desired.offered else "draining"
    started = state.drain_started if state.drain_started is not None else obs.now
    state = to(mode, drain_started=started if mode == "draining" else None)
    state, actions = offer(state, mode == "leasing")
    mined = set(state.mine_on) if state.mine_on else set(obs.cards)
    on_held = bool(obs.busy_cards & held) or (obs.miner_running and bool(mined & held))
    if on_held:
        # Started by the agent on free cards and now on a leased one: stopped at once, and started on the free
        # cards again (the next ticks); the second time, the rig hands over whole until its leases end.
        came_back = state.came_back + (bool(state.mine_on) and not (set(state.mine_on) & held))
        return replace(state, last_switch=obs.now, mine_on=(), came_back=came_back), [*actions, STOP_MINER]
    if obs.gate_waiting:
        actions.append(GRANT)  # its cards are free of every process outside a container
    if obs.miner_running:
        if set(state.mine_on) != set(free) and interval_ok:  # a lease ended: the miner on the cards now free
            return replace(state, last_switch=obs.now), [*actions, STOP_MINER]
        return state, actions
    if obs.busy_cards or not (interval_ok or state.last_was_stop):
        return state, actions  # the miner letting go; or a start that failed, tried again after the interval
    return replace(state, last_switch=obs.now, mine_on=free), [*actions, START_MINER]



def widen(state: State, obs: Observation, to: ToMode, interval_ok: bool) -> tuple[State, list[str]] | None:
    """The leases that held some cards have ended while the miner mines on the rest: it starts again on every
    card (None: the whole-rig rules decide: a strict lease window wants it off; blind, a lease may be bound
    unseen, so they stop it in leasing and draining, and it starts on every card once the API answers)."""
    if (obs.desired.offered and not obs.desired.idle_mining) or not obs.api_ok:
        return None
    if not interval_ok:
        return state, []
    mode = "idle-mining" if obs.desired.offered else "mining"
    new, actions = offer(to(mode, drain_started=None, last_switch=obs.now, mine_on=()), obs.desired.offered)
    return new, [*actions, STOP_MINER, START_MINER]
