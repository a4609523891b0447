"""The alert rules (miner2provider/alerts/rules.py): each alert fires once, repeats at most every N minutes while it
holds, says when it recovers and never recovers without having fired; what a sweep could not read is left as it was.
Property tests drive random fleets through random sweeps."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.alerts.facts import Card, Rig, Snapshot
from miner2provider.alerts.rules import Message, Rules, State, evaluate, state_from_json, state_json

RULES = Rules(silent_after_s=600, repeat_every_s=1800, temperature_limit_c=85, miner_grace_s=300, wallet_low=10)


def run(snapshots: list[tuple[float, Snapshot]], rules: Rules = RULES) -> list[Message]:
    state, said = State(), []
    for now, snapshot in snapshots:
        state, messages = evaluate(state, snapshot, rules, now)
        said += messages
    return said


def kinds(messages: list[Message], key: str) -> list[str]:
    return [m.kind for m in messages if m.key == key]


def hot(temperature: float | None, health: str = "ok") -> Rig:
    return Rig("rig-1", last_seen=0.0, cards=(Card(0, "GPU-aaa", "RTX 3090", temperature, health),))


def test_a_hot_card_fires_once_repeats_after_the_interval_and_recovers_once():
    seen = [(t, Snapshot((Rig("rig-1", t, cards=(Card(0, "GPU-aaa", "RTX 3090", temp),)),)))
            for t, temp in [(0, 90), (300, 91), (1500, 92), (1800, 92), (2000, 70), (2300, 70)]]
    said = run(seen)
    assert [(m.kind, m.at) for m in said] == [("firing", 0), ("repeat", 1800), ("resolved", 2000)]
    assert said[0].key == "temperature/rig-1/GPU-aaa"
    assert said[0].line == "m2p ALERT: rig-1: card 0 (RTX 3090) at 90 °C, the limit is 85 °C"
    assert said[-1].line == "m2p RESOLVED: rig-1: card 0 (RTX 3090) is below its temperature limit again"


def test_a_silent_rig_fires_after_n_minutes_and_its_cards_neither_repeat_nor_recover_meanwhile():
    card = (Card(1, "GPU-bbb", "RTX 3070", 60, "lost", "GPU is lost"),)
    seen = [(0, Snapshot((Rig("rig-2", 0, cards=card),))),
            (599, Snapshot((Rig("rig-2", 0, read=False),))),
            (600, Snapshot((Rig("rig-2", 0, read=False),))),
            (5000, Snapshot((Rig("rig-2", 0, read=False),))),
            (5100, Snapshot((Rig("rig-2", 5100, cards=card[:0]),)))]
    said = run(seen)
    assert [(m.kind, m.key, m.at) for m in said] == [
        ("firing", "card/rig-2/GPU-bbb", 0), ("firing", "silent/rig-2/", 600), ("repeat", "silent/rig-2/", 5000),
        ("resolved", "silent/rig-2/", 5100), ("resolved", "card/rig-2/GPU-bbb", 5100)]
    assert said[0].text == "rig-2: card 1 (RTX 3070) is lost: GPU is lost"
    assert said[1].text == "rig-2 has not answered for 10 min"


def test_a_rig_never_seen_is_silent_counted_from_the_first_sweep():
    seen = [(1000, Snapshot((Rig("new", None, read=False),))), (1599, Snapshot((Rig("new", None, read=False),))),
            (1600, Snapshot((Rig("new", None, read=False),)))]
    assert [(m.kind, m.at, m.text) for m in run(seen)] == [("firing", 1600, "new has never answered")]


def test_the_miner_gets_its_grace_and_a_recovery_within_it_says_nothing():
    def rig(t: float, mining: bool) -> tuple[float, Snapshot]:
        return t, Snapshot((Rig("r", t, mode="mining", should_mine=True, mining=mining),))
    assert run([rig(0, False), rig(200, True), rig(400, False), rig(699, False)]) == []
    said = run([rig(0, False), rig(300, False), rig(600, True)])
    assert [(m.kind, m.at) for m in said] == [("firing", 300), ("resolved", 600)]
    assert said[0].text == "r: no miner runs, but the rig should mine (mode mining)"


def test_leases_started_and_ended_are_notices_and_the_first_read_is_no_news():
    def rig(t: float, leases: tuple[str, ...] | None, read: bool = True) -> tuple[float, Snapshot]:
        return t, Snapshot((Rig("r", t, read=read, leases=leases),))
    said = run([rig(0, ("a/x",)), rig(60, ("a/x", "b/y")), rig(120, None, read=False), rig(180, ("b/y",))])
    assert [(m.kind, m.text) for m in said] == [("notice", "r: lease b/y started"), ("notice", "r: lease a/x ended")]
    assert run([rig(0, ()), rig(60, ("a/x",))], Rules(off=frozenset({"lease"}))) == []


def test_a_lease_being_reclaimed_fires_and_recovers_when_it_is_gone():
    seen = [(0, Snapshot((Rig("r", 0, reclaiming=("o/1/1/1/p",)),))), (60, Snapshot((Rig("r", 60),)))]
    assert [(m.kind, m.text) for m in run(seen)] == [
        ("firing", "r: lease o/1/1/1/p is being reclaimed"), ("resolved", "r: lease o/1/1/1/p is no longer being "
                                                                         "reclaimed")]


def test_the_provider_and_the_wallet_are_judged_only_when_known():
    seen = [(0, Snapshot((), "no", "no answer (Connection refused)", 4.5, "AKT")),
            (60, Snapshot((), "unknown", "", None, "")),  # not asked, wallet unread: as they were
            (120, Snapshot((), "yes", "", 20.0, "AKT"))]
    said = run(seen)
    assert [(m.kind, m.key) for m in said] == [("firing", "provider//"), ("firing", "wallet//"),
                                               ("resolved", "provider//"), ("resolved", "wallet//")]
    assert said[1].text == "the provider's wallet holds 4.5 AKT, below 10: top it up before its deposits fail"
    assert [m.rule for m in run(seen[:1], Rules())] == ["provider"]  # no wallet_low: no wallet rule


def test_a_rig_that_leaves_the_inventory_has_its_alerts_resolved():
    said = run([(0, Snapshot((hot(90),))), (60, Snapshot(()))])
    assert [m.kind for m in said] == ["firing", "resolved"]


def test_a_rigs_own_words_are_one_line_and_cut():
    card = Card(0, "GPU-x", "A\nB", None, "xid", "Xid 79\x1b[31m " + "y" * 400)
    (message,) = run([(0, Snapshot((Rig("r", 0, cards=(card,)),)))])
    assert "\n" not in message.text and "\x1b" not in message.text and len(message.text) < 260


# -- properties ---------------------------------------------------------------------------------------------------
temps = st.one_of(st.none(), st.floats(40, 100))
healths = st.sampled_from(["ok", "hot", "lost", "xid", "unknown"])
cards = st.lists(st.builds(Card, st.integers(0, 2), st.sampled_from(["", "GPU-a", "GPU-b"]), st.just("m"), temps,
                           healths), max_size=3, unique_by=lambda c: c.key)
rigs = st.builds(Rig, st.sampled_from(["a", "b"]), st.one_of(st.none(), st.floats(0, 20_000)), st.booleans(),
                 st.sampled_from(["mining", "leasing", ""]), st.one_of(st.none(), st.booleans()),
                 st.one_of(st.none(), st.booleans()), st.one_of(st.none(), cards.map(tuple)),
                 st.one_of(st.none(), st.lists(st.sampled_from(["p/1", "p/2"]), unique=True).map(tuple)),
                 st.lists(st.sampled_from(["l/1", "l/2"]), unique=True).map(tuple))
snapshots = st.builds(Snapshot, st.lists(rigs, max_size=2, unique_by=lambda r: r.name).map(tuple),
                      st.sampled_from(["yes", "no", "unknown"]), st.just("refused"),
                      st.one_of(st.none(), st.floats(0, 30)), st.just("AKT"))
sweeps = st.lists(st.tuples(st.floats(1, 1200), snapshots), min_size=1, max_size=25)
rule_sets = st.builds(Rules, st.sampled_from([60.0, 600.0]), st.sampled_from([None, 60.0, 1800.0]),
                      st.one_of(st.none(), st.just(85.0)), st.sampled_from([0.0, 300.0]),
                      st.one_of(st.none(), st.just(10.0)))


def timed(steps: list[tuple[float, Snapshot]]) -> list[tuple[float, Snapshot]]:
    out, now = [], 1000.0
    for gap, snapshot in steps:
        now += gap
        out.append((now, snapshot))
    return out


@settings(max_examples=300, deadline=None)
@given(sweeps, rule_sets)
def test_each_alert_fires_once_repeats_no_sooner_than_asked_and_recovers_only_after_firing(steps, rules):
    said = run(timed(steps), rules)
    for key in {m.key for m in said if m.kind != "notice"}:
        firing = False
        last = None
        for m in (m for m in said if m.key == key):
            if m.kind == "firing":
                assert not firing, f"{key} fired twice without a recovery"
                firing, last = True, m.at
            elif m.kind == "repeat":
                assert firing and rules.repeat_every_s is not None and m.at - last >= rules.repeat_every_s
                last = m.at
            else:
                assert m.kind == "resolved" and firing, f"{key} recovered without firing"
                firing = False


@settings(max_examples=300, deadline=None)
@given(sweeps, rule_sets)
def test_what_holds_is_remembered_and_a_fired_alert_stays_known_until_it_recovers(steps, rules):
    state = State()
    fired: set[str] = set()
    for now, snapshot in timed(steps):
        state, messages = evaluate(state, snapshot, rules, now)
        fired |= {m.key for m in messages if m.kind == "firing"}
        fired -= {m.key for m in messages if m.kind == "resolved"}
        assert fired == {key for key, held in state.held.items() if held.sent is not None}


@settings(max_examples=100, deadline=None)
@given(sweeps, rule_sets)
def test_the_state_reads_back_from_its_json_and_judges_the_same(steps, rules):
    state = State()
    for now, snapshot in timed(steps):
        kept = state_from_json(json.loads(json.dumps(state_json(state))))
        assert kept == state
        state, said = evaluate(state, snapshot, rules, now)
        assert evaluate(kept, snapshot, rules, now) == (state, said)
    assert state_from_json({"held": "x"}) == State()
