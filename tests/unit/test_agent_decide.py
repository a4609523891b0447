"""The agent's decisions, against a simulated rig and cluster.  Property tests (hypothesis).

The simulated world follows the rules the real one does: the marketplace binds a lease only
to an offered (uncordoned) node, and no pod holds idle-mining GPUs, so a lease binds at once;
its container then waits at m2p's gate (the container runtime's hook) until the agent grants
it; a granted container that ran on a GPU the miner holds is a violation; a stopped miner
lets go of the GPUs one observation later; a lease's container may restart (it passes the
gate again); a lease may be withdrawn while its container still waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.agent.decide import (
    GRANT,
    OFFER,
    START_MINER,
    STOP_MINER,
    UNOFFER,
    Observation,
    State,
    decide,
)
from miner2provider.timeshare.policy import Desired

DESIRES = {"mine": Desired(False, True), "lease": Desired(True, False), "lease-idle": Desired(True, True)}


class Violation(AssertionError):
    pass


@dataclass
class World:
    offered: bool = False  # uncordoned
    miner: bool = True
    miner_letting_go: bool = False  # stopped, still holding the GPUs until the next observation
    leases: int = 0  # pods bound (API)
    running: int = 0  # lease containers running on the GPUs (let through by the gate)
    waiting: int = 0  # lease containers waiting at the gate
    now: float = 0.0
    switches: list[tuple[float, str, bool]] = field(default_factory=list)  # (time, action, for a lease)

    def arrive(self) -> None:
        if not self.offered:
            return  # Akash does not offer a cordoned node: no lease comes
        self.leases += 1
        self.waiting += 1  # kubelet creates its container: the gate asks

    def depart(self) -> None:
        if self.running:
            self.running -= 1
            self.leases -= 1

    def withdraw(self) -> None:
        """A lease closed before its container got the GPUs (the gate times out, the pod goes)."""
        if self.waiting:
            self.waiting -= 1
            self.leases -= 1

    def restart(self) -> None:
        """A lease's container restarts: it passes the gate again."""
        if self.running:
            self.running -= 1
            self.waiting += 1

    def observe(self, desired: Desired, api_ok: bool) -> Observation:
        busy = self.miner or self.miner_letting_go  # NVML: processes outside containers
        obs = Observation(self.now, desired, api_ok, self.leases, self.running, self.waiting > 0,
                          self.miner, busy)
        self.miner_letting_go = False
        return obs

    def apply(self, actions: list[str]) -> None:
        for action in actions:
            if action == STOP_MINER:
                self.switches.append((self.now, action, self.leases > 0))
                self.miner_letting_go = self.miner
                self.miner = False
            elif action == START_MINER:
                if self.running or self.waiting:
                    raise Violation(f"t={self.now}: miner started while {self.running + self.waiting} "
                                    "lease containers run or wait")
                self.switches.append((self.now, action, False))
                self.miner = True
            elif action == OFFER:
                self.offered = True
            elif action == UNOFFER:
                self.offered = False
            elif action == GRANT:
                if self.miner or self.miner_letting_go:
                    raise Violation(f"t={self.now}: a lease container starts on GPUs the miner holds")
                self.running += self.waiting
                self.waiting = 0


steps = st.lists(st.tuples(
    st.sampled_from(sorted(DESIRES)),  # what the schedule says now
    st.sampled_from(["arrive", "depart", "withdraw", "restart", "none", "none"]),
    st.integers(min_value=1, max_value=400),  # seconds to the next observation
    st.sampled_from([True, True, True, False]),  # the API answers (mostly)
), min_size=1, max_size=120)


def run(plan, grace, interval):
    world, state = World(), State()
    for desired_name, event, dt, api_ok in plan:
        getattr(world, event, lambda: None)()
        state, actions = decide(state, world.observe(DESIRES[desired_name], api_ok), grace, interval)
        world.apply(actions)
        if world.miner and world.running:
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
def test_a_container_at_the_gate_gets_the_gpus_within_three_observations_api_or_not(plan, interval):
    world, state = World(), State()
    waited = 0
    for desired_name, event, dt, api_ok in plan:
        getattr(world, event, lambda: None)()
        state, actions = decide(state, world.observe(DESIRES[desired_name], api_ok), None, interval)
        world.apply(actions)
        waited = waited + 1 if world.waiting else 0
        assert waited <= 3, f"a container waited {waited} observations at the gate in mode {state.mode}"
        world.now += dt


@settings(max_examples=200, deadline=None)
@given(plan=steps, interval=st.integers(0, 1200))
def test_offered_exactly_in_the_offered_modes_once_settled(plan, interval):
    """What the marketplace sees follows the mode: cordoned while mining or draining."""
    world, state = World(), State()
    for desired_name, event, dt, api_ok in plan:
        getattr(world, event, lambda: None)()
        state, actions = decide(state, world.observe(DESIRES[desired_name], api_ok), None, interval)
        world.apply(actions)
        assert world.offered == state.offered
        if state.mode in {"mining", "draining"} and api_ok and not actions:
            assert not world.offered, f"offered while {state.mode}"
        world.now += dt


def test_lease_first_walkthrough_the_gpus_look_free_and_the_gate_hands_over():
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

    assert tick() == [OFFER] and state.mode == "idle-mining" and world.miner and world.offered
    assert tick("arrive") == [STOP_MINER] and world.waiting == 1 and state.mode == "leasing"
    assert tick() == []  # NVML still shows the miner's processes: the container waits
    assert tick() == [GRANT] and world.running == 1 and state.mode == "leasing"
    assert tick("restart") == [GRANT]  # the miner stays stopped: a restarted container passes at once
    assert tick("depart") == [START_MINER] and state.mode == "idle-mining" and world.offered


def test_a_mining_window_cordons_and_a_lease_bound_before_it_drains():
    state = State(mode="idle-mining", offered=True, last_switch=0.0)
    mine = DESIRES["mine"]
    state, actions = decide(state, Observation(10.0, mine, True, 0, 0, False, True, True), None, 0)
    assert actions == [UNOFFER] and state.mode == "mining" and not state.offered
    # A pod bound just before the cordon: the miner stops for it and the window drains.
    state, actions = decide(state, Observation(20.0, mine, True, 1, 0, False, True, True), None, 0)
    assert actions == [STOP_MINER] and state.mode == "draining"
    state, actions = decide(state, Observation(30.0, mine, True, 1, 0, True, False, False), None, 0)
    assert actions == [GRANT] and state.mode == "draining" and not state.offered
    state, actions = decide(state, Observation(40.0, mine, True, 0, 0, False, False, False), None, 0)
    assert actions == [START_MINER] and state.mode == "mining"


def test_mining_os_restarting_the_miner_during_a_lease_is_stopped_at_once():
    state = State(mode="leasing", last_switch=0.0, offered=True)
    obs = Observation(10.0, DESIRES["lease"], True, 1, 1, False, True, True)
    assert decide(state, obs, None, 600) == (state, [STOP_MINER])
    blind = Observation(10.0, DESIRES["lease"], False, 1, 1, False, True, True)
    assert decide(state, blind, None, 600) == (state, [STOP_MINER])


def test_api_unreachable_keeps_the_mode_and_never_starts_the_miner_beside_a_lease():
    state = State(mode="mining", last_switch=0.0)
    busy = Observation(9999.0, DESIRES["lease"], False, 0, 0, False, False, True)
    assert decide(state, busy, None, 60) == (state, [])
    gated = Observation(9999.0, DESIRES["lease"], False, 0, 1, False, False, False)
    assert decide(state, gated, None, 60) == (state, [])  # the rig's own record of a running lease
    idle = Observation(9999.0, DESIRES["lease"], False, 0, 0, False, False, False)
    new, actions = decide(state, idle, None, 60)
    assert actions == [START_MINER] and new.mode == "mining"


def test_the_gate_is_answered_without_the_api():
    state = State(mode="idle-mining", offered=True, last_switch=0.0)
    state, actions = decide(state, Observation(10.0, DESIRES["lease-idle"], False, 0, 0, True, True, True), None, 600)
    assert actions == [STOP_MINER]
    state, actions = decide(state, Observation(11.0, DESIRES["lease-idle"], False, 0, 0, True, False, False), None, 600)
    assert actions == [GRANT] and state.mode == "leasing"


def test_grace_gives_the_mining_window_up_and_never_cuts_the_lease():
    state = State(mode="leasing", last_switch=0.0, offered=True)
    mine = DESIRES["mine"]
    state, actions = decide(state, Observation(100.0, mine, True, 1, 1, False, False, False), 1800, 0)
    assert actions == [UNOFFER] and state.mode == "draining"
    state, actions = decide(state, Observation(1000.0, mine, True, 1, 1, False, False, False), 1800, 0)
    assert actions == [] and state.mode == "draining"
    state, actions = decide(state, Observation(1900.0, mine, True, 1, 1, False, False, False), 1800, 0)
    assert actions == [OFFER] and state.mode == "leasing"
    state, actions = decide(state, Observation(2000.0, mine, True, 1, 1, False, False, False), 1800, 0)
    assert actions == [] and state.mode == "leasing"  # the window stays given up while the lease runs
