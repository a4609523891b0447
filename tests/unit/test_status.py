"""The agent's status is one typed record (rigside/status.py's AgentStatus): the agent writes it with as_json, the
controller reads it with agent_status_from, and what is written is what is read back (property test)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.rigside.ledger import ALGO_CHARS, MAX_GPUS
from miner2provider.rigside.status import HAND_OVERS, AgentStatus, Lease, Measured, agent_status_from


def text(cut: int = 100) -> st.SearchStrategy[str]:
    return st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=cut)


money = st.none() | st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
figures = st.lists(st.floats(0, 1e6, allow_nan=False, allow_infinity=False), min_size=1, max_size=MAX_GPUS)


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
        tuple(draw(st.none() | st.integers(0, MAX_GPUS)) for _ in leases))


@settings(max_examples=300, deadline=None)
@given(records())
def test_what_the_agent_writes_is_what_the_controller_reads(record):
    assert agent_status_from(json.loads(json.dumps(record.as_json()))) == record


def test_a_lease_the_api_has_not_listed_says_no_gpus_and_odd_counts_read_as_unsaid():
    written = AgentStatus(True, "leasing", leases=(Lease("a/b", ""), Lease("c/d", "")), lease_gpus=(None, 2)).as_json()
    assert written["leases"] == [{"pod": "a/b", "since": ""}, {"pod": "c/d", "since": "", "gpus": 2}]
    odd = agent_status_from({"mode": "leasing", "leases": [{"pod": "x", "gpus": True}, {"pod": "y", "gpus": 65}]})
    assert odd.lease_gpus == (None, None)
