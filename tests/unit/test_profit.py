"""Policy profit (timeshare/profit.py): the offer from the economics file's prices, with hysteresis and the
switch interval.  Property tests (hypothesis) for the offer alone and for the offer driving the agent's
decisions (decide.py) in the simulated world of test_agent_decide."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_agent_decide import Violation, World  # the simulated rig and cluster (this folder)

from miner2provider.agent.decide import START_MINER, State, decide
from miner2provider.core.errors import ScheduleError
from miner2provider.timeshare import economics, model, policy, profit

ECONOMICS = economics.parse("""\
lease_price_per_gpu_hour: {rtx3090: 0.30, default: 0.10}
mining_revenue_per_gpu_day: {rtx3090: 2.40, cmp90hx: 3.60}
gpu_power_watts: {default: 250}
power_price_per_kwh: 0.20
margin: 0.10
""")


def test_the_rig_quote_sums_its_cards_and_names_what_is_missing():
    # rtx3090: power 0.05/h, net 0.10 - 0.05 = 0.05/h, floor 0.05 + 1.1 x 0.05 = 0.105/h
    q = profit.quote({"rtx3090": 2}, ECONOMICS)
    assert q.lease_per_hour == pytest.approx(0.60) and q.floor_per_hour == pytest.approx(0.21) and not q.missing
    mixed = profit.quote({"rtx3090": 1, "cmp90hx": 1}, ECONOMICS)  # cmp90hx: the default lease price
    assert mixed.lease_per_hour == pytest.approx(0.40)
    assert mixed.floor_per_hour == pytest.approx(0.105 + 0.05 + 1.1 * (0.15 - 0.05))
    unknown = profit.quote({"rtx3090": 1, "a4000": 1}, ECONOMICS)
    assert unknown.lease_per_hour is None and unknown.floor_per_hour is None
    assert unknown.missing == "mining_revenue_per_gpu_day for a4000"
    assert "no m2p.io/gpu.model labels" in profit.quote({}, ECONOMICS).missing


def test_a_partial_lease_is_priced_as_the_gpus_it_holds():
    """Whole-rig hand-over: 1 of 3 GPUs leased pays a third of the rig's lease income, against the whole floor."""
    q = profit.leased(profit.quote({"rtx3090": 3}, ECONOMICS), 1, 3)
    assert q.leased_per_hour == pytest.approx(0.30) and q.floor_per_hour == pytest.approx(0.315)
    assert q.as_status()["leased"] == {"gpus": 1, "of": 3, "per_hour": 0.3}
    assert profit.leased(q, 5, 3).leased_per_hour == pytest.approx(0.90)  # never more than the rig
    assert "leased" not in profit.leased(q, 0, 3).as_status()
    assert profit.leased(profit.Quote(None, None, "x"), 1, 3).leased_per_hour is None


def test_cards_come_from_m2ps_own_model_labels_only():
    labels = {"m2p.io/gpu.model.rtx3090": "2", "m2p.io/gpu.model.cmp90hx": "1", "m2p.io/gpu.model.x": "two",
              "m2p.io/gpu-models": "2",
              # the marketplace's labels say the same, and are not read (they are the marketplace's business)
              "akash.network/capabilities.gpu.vendor.nvidia.model.rtx3090": "2",
              "akash.network/capabilities.gpu.vendor.nvidia.model.rtx3090.ram.24Gi": "2",
              "akash.network/capabilities.gpu.vendor.nvidia.model.rtx3090.interface.pcie": "2",
              "akash.network/capabilities.gpu.vendor.nvidia.model.cmp90hx": "1",
              "nvidia.com/gpu.count": "3", "akash.network/capabilities.gpu.vendor.nvidia.model.x": "two"}
    assert profit.cards_from_labels(labels) == {"rtx3090": 2, "cmp90hx": 1}


def test_a_missing_figure_decides_nothing():
    offer = profit.Offer(True, 5.0)
    assert profit.decide_offer(offer, profit.Quote(None, None, "x"), 1e6, 0.05, 0) == offer
    assert profit.decide_offer(profit.Offer(), profit.Quote(None, None, "x"), 1e6, 0.05, 0) == profit.Offer()


prices = st.lists(st.tuples(st.floats(0, 2), st.floats(0, 2), st.integers(1, 900)), min_size=1, max_size=200)


@settings(max_examples=300, deadline=None)
@given(plan=prices, hysteresis=st.sampled_from([0.0, 0.05, 0.2]), interval=st.integers(0, 3600))
def test_the_offer_follows_the_band_and_never_flaps_faster_than_the_interval(plan, hysteresis, interval):
    offer, now, changes = profit.Offer(), 0.0, []
    for lease, floor, dt in plan:
        before = offer
        offer = profit.decide_offer(offer, profit.Quote(lease, floor), now, hysteresis, interval)
        if offer != before:
            changes.append(now)
            # It changes only across the band: offered at floor x (1+h), withdrawn below floor x (1-h).
            assert lease >= floor * (1 + hysteresis) if offer.offered else lease < floor * (1 - hysteresis)
        elif now - before.changed >= interval:
            # Free to switch and did not: the price is on the side (or inside the band) that keeps it.
            assert lease >= floor * (1 - hysteresis) if offer.offered else lease < floor * (1 + hysteresis)
        now += dt
    assert all(b - a >= interval for a, b in pairwise(changes))


@settings(max_examples=300, deadline=None)
@given(plan=prices, hysteresis=st.sampled_from([0.0, 0.05, 0.2]), interval=st.integers(0, 7200),
       window=st.sampled_from([None, 3600.0, 86400.0]))
def test_a_reclamation_window_only_raises_the_bar_to_be_offered_and_never_by_more_than_the_band(
        plan, hysteresis, interval, window):
    """The window's price (profit.priced) is at most floor x h (mining's least lead at the exit, spread over
    at least W), 0 without a window; withdrawing is as before."""
    offer, bare, now = profit.Offer(), profit.Offer(), 0.0
    for lease, floor, dt in plan:
        q = profit.priced(profit.Quote(lease, floor), hysteresis, window, interval)
        assert 0 <= q.reclaim_per_hour <= floor * hysteresis + 1e-12
        if not window:
            assert q.reclaim_per_hour == 0
        before = offer
        offer = profit.decide_offer(offer, q, now, hysteresis, interval)
        bare = profit.decide_offer(bare, profit.Quote(lease, floor), now, hysteresis, interval)
        if offer.offered and not before.offered:
            assert lease >= floor * (1 + hysteresis) + q.reclaim_per_hour
        if before.offered and not offer.offered:
            assert lease < floor * (1 - hysteresis)
        if window is None:
            assert offer == bare
        now += dt


WEEK_SCHEDULE = model.parse("timezone: UTC\npolicy: profit\nmin_switch_interval: 0s\nwindows:\n"
                            "  - {days: daily, from: '18:00', to: '22:00', mode: mine}\n")


@settings(max_examples=300, deadline=None)
@given(plan=st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["arrive", "depart", "withdraw", "restart",
                                                                 "none"]), st.integers(1, 900)),
                     min_size=1, max_size=150),
       interval=st.integers(0, 1200))
def test_prices_moving_never_cut_a_lease_nor_mine_beside_one(plan, interval):
    """The offer drives the agent's decisions through policy.desired_at; the world raises when the miner
    starts while a lease's container runs or waits, or mines beside one."""
    world, state, offer = World(), State(), profit.Offer()
    for lease, event, dt in plan:
        getattr(world, event, lambda: None)()
        offer = profit.decide_offer(offer, profit.Quote(lease, 0.5), world.now, 0.05, interval)
        at = datetime.fromtimestamp(1_800_000_000 + world.now, UTC)
        desired = policy.desired_at(WEEK_SCHEDULE, at, offer.offered)
        state, actions = decide(state, world.observe(desired, True), None, interval)
        world.apply(actions)
        if START_MINER in actions:
            assert not world.leases, "the miner started while a lease pod is bound"
        if world.miner and world.running:
            raise Violation(f"t={world.now}: mining while a lease holds a GPU")
        world.now += dt


def test_a_mining_window_wins_over_a_paying_lease():
    monday_19 = datetime(2026, 11, 23, 19, 0, tzinfo=UTC)
    assert not policy.desired_at(WEEK_SCHEDULE, monday_19, lease_pays=True).offered
    assert policy.desired_at(WEEK_SCHEDULE, monday_19.replace(hour=12), lease_pays=True).offered
    assert not policy.desired_at(WEEK_SCHEDULE, monday_19.replace(hour=12), lease_pays=False).offered
    # Other policies ignore the price.
    lease_first = model.parse("timezone: UTC\npolicy: lease-first\n")
    assert policy.desired_at(lease_first, monday_19, lease_pays=False).offered
    assert policy.next_change(WEEK_SCHEDULE, monday_19.replace(hour=12), lease_pays=True) == monday_19.replace(hour=18)
    assert policy.next_change(WEEK_SCHEDULE, monday_19.replace(hour=12), lease_pays=False) is None


@pytest.mark.parametrize(("text", "line", "said"), [
    ("timezone: UTC\npolicy: profit\nwindows:\n  - {days: daily, from: '1:00', to: '2:00', mode: lease}\n", 4,
     "mine"),
    ("timezone: UTC\npolicy: lease-first\nhysteresis: 0.1\n", 3, "policy profit only"),
    ("timezone: UTC\npolicy: profit\nhysteresis: 0.9\n", 3, "a fraction from 0 to 0.5"),
    ("timezone: UTC\npolicy: profit\nhysteresis: .nan\n", 3, "a fraction from 0 to 0.5"),
    ("timezone: UTC\npolicy: profit\nhysteresis: yes\n", 3, "a fraction from 0 to 0.5"),
])
def test_profit_schedule_mistakes_name_their_line(text, line, said):
    with pytest.raises(ScheduleError) as caught:
        model.parse(text, "s.yml")
    assert caught.value.where == f"s.yml:{line}" and said in str(caught.value)


def test_a_profit_schedule_reads_its_hysteresis():
    assert model.parse("timezone: UTC\npolicy: profit\nhysteresis: 0.1\n").hysteresis == 0.1
    assert model.parse("timezone: UTC\npolicy: profit\n").hysteresis == model.DEFAULT_HYSTERESIS


def test_a_rig_model_without_watts_has_no_floor_when_power_has_a_price():
    """Unknown power is never free: the quote names the watts it lacks and decides nothing; measured watts serve."""
    econ = economics.parse("lease_price_per_gpu_hour: {default: 0.30}\nmining_revenue_per_gpu_day: {default: 2.4}\n"
                           "mining_revenue_per_mhs_day: {kawpow: 0.02}\ngpu_power_watts: {rtx3090: 300}\n"
                           "power_price_per_kwh: 0.20\n")
    q = profit.quote({"rtx3070": 1}, econ)
    assert q.floor_per_hour is None and q.missing == "gpu_power_watts for rtx3070"
    unmeasured = profit.quote({"rtx3070": 1}, econ, ("kawpow", (20.0,), ()))
    assert unmeasured.floor_per_hour is None and unmeasured.missing == "gpu_power_watts for rtx3070"
    measured = profit.quote({"rtx3070": 1}, econ, ("kawpow", (20.0,), (130.0,)))
    assert measured.floor_per_hour == pytest.approx(0.026 + max(0.4 / 24 - 0.026, 0)) and not measured.missing
    assert profit.decide_offer(profit.Offer(), q, 0.0, 0.05, 600) == profit.Offer()
