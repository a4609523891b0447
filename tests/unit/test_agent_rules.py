"""The agent's rules beside the mode's (agent/rules.py), property-tested: pure, from an Observation, a State and
what the tick read of the rig, to the one Plan the effectors carry out."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.agent import rules
from miner2provider.agent.decide import GRANT, OFFER, START_MINER, STOP_MINER, UNOFFER, Observation, State
from miner2provider.timeshare.policy import Desired

MODES = ("mining", "idle-mining", "leasing", "draining")
desires = st.builds(Desired, st.booleans(), st.booleans())
states = st.builds(State, st.sampled_from(MODES), st.just(0.0), st.sampled_from([float("-inf"), 0.0, 50.0]),
                   st.sampled_from([None, 0.0]), st.none(), st.booleans())
observations = st.builds(
    Observation, st.sampled_from([100.0, 1000.0]), desires, st.booleans(), st.integers(0, 2), st.integers(0, 2),
    st.booleans(), st.booleans(), st.booleans())
rigs = st.builds(
    rules.Rig, respawns=st.integers(0, 4), lease_gated=st.booleans(), others_waiting=st.booleans(),
    watchdog_was=st.sampled_from([None, True, False]), watchdog_running=st.sampled_from([None, True, False]),
    watchdog_checked=st.sampled_from([float("-inf"), 95.0, 999.0]),
    node=st.sampled_from([None, (False, False), (True, False), (True, True), (False, True)]),
    cordoned_here=st.booleans(), drain=st.booleans(), gate_in_spec=st.booleans(), cdi_spec=st.just("/etc/cdi/x"))


def plan(state: State, obs: Observation, rig: rules.Rig) -> rules.Plan:
    return rules.plan(state, obs, rig, 600.0, 0.0)


@settings(max_examples=400, deadline=None)
@given(states, observations, rigs)
def test_a_miner_that_keeps_coming_back_takes_the_rig_off_the_market_and_no_lease_is_handed_the_gpus(state, obs, rig):
    rig = replace(rig, respawns=max(rig.respawns, rules.RESPAWN_STRIKES))
    p = plan(state, obs, rig)
    assert OFFER not in p.actions
    assert any(rules.RESPAWN_SENTENCE in said for said in p.said)
    if obs.gate_waiting and not rig.lease_gated:
        assert p.refuse_leases and GRANT not in p.actions
    else:
        assert not p.refuse_leases


@settings(max_examples=400, deadline=None)
@given(states, observations, rigs)
def test_below_the_strikes_nothing_is_refused_for_respawns(state, obs, rig):
    p = plan(state, obs, replace(rig, respawns=min(rig.respawns, rules.RESPAWN_STRIKES - 1)))
    assert not p.refuse_leases and not any(rules.RESPAWN_SENTENCE in said for said in p.said)


@settings(max_examples=400, deadline=None)
@given(states, observations, rigs)
def test_containers_that_are_no_lease_never_share_the_cards_with_the_miner(state, obs, rig):
    p = plan(state, obs, rig)
    if not rig.others_waiting:
        assert p.others == ""
    elif obs.miner_running or obs.gpus_busy:
        assert p.others == rules.REFUSE
    else:
        assert p.others == rules.GRANT
    # They never stop the miner and never count as a lease: the mode's decision is the same without them.
    without = plan(state, obs, replace(rig, others_waiting=False))
    assert (p.state, p.actions) == (without.state, without.actions)


@settings(max_examples=400, deadline=None)
@given(states, observations, rigs)
def test_the_watchdog_is_held_only_while_leased_and_given_back_as_it_was(state, obs, rig):
    p = plan(state, obs, rig)
    leased = p.state.mode in rules.LEASED
    if p.watchdog in (rules.HOLD, rules.HOLD_AGAIN):
        assert leased
    if p.watchdog == rules.HOLD:
        assert rig.watchdog_was is None and p.watchdog_was is rig.watchdog_running is not None
    if p.watchdog == rules.RELEASE:
        assert not leased and rig.watchdog_was is not None and p.watchdog_was is None
        assert rules.released_as(p, rig) is rig.watchdog_was
    if leased and rig.watchdog_was is not None:
        assert p.watchdog_was is rig.watchdog_was  # a look again never forgets how it was
    if not leased and rig.watchdog_was is None:
        assert p.watchdog == "" and p.watchdog_was is None


@settings(max_examples=400, deadline=None)
@given(states, observations, rigs)
def test_the_cordon_follows_the_offer_the_drain_and_the_gate_and_an_owners_cordon_stays(state, obs, rig):
    p = plan(state, obs, rig)
    if rig.node is None:  # the API did not answer: nothing is patched
        assert p.cordon == "" and not p.remove_taint
        return
    cordoned, taint = rig.node
    assert p.remove_taint == taint
    wanted = (rig.drain or not p.state.offered
              or (p.state.mode == "idle-mining" and not rig.gate_in_spec))
    if wanted:
        assert p.cordon == ("" if cordoned else rules.CORDON)
    if p.cordon == rules.UNCORDON:
        assert rig.cordoned_here and cordoned and not wanted  # only the agent's own cordon is lifted
    if not rig.cordoned_here:
        assert p.cordon in ("", rules.CORDON)
    lacks = [said for said in p.cordon_said if "lacks m2p's gate" in said]
    assert bool(lacks) == (not rig.drain and p.state.offered and p.state.mode == "idle-mining"
                           and not rig.gate_in_spec)


@settings(max_examples=400, deadline=None)
@given(states, observations, rigs)
def test_a_switch_the_disk_cannot_record_is_not_made_and_the_rig_leaves_the_market(state, obs, rig):
    planned = plan(state, obs, rig)
    kept = rules.unrecorded(planned, state, rig, obs.now, "/var/lib/m2p/agent")
    assert STOP_MINER not in kept.actions and OFFER not in kept.actions
    if any(a in (STOP_MINER, OFFER) for a in planned.actions):
        assert kept.state == replace(state, offered=False)
        assert kept.actions == ((UNOFFER,) if state.offered else ())
        assert any("cannot write /var/lib/m2p/agent: not switching" in said for said in kept.said)
    else:  # toward mining (a start, a cordon) goes on unrecorded
        assert kept == planned
        assert set(planned.actions) <= {START_MINER, UNOFFER, GRANT, "reset-clocks"}


def test_a_miner_beside_a_lease_that_takes_none_of_its_cards_is_said_after_the_grace():
    obs = Observation(200.0, Desired(True, True), True, 1, 1, False, True, True,
                      cards=("a", "b"), held=frozenset({"a"}), busy_cards=frozenset())
    rig = rules.Rig(mine_on=("b",), beside_since=200.0 - rules.BESIDE_GRACE_S)
    assert rules.idle_beside(obs, rig) and "runs on none of them after 60 s" in rules.idle_beside(obs, rig)[0]
    assert rules.idle_beside(obs, replace(rig, beside_since=200.0 - rules.BESIDE_GRACE_S + 1)) == ()
    assert rules.idle_beside(replace(obs, busy_cards=frozenset({"b"})), rig) == ()  # it took its card


def test_the_watchdog_is_read_only_when_a_lease_may_hold_it_or_a_look_is_due():
    mining = Observation(100.0, Desired(False, True), True, 0, 0, False, True, True)
    assert not rules.watchdog_wanted("mining", mining, rules.Rig())
    assert rules.watchdog_wanted("mining", replace(mining, leases=1), rules.Rig())
    assert rules.watchdog_wanted("mining", replace(mining, desired=Desired(True, False)), rules.Rig())
    held = rules.Rig(watchdog_was=True, watchdog_checked=95.0)
    assert not rules.watchdog_wanted("leasing", mining, held)
    assert rules.watchdog_wanted("leasing", replace(mining, now=105.0), held)


@settings(max_examples=400, deadline=None)
@given(states, observations, rigs, st.booleans())
def test_an_unhealthy_card_is_handed_to_no_lease_at_the_gate_and_the_miner_is_not_blamed(state, obs, rig, sick):
    """Issue 56: a lease's container that would get an unhealthy card is refused at the gate (with the reason), the
    rig is off the market, and everything else (the miner, the other leases' containers at the gate, which
    ``gate_waiting`` counts) is decided as if that container had never come: one lease asking for a sick card never
    holds back a lease asking for healthy ones."""
    why = "a card of this rig is unhealthy (card 0 (GPU-a) hot: 91 °C): m2p hands it to no lease"
    obs = replace(obs, gate_unhealthy=why, unhealthy=frozenset({"GPU-a"}) if sick else obs.unhealthy)
    p = plan(state, obs, rig)
    assert p.refuse_unhealthy == why
    assert replace(p, refuse_unhealthy="") == plan(state, replace(obs, gate_unhealthy=""), rig)
    if not obs.gate_waiting:
        assert GRANT not in p.actions and p.refuse_leases in ("", f"{rules.RESPAWN_SENTENCE}: this rig takes no lease now")
    if sick:
        assert OFFER not in p.actions and not p.state.offered
        assert p.cordon in ("", rules.CORDON) and (p.cordon or rig.node is None or rig.node[0])
