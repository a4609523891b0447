"""The layer order of m2p's stage packages, read from the source (ast; nothing is imported).

A stage imports only stages below it: core < timeshare < agent < detect < market < fleet <
alerts < dashboard < cli.  The agent runs on rigs (python3 3.8+, from a zipapp): it imports nothing of the
controller, only core's errors and text files and the shared time-share code; what it imports is
exactly what the zipapp packs (fleet/agent_zipapp.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from miner2provider.fleet import agent_zipapp

PACKAGE = Path(__file__).resolve().parents[2] / "miner2provider"
LAYERS = ("core", "timeshare", "rigside", "agent", "detect", "market", "fleet", "alerts", "dashboard", "cli")
# What may run on a rig: the agent, the time-share code it shares with the controller, and two of
# core's modules.  timeshare/apply.py is the controller's (it reads the inventory).
RIG_SIDE = ("miner2provider", "miner2provider.agent", "miner2provider.rigside", "miner2provider.timeshare", "miner2provider.core",
            "miner2provider.core.errors", "miner2provider.core.textfiles")
CONTROLLER_ONLY = ("miner2provider.timeshare.apply",)
TOP_LEVEL = {"__init__.py", "__main__.py"}


def module_name(root: Path, path: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(root: Path, path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import of the package's own modules in ``path``."""
    name = module_name(root, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])])
            found += [(node.lineno, f"{base}.{a.name}" if (root.parent / base.replace(".", "/") / a.name).exists()
                       or (root.parent / f"{base.replace('.', '/')}/{a.name}.py").exists() else base)
                      for a in node.names]
    return [(line, mod) for line, mod in found if mod.split(".")[0] == root.name]


def stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def upward_imports(root: Path) -> list[str]:
    """'file:line: a imports b (higher stage)' for every import against the layer order."""
    wrong = []
    for path in sorted(root.rglob("*.py")):
        here = stage(module_name(root, path))
        if here is None:
            continue
        for line, target in imports_of(root, path):
            there = stage(target)
            if there is not None and LAYERS.index(there) > LAYERS.index(here):
                wrong.append(f"{path.relative_to(root.parent)}:{line}: {here} imports {target} ({there} is above it)")
    return wrong


def test_no_stage_imports_a_stage_above_it() -> None:
    assert upward_imports(PACKAGE) == []


def package_of(tmp_path: Path, files: dict[str, str]) -> Path:
    """A miner2provider tree of ``files`` (path -> text), every folder a package: the checkers' own tests."""
    root = tmp_path / "miner2provider"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for folder in (root, *(p for p in root.rglob("*") if p.is_dir())):
        (folder / "__init__.py").touch()
    return root


def test_the_checker_finds_an_upward_import(tmp_path: Path) -> None:
    root = package_of(tmp_path, {"cli/app.py": "X = 1\n", "core/errors.py": "import os\n\nfrom ..cli import app\n"})
    assert upward_imports(root) == ["miner2provider/core/errors.py:3: core imports miner2provider.cli.app "
                                    "(cli is above it)"]


def test_the_top_level_holds_only_the_package_and_its_entry_point() -> None:
    assert {p.name for p in PACKAGE.glob("*.py")} == TOP_LEVEL
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(LAYERS)


def test_the_agent_imports_nothing_of_the_controller() -> None:
    shipped = agent_zipapp.rig_modules()
    assert [m for m in shipped if m in CONTROLLER_ONLY or not m.startswith(RIG_SIDE)] == []
    for name in shipped:  # every module the agent reaches is listed, and reaches only listed ones
        path = agent_zipapp.module_path(name)
        for line, target in imports_of(PACKAGE, path):
            assert target in shipped, f"{path}:{line}: {target} is not packed into the agent"


@pytest.mark.parametrize("module", ["miner2provider.agent.service", "miner2provider.agent.gate"])
def test_every_agent_module_is_packed(module: str) -> None:
    assert module in agent_zipapp.rig_modules()
    assert {p.stem for p in (PACKAGE / "agent").glob("*.py")} - {"__init__", "__main__"} <= {
        m.rpartition(".")[2] for m in agent_zipapp.rig_modules()}


def names_akash(package: Path, allowed: set[Path]) -> list[str]:
    """Every line outside the marketplace seam that names Akash, in any case: the seam is market/akash/ (a path
    with an ``akash`` part) and ``allowed`` (the registry; a folder allows what it holds)."""
    return [f"{p.relative_to(package.parent)}:{n}" for p in sorted(package.rglob("*"))
            if p.is_file() and p.suffix in {".py", ".yml", ".j2", ".json"}
            and not any(p == a or a in p.parents for a in allowed)
            and "akash" not in p.relative_to(package).parts
            for n, line in enumerate(p.read_text().splitlines(), 1) if "akash" in line.lower()]


def test_only_the_marketplace_seam_names_akash():
    """Akash lives behind the seam (market/base.py): its package, and the registry that names it."""
    allowed = {PACKAGE / "market" / "__init__.py"}
    assert names_akash(PACKAGE, allowed) == []


def test_the_seam_check_finds_akash_in_any_case(tmp_path: Path) -> None:
    root = tmp_path / "miner2provider"
    (root / "market" / "akash").mkdir(parents=True)
    (root / "market" / "akash" / "labels.py").write_text("AKASH = 'akash.network'\n")  # behind the seam
    (root / "market" / "__init__.py").write_text("from .akash import AKASH\n")  # the registry
    (root / "detect").mkdir()
    (root / "detect" / "readiness.py").write_text("X = 1\n# Akash takes one model\nY = 'AKASH'\n")
    (root / "core.yml").write_text("a: akash\n")
    (root / "agent").mkdir()
    (root / "agent" / "decide.py").write_text("# Akash drops a cordoned node\n")  # a folder allowed for now
    assert names_akash(root, {root / "market" / "__init__.py", root / "agent"}) == [
        "miner2provider/core.yml:1", "miner2provider/detect/readiness.py:2", "miner2provider/detect/readiness.py:3"]


AGENT_FILE_LINES = 250  # issue 54: the on-rig program in small modules, none a god object again


def test_no_agent_file_is_over_250_lines() -> None:
    long = {p.name: n for p in sorted((PACKAGE / "agent").glob("*.py"))
            if (n := len(p.read_text().splitlines())) > AGENT_FILE_LINES}
    assert long == {}, f"agent/ files over {AGENT_FILE_LINES} lines: {long}"


def importers_of_the_agent(root: Path) -> list[str]:
    """'file:line: module' for every import of ``<root>.agent`` from outside ``<root>/agent``: agent/ is the
    on-rig program only; what the controller reads of a rig lives in rigside/."""
    return [f"{path.relative_to(root.parent)}:{line}: {target}"
            for path in sorted(root.rglob("*.py")) if "agent" != path.relative_to(root).parts[0]
            for line, target in imports_of(root, path) if target.split(".")[1:2] == ["agent"]]


def test_nothing_outside_the_agent_imports_it() -> None:
    assert importers_of_the_agent(PACKAGE) == []


def test_the_agent_import_check_finds_one(tmp_path: Path) -> None:
    root = package_of(tmp_path, {"agent/status.py": "X = 1\n",
                                 "dashboard/views.py": "from miner2provider.agent.status import X\n"})
    assert importers_of_the_agent(root) == ["miner2provider/dashboard/views.py:1: miner2provider.agent.status"]
