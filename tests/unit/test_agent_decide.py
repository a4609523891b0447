"""The agent's decisions, against a simulated rig and cluster.  Property tests (hypothesis).

The simulated world follows the rules the real one does: a lease can bind on an offered node
whose GPUs no placeholder holds; a lease arriving while the placeholder holds the GPUs
preempts it and waits until the placeholder is let go; a stopped miner lets go of the GPUs
one observation later; the placeholder gets the GPUs only when no lease has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.agent.decide import (
    HOLD_GPUS,
    OFFER,
    RELEASE_GPUS,
    START_MINER,
    STOP_MINER,
    UNOFFER,
    Observation,
    State,
    decide,
)
from miner2provider.schedule.policy import Desired

DESIRES = {"mine": Desired(False, True), "lease": Desired(True, False), "lease-idle": Desired(True, True)}


class Violation(AssertionError):
    pass


@dataclass
class World:
    offered: bool = False
    miner: bool = True
    miner_letting_go: bool = False  # stopped, still holding the GPUs until the next observation
    leases: int = 0
    waiting: int = 0
    placeholder: bool = False
    now: float = 0.0
    switches: list[tuple[float, str, bool]] = field(default_factory=list)  # (time, action, for a waiting lease)

    def bind(self, n: int) -> None:
        if n and (self.miner or self.miner_letting_go):
            raise Violation(f"t={self.now}: a lease starts on GPUs the miner holds")
        self.leases += n

    def arrive(self) -> None:
        if not self.offered:
            return  # the marketplace does not send it here
        if self.placeholder:
            self.waiting += 1  # preempts the placeholder, waits for its graceful termination
        else:
            self.bind(1)

    def depart(self) -> None:
        if self.leases:
            self.leases -= 1

    def observe(self, desired: Desired, api_ok: bool) -> Observation:
        busy = self.miner or self.miner_letting_go or self.leases > 0
        obs = Observation(self.now, desired, api_ok, self.leases, self.waiting > 0, self.placeholder,
                          self.offered, self.miner, busy)
        self.miner_letting_go = False
        return obs

    def apply(self, actions: list[str]) -> None:
        for action in actions:
            if action == STOP_MINER:
                self.switches.append((self.now, action, self.waiting > 0))
                self.miner_letting_go = self.miner
                self.miner = False
            elif action == START_MINER:
                if self.leases:
                    raise Violation(f"t={self.now}: miner started while {self.leases} leases hold GPUs")
                self.switches.append((self.now, action, False))
                self.miner = True
            elif action == OFFER:
                self.offered = True
            elif action == UNOFFER:
                self.offered = False
            elif action == HOLD_GPUS:
                self.placeholder = self.leases == 0 and self.waiting == 0
            elif action == RELEASE_GPUS:
                self.placeholder = False
                self.bind(self.waiting)
                self.waiting = 0


steps = st.lists(st.tuples(
    st.sampled_from(sorted(DESIRES)),  # what the schedule says now
    st.sampled_from(["arrive", "depart", "none", "none"]),
    st.integers(min_value=1, max_value=400),  # seconds to the next observation
    st.sampled_from([True, True, True, False]),  # the API answers (mostly)
), min_size=1, max_size=120)


def run(plan, grace, interval):
    world, state = World(), State()
    for desired_name, event, dt, api_ok in plan:
        getattr(world, event, lambda: None)()
        state, actions = decide(state, world.observe(DESIRES[desired_name], api_ok), grace, interval)
        world.apply(actions)
        if world.miner and world.leases:
            raise Violation(f"t={world.now}: mining while a lease holds a GPU")
        world.now += dt
    return world, state


@settings(max_examples=400, deadline=None)
@given(plan=steps, grace=st.none() | st.integers(0, 3600), interval=st.integers(0, 1200))
def test_never_mining_while_a_lease_holds_a_gpu(plan, grace, interval):
    run(plan, grace, interval)


@settings(max_examples=400, deadline=None)
@given(plan=steps, grace=st.none() | st.integers(0, 3600), interval=st.integers(1, 1200))
def test_never_switches_more_often_than_allowed(plan, grace, interval):
    world, _ = run(plan, grace, interval)
    last = float("-inf")
    for at, action, for_lease in world.switches:
        if not (action == STOP_MINER and for_lease):  # a waiting lease is never kept waiting
            assert at - last >= interval, f"{action} at {at}, {at - last}s after the previous switch"
        last = at


@settings(max_examples=200, deadline=None)
@given(plan=steps, interval=st.integers(0, 1200))
def test_a_waiting_lease_gets_the_gpus_within_three_answered_observations(plan, interval):
    world, state = World(), State()
    waited = 0
    for desired_name, event, dt, api_ok in plan:
        getattr(world, event, lambda: None)()
        state, actions = decide(state, world.observe(DESIRES[desired_name], api_ok), None, interval)
        world.apply(actions)
        waited = waited + 1 if world.waiting and api_ok else 0
        assert waited <= 3, f"a lease waited {waited} observations in mode {state.mode}"
        world.now += dt


def test_lease_first_walkthrough_miner_stops_before_the_lease_gets_the_gpus():
    world, state = World(), State()
    idle = DESIRES["lease-idle"]

    def tick(event=None, dt=60):
        nonlocal state
        if event:
            getattr(world, event)()
        state, actions = decide(state, world.observe(idle, True), None, 0)
        world.apply(actions)
        world.now += dt
        return actions

    assert tick() == [HOLD_GPUS] and world.placeholder
    assert tick() == [OFFER] and state.mode == "idle-mining" and world.miner
    assert tick("arrive") == [STOP_MINER] and world.waiting == 1 and world.leases == 0
    assert tick() == []  # NVML still shows the miner's processes
    assert tick() == [RELEASE_GPUS] and world.leases == 1 and state.mode == "leasing"
    assert tick("depart") == [HOLD_GPUS]
    assert tick() == [START_MINER] and state.mode == "idle-mining"


def test_mining_os_restarting_the_miner_during_a_lease_is_stopped_at_once():
    state = State(mode="leasing", last_switch=0.0)
    obs = Observation(10.0, DESIRES["lease"], True, 1, False, False, True, True, True)
    assert decide(state, obs, None, 600) == (state, [STOP_MINER])
    blind = Observation(10.0, DESIRES["lease"], False, 1, False, False, True, True, True)
    assert decide(state, blind, None, 600) == (state, [STOP_MINER])


def test_api_unreachable_keeps_the_mode_and_never_starts_the_miner_on_busy_gpus():
    state = State(mode="mining", last_switch=0.0)
    busy = Observation(9999.0, DESIRES["lease"], False, 0, False, False, False, False, True)
    assert decide(state, busy, None, 60) == (state, [])
    idle = Observation(9999.0, DESIRES["lease"], False, 0, False, False, False, False, False)
    new, actions = decide(state, idle, None, 60)
    assert actions == [START_MINER] and new.mode == "mining"


def test_grace_gives_the_mining_window_up_and_never_cuts_the_lease():
    state = State(mode="leasing", last_switch=0.0)
    mine = DESIRES["mine"]
    state, actions = decide(state, Observation(100.0, mine, True, 1, False, False, True, False, True), 1800, 0)
    assert actions == [UNOFFER] and state.mode == "draining"
    state, actions = decide(state, Observation(1000.0, mine, True, 1, False, False, False, False, True), 1800, 0)
    assert actions == [] and state.mode == "draining"
    state, actions = decide(state, Observation(1900.0, mine, True, 1, False, False, False, False, True), 1800, 0)
    assert actions == [OFFER] and state.mode == "leasing"
    state, actions = decide(state, Observation(2000.0, mine, True, 1, False, False, True, False, True), 1800, 0)
    assert actions == [] and state.mode == "leasing"  # the window stays given up while the lease runs
