"""Every YAML file we ship or run loads with Ansible's own loader (the one ansible-playbook and
Molecule use): a task name with an unquoted ": " once made a whole role file unloadable, and
nothing ran it."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("ansible_collections", "molecule", ".config")
FILES = sorted(p for folder in FOLDERS for pattern in ("*.yml", "*.yaml")
               for p in (ROOT / folder).rglob(pattern))


def test_the_files_are_found() -> None:
    roles = {p.parts[p.parts.index("roles") + 1] for p in FILES if "roles" in p.parts}
    assert len(roles) >= 9 and any(p.name == "convert.yml" for p in FILES), roles
    assert any(".config" in p.parts for p in FILES) and any("molecule" in p.parts for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_loads_with_ansibles_loader(path: Path) -> None:
    DataLoader().load_from_file(str(path))
