"""Golden cases: nvidia-smi rows of real cards -> exact node labels and provider attributes.

cases/<case>.json = {"rows": [nvidia-smi --query-gpu rows], "cuda", "labels", "warnings",
"attributes"}.  Rows use the card names, device ids and memory captured in
shared/reference (see tests/unit/facts/gpus/ for each row's source).  Regenerate a case
only after reading its diff: `M2P_UPDATE_GOLDEN=1 pytest tests/unit/attributes`.
"""

import json
import os
from pathlib import Path

import pytest

from miner2provider.detect.facts.base import Output
from miner2provider.detect.facts.gpu import GpusFact
from miner2provider.market.akash.provider import fleet_attributes
from miner2provider.market.base import RigGpus

CASES = sorted((Path(__file__).parent / "cases").glob("*.json"))


def compute(case):
    gpus = GpusFact.parse(Output("\n".join(case["rows"]) + "\n", 0))
    fleet = fleet_attributes([RigGpus("rig", gpus, case["cuda"])])
    (rig,) = fleet.rigs
    return {"labels": rig.labels, "warnings": list(rig.warnings) + list(fleet.warnings),
            "attributes": [[k, v] for k, v in fleet.attributes]}


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_golden_attributes(path):
    case = json.loads(path.read_text())
    got = compute(case)
    if os.environ.get("M2P_UPDATE_GOLDEN"):
        path.write_text(json.dumps({**case, **got}, indent=2) + "\n")
    assert got == {k: case[k] for k in ("labels", "warnings", "attributes")}


def test_cases_cover_the_issue_list():
    assert {p.stem for p in CASES} >= {"rtx3060", "rtx3070", "rtx3080", "rtx3090", "rtx4090", "cmp90hx",
                                       "a5000", "t4", "multi-3090", "mixed"}
