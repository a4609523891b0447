"""The agent's status is one typed record (rigside/status.py's AgentStatus): the agent writes it with as_json, the
controller reads it with agent_status_from, and what is written is what is read back (property test)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.rigside.ledger import ALGO_CHARS, MAX_GPUS
from miner2provider.rigside.status import (
    HAND_OVERS,
    HEALTHS,
    AgentStatus,
    Card,
    Lease,
    Measured,
    Telemetry,
    agent_status_from,
)


def text(cut: int = 100) -> st.SearchStrategy[str]:
    return st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=cut)


money = st.none() | st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
figures = st.lists(st.floats(0, 1e6, allow_nan=False, allow_infinity=False), min_size=1, max_size=MAX_GPUS)


figure = st.none() | st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
whole = st.none() | st.integers(0, 2**64 - 1)
cards = st.builds(Card, st.integers(0, 2**31 - 1), text(), text(), text(20), st.sampled_from(HEALTHS), text(200),
                  *[figure] * 9, *[whole] * 4)
telemetry = st.none() | st.builds(Telemetry, text(), st.lists(cards, max_size=MAX_GPUS).map(tuple), text(300))


@st.composite
def records(draw: st.DrawFn) -> AgentStatus:
    leases = tuple(draw(st.lists(st.builds(Lease, text(300).filter(bool), text()), max_size=4)))
    measured = draw(st.none() | st.builds(
        Measured, text(ALGO_CHARS).filter(bool), figures.map(tuple),
        st.just(()) | figures.map(tuple)))
    pays = draw(st.none() | st.booleans())
    of = draw(st.integers(1, MAX_GPUS))
    leased = draw(st.none() | st.tuples(st.integers(1, of), st.floats(0, 1e6, allow_nan=False)))
    return AgentStatus(
        True, draw(st.sampled_from(["mining", "idle-mining", "leasing", "draining"])), draw(text()), draw(text()),
        draw(text()), draw(text(300)), leases,
        draw(st.booleans()), measured, pays,
        draw(money) if pays is not None else None, draw(text()) if pays is not None else "", draw(text()),
        draw(money) if pays is not None else None,
        leased[0] if leased and pays is not None else 0, of if leased and pays is not None else 0,
        leased[1] if leased and pays is not None else None,
        draw(st.sampled_from(["", *HAND_OVERS])), draw(text(200)), draw(text()), draw(text()), draw(text()),
        draw(st.booleans()), draw(money) if pays is not None else None,
        draw(text(200)) if pays is not None else "",
        draw(st.integers(0, 2**31 - 1)) if measured else 0, draw(text()) if measured else "",
        tuple(draw(st.none() | st.integers(0, MAX_GPUS)) for _ in leases), draw(telemetry))


@settings(max_examples=300, deadline=None)
@given(records())
def test_what_the_agent_writes_is_what_the_controller_reads(record):
    assert agent_status_from(json.loads(json.dumps(record.as_json()))) == record


def test_a_lease_the_api_has_not_listed_says_no_gpus_and_odd_counts_read_as_unsaid():
    written = AgentStatus(True, "leasing", leases=(Lease("a/b", ""), Lease("c/d", "")), lease_gpus=(None, 2)).as_json()
    assert written["leases"] == [{"pod": "a/b", "since": ""}, {"pod": "c/d", "since": "", "gpus": 2}]
    odd = agent_status_from({"mode": "leasing", "leases": [{"pod": "x", "gpus": True}, {"pod": "y", "gpus": 65}]})
    assert odd.lease_gpus == (None, None)


def test_a_status_before_telemetry_reads_as_none_and_odd_cards_read_as_unread():
    assert agent_status_from({"mode": "mining"}).telemetry is None
    odd = agent_status_from({"mode": "mining", "telemetry": {"read_at": "2026-11-29T08:00:00+00:00", "cards": [
        {"index": 0, "uuid": "GPU-a", "health": "on fire", "temperature_c": "91", "throttle": -1, "pcie_gen": True},
        {"index": True}, {"index": -1}, "card", {"uuid": "no index"},
        *({"index": n} for n in range(1, MAX_GPUS + 4))]}}).telemetry
    assert odd is not None and odd.read_at == "2026-11-29T08:00:00+00:00"
    first = odd.cards[0]
    assert (first.health, first.temperature_c, first.throttle, first.pcie_gen) == ("unknown", None, None, None)
    assert len(odd.cards) <= MAX_GPUS and all(card.index >= 0 for card in odd.cards)


def test_a_card_without_a_figure_leaves_it_out_of_the_status():
    card = Card(0, "GPU-a", "NVIDIA GeForce RTX 3090", "00000000:01:00.0", "hot", "91 °C, the limit is 85 °C",
                temperature_c=91.0, ecc_uncorrected=None)
    row = AgentStatus(True, "mining", telemetry=Telemetry("t", (card,))).as_json()["telemetry"]["cards"][0]
    assert row["temperature_c"] == 91.0 and "ecc_uncorrected" not in row and "fan_percent" not in row
