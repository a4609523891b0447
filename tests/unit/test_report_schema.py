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
