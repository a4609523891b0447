"""The agent's decision: from what it sees now to the next actions.  Pure, so it is property-tested.

Modes of a rig:

- ``mining``: the miner runs; the node is not offered (m2p's taint
  ``m2p.io/mining=true:NoSchedule``: the marketplace stops offering it, running pods stay).
- ``idle-mining``: the node is offered and the miner runs, **but a low-priority placeholder
  pod holds every GPU** (device plugin allocation).  A lease preempts the placeholder; the
  placeholder's graceful termination waits for the agent, which stops the miner, checks
  through NVML that the GPUs are free, and only then lets the placeholder go.  So a lease
  never starts on a GPU the miner still holds, even under ``lease-first``.
- ``leasing``: offered, the miner stopped, the GPUs free for leases (or in use by them).
- ``draining``: not offered (a mining window began) while leases still run; the miner
  starts once they have all ended.  After ``lease_grace`` the agent gives this mining
  window up and offers the node again: it never cuts a lease (its identity may only read
  pods and patch its own node, so it could not evict one anyway).

Switching limits: the miner is never started sooner than ``min_switch_interval`` after the
previous start or stop.  A stop that a waiting lease asks for is never delayed.
If the Kubernetes API cannot be read, the agent keeps its mode, re-asserts it, and never
starts the miner while NVML shows GPU processes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable  # not collections.abc: ToMode below is evaluated, on 3.8 too

from miner2provider.schedule.policy import Desired

# Actions, carried out in order by the agent's effectors (mining-OS adapter, cluster client).
STOP_MINER = "stop-miner"
START_MINER = "start-miner"
OFFER = "offer"  # remove m2p's mining taint
UNOFFER = "unoffer"  # add m2p's mining taint
HOLD_GPUS = "hold-gpus"  # create the placeholder pod
RELEASE_GPUS = "release-gpus"  # let the placeholder go (delete it / end its wait)


@dataclass(frozen=True)
class Observation:
    now: float  # seconds
    desired: Desired
    api_ok: bool  # the pods on this node and the node itself could be read
    leases: int  # lease pods bound to this node that are not finished (not the placeholder)
    lease_waiting: bool  # a lease preempted the placeholder (or is nominated to this node) and waits for GPUs
    placeholder_holding: bool  # the placeholder pod runs with the GPUs allocated to it
    offered: bool  # the node carries no m2p mining taint
    miner_running: bool
    gpus_busy: bool  # NVML: some process holds a GPU


@dataclass(frozen=True)
class State:
    mode: str = "mining"  # mining | idle-mining | leasing | draining
    since: float = 0.0
    last_switch: float = float("-inf")  # last miner start or stop by the agent
    drain_started: float | None = None
    gave_up: tuple[bool, bool] | None = None  # Desired.key of the mining window given up


def decide(state: State, obs: Observation, lease_grace_s: float | None,
           min_switch_interval_s: float) -> tuple[State, list[str]]:
    def to(mode: str, **changes: object) -> State:
        since = obs.now if mode != state.mode else state.since
        return replace(state, mode=mode, since=since, **changes)  # type: ignore[arg-type]

    interval_ok = obs.now - state.last_switch >= min_switch_interval_s

    # A lease preempted the placeholder (its preStop hook says so on the rig's own disk, so
    # this works without the API): the placeholder is going whatever the mode, so the miner
    # stops now and the GPUs are handed over once NVML shows them free.
    if obs.lease_waiting:
        if obs.miner_running:
            return replace(state, last_switch=obs.now), [STOP_MINER]
        if obs.gpus_busy:
            # While the placeholder holds every GPU (all time-sliced replicas too) no lease can
            # run on them: whatever holds a GPU is the miner, still letting go.
            return state, []
        if obs.desired.offered or not obs.api_ok:
            return to("leasing", drain_started=None), [RELEASE_GPUS]
        return to("draining", drain_started=obs.now), [RELEASE_GPUS, UNOFFER]
    # The mining OS fights back (HiveOS `hello`, a dashboard push, a reboot): re-assert at once.
    if state.mode in {"leasing", "draining"} and obs.miner_running:
        return state, [STOP_MINER]
    if not obs.api_ok:
        # Blind: keep the mode.  Mining may resume only on GPUs NVML shows idle.
        if state.mode in {"mining", "idle-mining"} and not obs.miner_running and not obs.gpus_busy and interval_ok:
            return replace(state, last_switch=obs.now), [START_MINER]
        return state, []

    if state.gave_up is not None and state.gave_up != obs.desired.key:
        state = replace(state, gave_up=None)
    handler = {"mining": _mining, "idle-mining": _idle_mining, "leasing": _leasing}.get(state.mode, _draining)
    return handler(state, obs, to, interval_ok, lease_grace_s)


ToMode = Callable[..., State]


def _mining(state: State, obs: Observation, to: ToMode, interval_ok: bool,
            grace: float | None) -> tuple[State, list[str]]:
    if obs.desired.offered:
        if obs.desired.idle_mining:
            # Hold the GPUs with the placeholder before offering: a lease must preempt it.
            return (state, [HOLD_GPUS]) if not obs.placeholder_holding else (to("idle-mining"), [OFFER])
        if not interval_ok:
            return state, []
        # Offered only once NVML shows the GPUs free (in _leasing).
        return to("leasing", last_switch=obs.now), [STOP_MINER]
    if not obs.miner_running and not obs.gpus_busy and interval_ok:
        return replace(state, last_switch=obs.now), [START_MINER]  # re-assert mining
    return state, [UNOFFER] if obs.offered else []


def _idle_mining(state: State, obs: Observation, to: ToMode, interval_ok: bool,
                 grace: float | None) -> tuple[State, list[str]]:
    if obs.leases:  # cannot happen while the placeholder holds the GPUs; if it does, leasing rules
        return to("leasing"), [STOP_MINER] if obs.miner_running else []
    if not obs.desired.offered:
        return to("mining"), [UNOFFER]  # the placeholder keeps holding: no race with a late lease
    if not obs.desired.idle_mining:  # a strict lease window: the placeholder goes once the GPUs are free
        if not interval_ok:
            return state, []
        return to("leasing", last_switch=obs.now), [STOP_MINER]
    if not obs.miner_running and obs.placeholder_holding and not obs.gpus_busy and interval_ok:
        return replace(state, last_switch=obs.now), [START_MINER]  # re-assert idle mining
    return state, [] if obs.placeholder_holding else [HOLD_GPUS]


def _leasing(state: State, obs: Observation, to: ToMode, interval_ok: bool,
             grace: float | None) -> tuple[State, list[str]]:
    if not obs.desired.offered and state.gave_up != obs.desired.key:
        return to("draining", drain_started=obs.now), [UNOFFER]
    miner_gone = not obs.miner_running and (obs.leases > 0 or not obs.gpus_busy)
    if obs.placeholder_holding and miner_gone and not obs.desired.idle_mining:
        return state, [RELEASE_GPUS]  # a strict lease window: free the GPUs for leases
    if obs.desired.idle_mining and obs.leases == 0:
        if not obs.placeholder_holding:
            return state, [HOLD_GPUS] if interval_ok else []
        if obs.gpus_busy or not interval_ok:
            return state, []
        return to("idle-mining", last_switch=obs.now), [START_MINER]
    if not obs.offered and miner_gone and obs.desired.offered:
        return state, [OFFER]
    return state, []


def _draining(state: State, obs: Observation, to: ToMode, interval_ok: bool,
              grace: float | None) -> tuple[State, list[str]]:
    if obs.desired.offered:
        return to("leasing", drain_started=None), [OFFER]
    if obs.leases == 0:
        if obs.gpus_busy or not interval_ok:
            return state, []
        return to("mining", drain_started=None, last_switch=obs.now), [START_MINER]
    started = state.drain_started if state.drain_started is not None else obs.now
    if grace is not None and obs.now - started >= grace:
        return to("leasing", drain_started=None, gave_up=obs.desired.key), [OFFER]
    return state, []
