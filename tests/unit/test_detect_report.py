"""The rig report's one schema: report_json and report_from_json round-trip (property tests), and the
history's stored reports are upgraded to it."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from miner2provider.detect.report import REPORT_SCHEMA, RigReport, SchemaError, report_from_json, report_json

# JSON has no NaN or infinity, and the rig's numbers are finite (parsers cut the rest): finite floats only.
st.register_type_strategy(float, st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.from_type(RigReport))
def test_a_report_round_trips_through_its_json(report):
    text = json.dumps(report_json(report))  # what --json prints and the history stores
    assert report_from_json(json.loads(text)) == report


def test_a_real_report_round_trips_and_carries_its_schema():
    from test_readiness import facts  # tests/unit is on sys.path (no package)

    from miner2provider.detect.readiness import assess

    rig = facts()
    report = RigReport("rig01", "10.0.0.1", rig, assess(rig), warnings=("host key new",))
    data = json.loads(json.dumps(report_json(report)))
    assert data["schema"] == REPORT_SCHEMA and data["status"] == "ready"
    assert data["facts"]["mining_os"]["label"] == "HiveOS"  # derived for readers, not read back
    assert report_from_json(data) == report


@pytest.mark.parametrize("data, found", [({"rig": "x"}, "None"), ({"schema": 2}, "2"), ([], "'list'")])
def test_a_report_of_another_schema_is_refused_by_name(data, found):
    with pytest.raises(SchemaError, match=f"schema {REPORT_SCHEMA} expected, found {found}"):
        report_from_json(data)


def test_the_agent_status_carries_its_schema_and_one_reader_reads_it_from_the_rig_and_the_node(tmp_path):
    """status.json on the rig and the m2p.io/status annotation are the same text, read by agent_status_from;
    a status of a newer schema is said to be one, never read as a wrong one; one without (older agents) is 1."""
    from miner2provider.detect.facts.base import Output
    from miner2provider.detect.facts.node import AgentStatusFact
    from miner2provider.rigside.status import STATUS_SCHEMA, agent_status_from

    written = {"schema": STATUS_SCHEMA, "mode": "leasing", "since": "2026-11-25T10:00:00+00:00",
               "leases": [{"pod": "tenant/job", "since": "2026-11-25T10:00:01Z"}], "drain": False,
               "profit": {"lease_pays": True, "floor_per_hour": 0.24, "source": "economics file"}}
    from_rig = AgentStatusFact.parse(Output(json.dumps(written), 0))
    assert from_rig == agent_status_from(json.loads(json.dumps(written)))  # the annotation's path
    assert (from_rig.mode, from_rig.leases[0].pod, from_rig.lease_pays, from_rig.floor_per_hour) == (
        "leasing", "tenant/job", True, 0.24)
    assert agent_status_from({k: v for k, v in written.items() if k != "schema"}) == from_rig
    newer = agent_status_from({**written, "schema": STATUS_SCHEMA + 1})
    assert newer.mode == "unknown" and "status schema '2' is not 1" in newer.last_error and not newer.leases
