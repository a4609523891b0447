"""Golden files: every fact parses captured output into exactly the expected value.

tests/unit/facts/<fact>/<case>.json = {"source", "rc", "output", "expected"}; one file
per mining OS, GPU family and failure seen.  Add a case when a rig shows new output.
"""

import dataclasses
import json
from pathlib import Path

import pytest

from miner2provider.detect.facts import ALL_FACTS, FACTS_BY_NAME, ON_DEMAND_FACTS
from miner2provider.detect.facts.base import Output

CASES = sorted((Path(__file__).parent / "facts").glob("*/*.json"))


def plain(value):
    if dataclasses.is_dataclass(value):
        return {k: plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fact_parses_golden_output(case):
    data = json.loads(case.read_text())
    fact = FACTS_BY_NAME[case.parent.name]
    assert plain(fact.parse(Output(data["output"], data["rc"]))) == data["expected"]


def test_every_fact_has_golden_cases():
    covered = {p.parent.name for p in CASES}
    assert covered == {f.name for f in (*ALL_FACTS, *ON_DEMAND_FACTS)}


def test_gpu_golden_cases_cover_the_card_families():
    gpu_cases = {p.stem for p in CASES if p.parent.name == "gpus"}
    assert {"rtx3060", "rtx3070", "rtx3080", "rtx3090", "rtx4090", "cmp90hx", "a5000", "t4",
            "multi-3090", "mixed", "driver-not-loaded"} <= gpu_cases
