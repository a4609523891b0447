"""The agent's decision: from what it sees now to the next actions.  Pure, so it is property-tested.

Modes of a rig:

- ``mining``: the miner runs; the node is cordoned, so the marketplace does not offer it
  (Akash's inventory drops an unschedulable node; a taint would leave it on offer).
- ``idle-mining``: the node is offered (uncordoned) and the miner runs, **and no pod holds
  the GPUs**: Akash counts them free and bids.  A lease that lands here gets its GPUs only
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

Per card (a mining OS whose miner can be started on chosen cards, ``Observation.cards``): while leases
hold some of the cards and the schedule wants mining (a mining window, or idle mining), the miner runs on
the others, started with only those cards visible (``State.mine_on``).  A card is never mined and leased
at once: a miner seen on a leased card (the OS restarted it on every card) is stopped at once and started
on the free cards again; the second time, the rig hands over whole until its leases end.  A lease whose
cards are unknown (its pod bound, its container not yet at the gate) makes the whole rig the unit.

A lease is a marketplace lease's pod bound to the node with GPUs (from the API; kube.LeaseRule)
or a lease's container the gate let through that still runs (from the rig itself: this holds
while the API is unreachable).  The miner is never started while either exists.

Switching limits: the miner is never started sooner than ``min_switch_interval`` after the
previous start or stop (on the monotonic clock: a stepped wall clock moves no interval).  A
stop that a lease needs is never delayed.  If the Kubernetes API cannot be read, the agent
keeps its mode and never starts the miner while NVML shows a GPU process or a gated
container runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable  # not collections.abc: ToMode below is evaluated, on 3.8 too

from miner2provider.timeshare.policy import Desired

# Actions, carried out in order by the agent's effectors (mining-OS adapter, cluster client, gate).
STOP_MINER = "stop-miner"
START_MINER = "start-miner"
OFFER = "offer"  # uncordon the node (the marketplace may place leases)
UNOFFER = "unoffer"  # cordon the node (running leases stay)
GRANT = "grant"  # let the containers waiting at the gate start: the GPUs are free of the miner
RESET_CLOCKS = "reset-clocks"  # put the leased cards that were tuned again (a dashboard OC push) back on defaults
CAME_BACK_LIMIT = 2


@dataclass(frozen=True)
class Observation:
    # Seconds on the clock every interval is measured on: the agent's monotonic clock, so that no step of
    # the wall clock (a rig booting without an RTC battery, NTP) holds a switch back or hurries it.
    now: float
    desired: Desired
    api_ok: bool  # the pods on this node and the node itself could be read
    leases: int  # pods bound to this node with GPUs, not finished (API)
    gated: int  # containers the gate let through whose process still runs (the rig's own record)
    gate_waiting: bool  # a container waits at the gate for the GPUs
    miner_running: bool
    gpus_busy: bool  # NVML: a process outside every container holds a GPU (the miner, letting go)
    wall: float | None = None  # the wall clock at ``now``: when a mode began, as said (None: ``now`` is it)
    # Per card.  cards: the rig's GPUs (UUIDs) where the miner can be started on some of them; () where the
    # whole rig is the unit.  held: the cards the leases' containers hold or wait for (None: a lease whose
    # cards are unknown).  busy_cards: the cards a process outside every container holds (NVML).
    cards: tuple[str, ...] = ()
    held: frozenset[str] | None = frozenset()
    busy_cards: frozenset[str] = frozenset()
    # The leased cards found off their defaults again (NVML's recheck: a power limit or an offset the mining OS
    # set during the lease, HiveOS's nvidia-oc tuning every card).
    retuned: frozenset[str] = frozenset()


@dataclass(frozen=True)
class State:
    mode: str = "mining"  # mining | idle-mining | leasing | draining
    since: float = 0.0  # wall clock
    last_switch: float = float("-inf")  # last miner start or stop by the agent (Observation.now's clock)
    drain_started: float | None = None  # (Observation.now's clock)
    gave_up: tuple[bool, bool] | None = None  # Desired.key of the mining window given up
    offered: bool = False  # the agent has uncordoned the node (OFFER) and not cordoned it since
    mine_on: tuple[str, ...] = ()  # the cards the agent last started the miner on (): every card
    last_was_stop: bool = False  # the agent's last switch stopped the miner (a restart on the free cards may follow)
    # Times the miner came back on a leased card after the agent started it on the free ones (the OS restarted
    # it on every card: HiveOS ``hello``, a dashboard push; or its own script names the cards): from the second,
    # the rig hands over whole until no lease holds a card.
    came_back: int = 0

    @property
    def whole_rig(self) -> bool:
        return self.came_back >= CAME_BACK_LIMIT


def decide(state: State, obs: Observation, lease_grace_s: float | None,
           min_switch_interval_s: float) -> tuple[State, list[str]]:
    new, actions = _decide(state, obs, lease_grace_s, min_switch_interval_s)
    if START_MINER in actions:
        new = replace(new, last_was_stop=False, mine_on=new.mine_on if _in_part(new, obs) else ())
    elif STOP_MINER in actions:
        new = replace(new, last_was_stop=True)
    if obs.api_ok and not _leased(obs) and new.came_back:
        new = replace(new, came_back=0)
    if obs.retuned and new.mode in {"leasing", "draining"}:
        actions = [*actions, RESET_CLOCKS]  # a lease never computes on the mining OS's tuning
    return new, actions


def _in_part(state: State, obs: Observation) -> bool:
    """Leases hold some cards, all of them known, and the others may mine.  Blind too (the API unreachable): the
    cards are the rig's own records' (the gate's), and a lease the API has not shown comes through the gate."""
    held = obs.held
    return (bool(obs.cards) and held is not None and bool(held) and not state.whole_rig
            and any(card not in held for card in obs.cards)
            and (not obs.desired.offered or obs.desired.idle_mining))


def _decide(state: State, obs: Observation, lease_grace_s: float | None,
            min_switch_interval_s: float) -> tuple[State, list[str]]:
    def to(mode: str, **changes: object) -> State:
        since = (obs.now if obs.wall is None else obs.wall) if mode != state.mode else state.since
        return replace(state, mode=mode, since=since, **changes)  # type: ignore[arg-type]

    interval_ok = obs.now - state.last_switch >= min_switch_interval_s
    if _in_part(state, obs):
        return _per_card(state, obs, to, interval_ok)

    # A container waits at the gate: it is on this node whatever the mode (bound before a
    # cordon, or a lease's container restarting), so the miner stops now and the container
    # starts once NVML shows the GPUs free.  Node-local: works without the API.
    if obs.gate_waiting:
        if state.mode in {"mining", "idle-mining"}:
            mode = "leasing" if obs.desired.offered or not obs.api_ok else "draining"
            state = to(mode, drain_started=None if mode == "leasing" else obs.now)
        # A mining window: no new lease while this one runs.
        state, cordon = _offer(state, False) if state.mode == "draining" else (state, [])
        if obs.miner_running:
            return replace(state, last_switch=obs.now), [*cordon, STOP_MINER]
        if obs.gpus_busy:
            return state, cordon  # the miner still letting go (the gate waits, bounded)
        return state, [*cordon, GRANT]
    # The leases that held some cards have all ended (before the re-assertion below, which a draining window's
    # miner on the free cards would otherwise meet).
    if state.mine_on and not _leased(obs):
        if not obs.miner_running:
            state = replace(state, mine_on=())
        else:
            widened = _widen(state, obs, to, interval_ok)
            if widened is not None:
                return widened
    # The mining OS fights back (HiveOS `hello`, a dashboard push, a reboot): re-assert at once
    # where a lease may hold the GPUs (or may not be seen: the API is down) or the window is strict.
    if state.mode in {"leasing", "draining"} and obs.miner_running and (
            _leased(obs) or not obs.api_ok or state.mode == "draining" or not obs.desired.idle_mining):
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


ToMode = Callable[..., State]


def _per_card(state: State, obs: Observation, to: ToMode, interval_ok: bool) -> tuple[State, list[str]]:
    """Leases hold some cards; the miner mines on the rest (a mining window, or idle mining)."""
    held = obs.held or frozenset()
    free = tuple(card for card in obs.cards if card not in held)
    mode = "leasing" if obs.desired.offered else "draining"
    started = state.drain_started if state.drain_started is not None else obs.now
    state = to(mode, drain_started=started if mode == "draining" else None)
    state, actions = _offer(state, mode == "leasing")
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


def _widen(state: State, obs: Observation, to: ToMode, interval_ok: bool) -> tuple[State, list[str]] | None:
    """The leases that held some cards have ended while the miner mines on the rest: it starts again on every
    card (None: the whole-rig rules decide: a strict lease window wants it off; blind, a lease may be bound
    unseen, so they stop it in leasing and draining, and it starts on every card once the API answers)."""
    if (obs.desired.offered and not obs.desired.idle_mining) or not obs.api_ok:
        return None
    if not interval_ok:
        return state, []
    mode = "idle-mining" if obs.desired.offered else "mining"
    new, actions = _offer(to(mode, drain_started=None, last_switch=obs.now, mine_on=()), obs.desired.offered)
    return new, [*actions, STOP_MINER, START_MINER]


def _leased(obs: Observation) -> bool:
    return obs.leases > 0 or obs.gated > 0


def _offer(state: State, offer: bool) -> tuple[State, list[str]]:
    """Cordon or uncordon once: the action only when the agent's own record differs."""
    if state.offered == offer:
        return state, []
    return replace(state, offered=offer), [OFFER if offer else UNOFFER]


def _mining(state: State, obs: Observation, to: ToMode, interval_ok: bool,
            grace: float | None) -> tuple[State, list[str]]:
    if _leased(obs):  # bound before the cordon took effect: it gets the GPUs, the window drains
        mode = "leasing" if obs.desired.offered else "draining"
        stop = [STOP_MINER] if obs.miner_running else []
        return to(mode, last_switch=obs.now if stop else state.last_switch,
                  drain_started=None if mode == "leasing" else obs.now), stop
    if obs.desired.offered:
        if obs.desired.idle_mining:
            return _offer(to("idle-mining"), True)
        if not interval_ok:
            return state, []
        # Offered once NVML shows the GPUs free (in _leasing): the gate stays the exception.
        return to("leasing", last_switch=obs.now), [STOP_MINER]
    if not obs.miner_running and not obs.gpus_busy and interval_ok:
        return replace(state, last_switch=obs.now), [START_MINER]  # re-assert mining
    return _offer(state, False)


def _idle_mining(state: State, obs: Observation, to: ToMode, interval_ok: bool,
                 grace: float | None) -> tuple[State, list[str]]:
    if _leased(obs):  # a lease is bound: stop now, its image pulls meanwhile; the gate hands over
        stop = [STOP_MINER] if obs.miner_running else []
        return to("leasing", last_switch=obs.now if stop else state.last_switch), stop
    if not obs.desired.offered:
        return _offer(to("mining"), False)
    if not obs.desired.idle_mining:  # a strict lease window
        if not interval_ok:
            return state, []
        return to("leasing", last_switch=obs.now), [STOP_MINER]
    if not obs.miner_running and not obs.gpus_busy and interval_ok:
        return replace(state, last_switch=obs.now), [START_MINER]  # re-assert idle mining
    return _offer(state, True)


def _leasing(state: State, obs: Observation, to: ToMode, interval_ok: bool,
             grace: float | None) -> tuple[State, list[str]]:
    if not obs.desired.offered and state.gave_up != obs.desired.key:
        return _offer(to("draining", drain_started=obs.now), False)
    if obs.desired.idle_mining and not _leased(obs) and obs.miner_running:
        # No lease and the miner runs (a hand-over the miner refused, the OS restarting it): idle mining.
        return _offer(to("idle-mining"), True)
    if obs.desired.idle_mining and not _leased(obs):
        if obs.gpus_busy or not interval_ok:
            return state, []
        new, actions = _offer(to("idle-mining", last_switch=obs.now), True)
        return new, [START_MINER, *actions]
    if not obs.miner_running and not obs.gpus_busy:
        return _offer(state, True)
    return state, []


def _draining(state: State, obs: Observation, to: ToMode, interval_ok: bool,
              grace: float | None) -> tuple[State, list[str]]:
    if obs.desired.offered:
        return _offer(to("leasing", drain_started=None), True)
    if not _leased(obs):
        if obs.gpus_busy or not interval_ok:
            return _offer(state, False)
        new, actions = _offer(to("mining", drain_started=None, last_switch=obs.now), False)
        return new, [*actions, START_MINER]
    started = state.drain_started if state.drain_started is not None else obs.now
    if grace is not None and obs.now - started >= grace:
        return _offer(to("leasing", drain_started=None, gave_up=obs.desired.key), True)
    return _offer(state, False)
