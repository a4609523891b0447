"""Run every Molecule scenario (create, converge, idempotence, verify, destroy).

Molecule's own summary has once called a failed step a success: judge by exit code.
The rigs it boots are owned by this pytest process, so killing the run cleans up.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import _require_harness

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario):
    _require_harness()
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["M2P_SANDBOX_OWNER_PID"] = str(os.getpid())
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["PY_COLORS"] = "0"
    proc = subprocess.run(
        ["molecule", "test", "-s", scenario], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900,
    )
    assert proc.returncode == 0, failure_account(proc.stdout)


def failure_account(output: str) -> str:
    """What a failed scenario said: each failed task's lines (its TASK header on), then the run's tail.  The
    tail alone loses the failure when a rescue or the destroy step runs after it (a CI run's revert failed
    inside a block, and only the rescue's summary was left in the last 6,000 characters)."""
    lines = output.splitlines()
    failed = [i for i, line in enumerate(lines) if line.startswith(("fatal:", "failed:")) or "FAILED!" in line]
    parts = []
    for i in failed[:6]:
        start = next((j for j in range(i, max(-1, i - 40), -1) if lines[j].startswith("TASK [")), i)
        parts.append("\n".join(lines[start:i + 12])[:2500])
    return "\n...\n".join([*parts, output[-4000:]])
