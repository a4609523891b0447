"""The agent's decisions, against a simulated rig and cluster.  Property tests (hypothesis).

The simulated world follows the rules the real one does: the marketplace binds a lease only
to an offered (uncordoned) node, and no pod holds idle-mining GPUs, so a lease binds at once;
its container then waits at m2p's gate (the container runtime's hook) until the agent grants
it; a granted container that ran on a GPU the miner holds is a violation; a stopped miner
lets go of the GPUs one observation later; a lease's container may restart (it passes the
gate again); a lease may be withdrawn while its container still waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.agent.decide import (
    GRANT,
    OFFER,
    RESET_CLOCKS,
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


@settings(max_examples=200, deadline=None)
@given(plan=steps, grace=st.none() | st.integers(0, 3600), interval=st.integers(0, 1200))
def test_a_leased_card_tuned_again_is_reset_and_nothing_else_changes(plan, grace, interval):
    """Leased cards found off their defaults (a dashboard OC push during a lease) are reset whenever the rig is
    leasing or draining, and never otherwise; the finding changes no other decision."""
    world, state = World(), State()
    for desired_name, event, dt, api_ok in plan:
        getattr(world, event, lambda: None)()
        obs = world.observe(DESIRES[desired_name], api_ok)
        plain = decide(state, obs, grace, interval)
        new, actions = decide(state, replace(obs, retuned=frozenset({"GPU-a"})), grace, interval)
        assert new == plain[0]
        assert actions == plain[1] + ([RESET_CLOCKS] if new.mode in {"leasing", "draining"} else [])
        state = new
        world.apply(plain[1])
        world.now += dt


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
    stopped = replace(state, last_was_stop=True)
    assert decide(state, obs, None, 600) == (stopped, [STOP_MINER])
    blind = Observation(10.0, DESIRES["lease"], False, 1, 1, False, True, True)
    assert decide(state, blind, None, 600) == (stopped, [STOP_MINER])


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


# -- per card: leases hold some cards, the miner mines on the rest ------------------------------------------
CARDS = ("GPU-a", "GPU-b", "GPU-c")


@dataclass
class CardWorld:
    """The rig card by card.  A lease's pod is bound first (its cards unknown: the device plugin picks them
    when its container is created), then its container waits at the gate with the cards it was given (never
    one another container holds), then runs.  The mining OS may restart the miner on every card (HiveOS
    ``hello``) whatever environment the agent started it with."""

    offered: bool = False
    miner_on: frozenset[str] = frozenset(CARDS)
    letting_go: frozenset[str] = frozenset()
    pending: int = 0  # pods bound, no container yet
    waiting: list[frozenset[str]] = field(default_factory=list)
    running: list[frozenset[str]] = field(default_factory=list)
    now: float = 0.0
    pick: int = 0

    def held(self) -> frozenset[str]:
        return frozenset().union(*self.waiting, *self.running)

    def arrive(self) -> None:
        if self.offered:
            self.pending += 1

    def attach(self) -> None:
        free = [card for card in CARDS if card not in self.held()]
        if self.pending and free:
            self.pending -= 1
            self.pick += 1
            self.waiting.append(frozenset(free[: 1 + self.pick % len(free)]))

    def depart(self) -> None:
        if self.running:
            self.running.pop(0)

    def restart(self) -> None:
        if self.running:
            self.waiting.append(self.running.pop())

    def hello(self) -> None:
        if self.miner_on:
            self.miner_on = frozenset(CARDS)

    def observe(self, desired: Desired, api_ok: bool = True) -> Observation:
        busy = self.miner_on | self.letting_go
        self.letting_go = frozenset()
        return Observation(self.now, desired, api_ok, self.pending + len(self.waiting) + len(self.running),
                           len(self.running), bool(self.waiting), bool(self.miner_on), bool(busy),
                           cards=CARDS, held=None if self.pending else self.held(), busy_cards=busy)

    def apply(self, actions: list[str], state: State) -> None:
        for action in actions:
            if action == STOP_MINER:
                self.letting_go, self.miner_on = self.miner_on, frozenset()
            elif action == START_MINER:
                self.miner_on = frozenset(state.mine_on or CARDS)
                if self.miner_on & self.held():
                    raise Violation(f"t={self.now}: miner started on {sorted(self.miner_on & self.held())}, "
                                    "which a lease's container holds or waits for")
            elif action in (OFFER, UNOFFER):
                self.offered = action == OFFER
            elif action == GRANT:
                taken = frozenset().union(*self.waiting)
                if taken & (self.miner_on | self.letting_go):
                    raise Violation(f"t={self.now}: a container starts on {sorted(taken & self.miner_on)}, "
                                    "which the miner holds")
                self.running += self.waiting
                self.waiting = []


card_steps = st.lists(st.tuples(
    st.sampled_from(sorted(DESIRES)),
    st.sampled_from(["arrive", "attach", "attach", "depart", "restart", "hello", "none", "none"]),
    st.integers(min_value=1, max_value=400),
    st.sampled_from([True, True, True, False]),  # the API answers (mostly)
), min_size=1, max_size=120)


def run_cards(plan, interval):
    world, state = CardWorld(), State()
    for desired_name, event, dt, api_ok in plan:
        getattr(world, event, lambda: None)()
        state, actions = decide(state, world.observe(DESIRES[desired_name], api_ok), None, interval)
        world.apply(actions, state)
        held = frozenset().union(*world.running)
        if world.miner_on & held and event != "hello":
            raise Violation(f"t={world.now}: mining on {sorted(world.miner_on & held)} beside a lease")
        world.now += dt
    return world, state


@settings(max_examples=400, deadline=None)
@given(plan=card_steps, interval=st.integers(0, 1200))
def test_per_card_never_mines_a_card_a_lease_holds_or_waits_for(plan, interval):
    run_cards(plan, interval)


@settings(max_examples=300, deadline=None)
@given(plan=card_steps, interval=st.integers(0, 1200), idle=st.booleans())
def test_per_card_mines_every_card_no_lease_holds_once_settled(plan, interval, idle):
    """Whatever came before: with the leases' cards known and the schedule wanting mining, a few observations
    later the miner runs on exactly the cards no lease holds (all of them once the leases are gone)."""
    world, state = run_cards(plan, interval)
    desired = DESIRES["lease-idle" if idle else "mine"]
    world.pending = 0
    for _ in range(4):
        state, actions = decide(state, world.observe(desired), None, interval)
        world.apply(actions, state)
        world.now += interval + 1
    assert not world.waiting
    if not state.whole_rig:
        assert world.miner_on == frozenset(CARDS) - world.held(), (state, world)
    elif not world.running:
        assert world.miner_on == frozenset(CARDS)


def test_per_card_a_one_gpu_lease_stops_mining_on_its_card_only():
    idle = DESIRES["lease-idle"]
    state = State(mode="idle-mining", offered=True, last_switch=0.0)
    every = frozenset(CARDS)

    def obs(now, waiting, running, miner, busy, held):
        return Observation(now, idle, True, 1, running, waiting, miner, bool(busy), cards=CARDS,
                           held=frozenset(held), busy_cards=frozenset(busy))
    # The container waits for GPU-b: the miner (on every card) stops; the gate waits for NVML.
    state, actions = decide(state, obs(10.0, True, 0, True, every, {"GPU-b"}), None, 600)
    assert actions == [STOP_MINER] and state.mode == "leasing" and state.last_was_stop
    # Free: granted, and the miner starts at once on the other two (the interval does not hold a hand-over).
    state, actions = decide(state, obs(11.0, True, 0, False, set(), {"GPU-b"}), None, 600)
    assert actions == [GRANT, START_MINER] and state.mine_on == ("GPU-a", "GPU-c")
    # The OS restarts it on every card (HiveOS hello): stopped at once, and started on the free cards again.
    state, actions = decide(state, obs(12.0, False, 1, True, every, {"GPU-b"}), None, 600)
    assert actions == [STOP_MINER] and state.came_back == 1 and not state.whole_rig and state.mine_on == ()
    state, actions = decide(state, obs(13.0, False, 1, False, set(), {"GPU-b"}), None, 600)
    assert actions == [START_MINER] and state.mine_on == ("GPU-a", "GPU-c")
    # Once more: the rig hands over whole from now on (its OS, or its miner's own script, does not let it be).
    state, actions = decide(state, obs(14.0, False, 1, True, every, {"GPU-b"}), None, 600)
    assert actions == [STOP_MINER] and state.whole_rig and state.mine_on == ()
    state, actions = decide(state, obs(15.0, False, 1, False, set(), {"GPU-b"}), None, 600)
    assert actions == [] and state.mode == "leasing"
    # The lease ends: whole-rig rules again, and after the interval the miner is back on every card.
    done = Observation(700.0, idle, True, 0, 0, False, False, False, cards=CARDS, held=frozenset())
    state, actions = decide(state, done, None, 600)
    assert actions[0] == START_MINER and state.mine_on == () and not state.whole_rig


def test_per_card_a_lease_whose_cards_are_unknown_hands_the_whole_rig_over():
    idle = DESIRES["lease-idle"]
    state = State(mode="idle-mining", offered=True, last_switch=0.0)
    bound = Observation(10.0, idle, True, 1, 0, False, True, True, cards=CARDS, held=None,
                        busy_cards=frozenset(CARDS))
    state, actions = decide(state, bound, None, 600)
    assert actions == [STOP_MINER] and state.mode == "leasing"


def test_per_card_a_lease_that_ends_beside_another_gives_its_card_back_to_the_miner():
    idle = DESIRES["lease-idle"]
    state = State(mode="leasing", offered=True, last_switch=0.0, mine_on=("GPU-a",))

    def obs(now, miner, busy, held):
        return Observation(now, idle, True, len(held), len(held), False, miner, bool(busy), cards=CARDS,
                           held=frozenset(held), busy_cards=frozenset(busy))
    # GPU-c's lease ended, GPU-b's runs on: after the interval the miner is started again on a and c.
    state, actions = decide(state, obs(100.0, True, {"GPU-a"}, {"GPU-b"}), None, 600)
    assert actions == [] and state.mine_on == ("GPU-a",)
    state, actions = decide(state, obs(700.0, True, {"GPU-a"}, {"GPU-b"}), None, 600)
    assert actions == [STOP_MINER]
    state, actions = decide(state, obs(701.0, False, set(), {"GPU-b"}), None, 600)
    assert actions == [START_MINER] and state.mine_on == ("GPU-a", "GPU-c")
    # And once the last lease ends, on every card (stopped and started in one tick: no idle interval).
    state, actions = decide(state, obs(1400.0, True, {"GPU-a", "GPU-c"}, set()), None, 600)
    assert actions == [STOP_MINER, START_MINER] and state.mine_on == () and state.mode == "idle-mining"


def test_per_card_blind_the_miner_keeps_the_free_cards_while_the_gates_record_names_the_leases_cards():
    idle = DESIRES["lease-idle"]
    state = State(mode="leasing", offered=True, last_switch=0.0, mine_on=("GPU-a", "GPU-c"))

    def obs(now, api_ok, gated, miner, held):
        busy = {"GPU-a", "GPU-c"} if miner else set()
        return Observation(now, idle, api_ok, gated, gated, False, miner, miner, cards=CARDS,
                           held=frozenset(held), busy_cards=frozenset(busy))
    # The API unreachable while the lease on GPU-b runs (the gate's own record says so): nothing stops.
    state, actions = decide(state, obs(10.0, False, 1, True, {"GPU-b"}), None, 0)
    assert actions == [] and state.mine_on == ("GPU-a", "GPU-c")
    # The lease ended while blind: no record names a card any more, and the whole-rig rules stop a miner in
    # leasing mode while blind (a lease may be bound unseen); the API back, it mines on every card.
    state, actions = decide(state, obs(20.0, False, 0, True, set()), None, 0)
    assert actions == [STOP_MINER]
    state, actions = decide(state, obs(30.0, True, 0, False, set()), None, 0)
    assert actions[0] == START_MINER and state.mine_on == () and state.mode == "idle-mining"


def test_per_card_a_mining_window_mines_on_the_free_cards_and_on_every_card_once_the_lease_ends():
    mine = DESIRES["mine"]
    state = State(mode="idle-mining", offered=True, last_switch=0.0)

    def obs(now, waiting, running, miner, busy, held):
        return Observation(now, mine, True, 1 if held else 0, running, waiting, miner, bool(busy), cards=CARDS,
                           held=frozenset(held), busy_cards=frozenset(busy))
    every = set(CARDS)
    state, actions = decide(state, obs(10.0, True, 0, True, every, {"GPU-b"}), None, 600)
    assert actions == [UNOFFER, STOP_MINER] and state.mode == "draining"
    state, actions = decide(state, obs(11.0, True, 0, False, set(), {"GPU-b"}), None, 600)
    assert actions == [GRANT, START_MINER] and state.mine_on == ("GPU-a", "GPU-c") and not state.offered
    state, actions = decide(state, obs(700.0, False, 1, True, {"GPU-a", "GPU-c"}, {"GPU-b"}), None, 600)
    assert actions == [] and state.mode == "draining"
    state, actions = decide(state, obs(800.0, False, 0, True, {"GPU-a", "GPU-c"}, set()), None, 600)
    assert actions == [STOP_MINER, START_MINER] and state.mode == "mining" and state.mine_on == ()


sick = st.lists(st.booleans(), min_size=1, max_size=40)  # whether a card is unhealthy, step by step (cycled)


@settings(max_examples=400, deadline=None)
@given(plan=steps, health=sick, grace=st.none() | st.integers(0, 3600), interval=st.integers(0, 1200))
def test_an_unhealthy_card_takes_the_rig_off_the_market_and_changes_nothing_else(plan, health, grace, interval):
    """Issue 56: a card lost, with an Xid or over the owner's limit cordons the rig (no new lease can come) and
    leaves the mode, the miner and the gate exactly as without it (mining is never blamed for a lost card; a
    lease on a hot card runs on); once every card is well the rig is offered again as the mode wants."""
    world, state = World(), State()
    for step, (desired_name, event, dt, api_ok) in enumerate(plan):
        getattr(world, event, lambda: None)()
        obs = world.observe(DESIRES[desired_name], api_ok)
        well = decide(state, obs, grace, interval)
        unhealthy = health[step % len(health)]
        new, actions = decide(state, replace(obs, unhealthy=frozenset({"GPU-a"}) if unhealthy else frozenset()),
                              grace, interval)
        if unhealthy:
            assert replace(new, offered=well[0].offered) == well[0]
            assert [a for a in actions if a not in (OFFER, UNOFFER)] == [
                a for a in well[1] if a not in (OFFER, UNOFFER)]
            assert not new.offered and OFFER not in actions and (UNOFFER in actions) == state.offered
        else:
            assert (new, actions) == well
        state = new
        world.apply(actions)
        assert world.offered == state.offered
        if unhealthy:
            assert not world.offered, "an unhealthy card's rig is offered"
        if world.miner and world.running:
            raise Violation(f"t={world.now}: mining while a lease holds a GPU")
        world.now += dt
