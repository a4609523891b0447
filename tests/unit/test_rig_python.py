"""The one list of code that runs on the rigs' own python3 (3.8+): pyproject.toml's
[tool.ruff.per-file-target-version], which ruff reads and scripts/test hands to vermin.  Everything the
rigs run is in it: the agent's zipapp, the reclaimer's, and fleet/adopt_on_rig.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from miner2provider.fleet import agent_zipapp
from miner2provider.market.akash import stack

ROOT = Path(__file__).resolve().parents[2]


def rig_python() -> list[str]:
    targets = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["per-file-target-version"]
    return [glob for glob, version in targets.items() if version == "py38"]


def covered(path: str, globs: list[str]) -> bool:
    return any(path == g or (g.endswith("/**") and path.startswith(g.removesuffix("**"))) for g in globs)


def zipapp_files(entry: str) -> list[str]:
    hollow = agent_zipapp._hollow(entry)  # packed as an empty __init__: none of its code goes to the rig
    return [agent_zipapp.module_path(name).relative_to(ROOT).as_posix()
            for name in agent_zipapp.rig_modules(entry, hollow) if name not in hollow]


def test_every_glob_is_a_folder_or_a_file_as_vermin_is_given_it():
    """scripts/test passes "dir/**" as the folder and anything else as it is: both must exist."""
    assert rig_python()
    for glob in rig_python():
        if glob.endswith("/**"):
            assert (ROOT / glob.removesuffix("/**")).is_dir(), glob
        else:
            assert "*" not in glob and (ROOT / glob).is_file(), glob


@pytest.mark.parametrize("entry", [agent_zipapp.AGENT, stack.PARTS.reclaimer_entry])
def test_every_module_a_zipapp_packs_is_in_the_one_list(entry):
    missing = [f for f in zipapp_files(entry) if not covered(f, rig_python())]
    assert not missing, f"{entry}'s zipapp packs {missing}: add them to pyproject.toml's per-file-target-version"


def test_the_miner_adopter_run_by_the_rigs_python3_is_in_the_one_list():
    assert covered("miner2provider/fleet/adopt_on_rig.py", rig_python())


def test_a_file_outside_the_list_is_caught():
    assert not covered("miner2provider/fleet/pipeline.py", rig_python())
    assert not covered("miner2provider/agentx.py", ["miner2provider/agent/**"])
    assert covered("miner2provider/agent/decide.py", ["miner2provider/agent/**"])
