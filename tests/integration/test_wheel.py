"""The product as users get it: the wheel, installed into a fresh virtualenv (not editable).

The wheel is built from this checkout and installed with the pinned dependencies; everything
below runs the installed ``m2p`` and ``ansible-*`` of that virtualenv, never this checkout.
The sandbox rig is booted by the harness here (the test environment), not by the product.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from miner2provider import __version__

from .quick_start import walk_the_page

ROOT = Path(__file__).resolve().parents[2]


def sh(*argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
       timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"{proc.args}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """The wheel, and a fresh virtualenv with it (and its pinned dependencies) installed: once a run, the first
    worker to ask builds it under a lock and the others use it (each worker built its own: ~13 s thrice)."""
    run_dir = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        run_dir = run_dir.parent  # this run's, shared by its workers (each has a folder of its own below it)
    tmp = run_dir / "wheel"
    with open(run_dir / "wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (tmp / "built").exists():
            shutil.rmtree(tmp, ignore_errors=True)  # a build that failed half-way
            tmp.mkdir()
            _build_and_install(tmp)
            (tmp / "built").touch()
    (wheel,) = (tmp / "dist").glob("miner2provider-*.whl")
    return {"wheel": wheel, "venv": tmp / "venv", "tmp": tmp}


def _build_and_install(tmp: Path) -> None:
    # Built from a copy of what the build reads: setuptools writes build/ and *.egg-info beside the sources, and
    # the suite's other worker (or a session editing the checkout) builds from the same checkout at the same time.
    src = tmp / "src"
    for name in ("miner2provider", "ansible_collections"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    ok(sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", src))
    (wheel,) = (tmp / "dist").glob("miner2provider-*.whl")
    venv = tmp / "venv"
    ok(sh(sys.executable, "-m", "venv", venv))
    ok(sh(venv / "bin/pip", "install", "-q", "-c", ROOT / "requirements/constraints.txt", wheel))


def test_the_wheel_carries_the_collection_and_no_sandbox(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    for needed in ("ansible_collections/m2p/rigs/galaxy.yml", "ansible_collections/m2p/rigs/meta/runtime.yml",
                   "ansible_collections/m2p/rigs/playbooks/convert.yml",
                   "ansible_collections/m2p/rigs/roles/k3s/defaults/main.yml",
                   "ansible_collections/m2p/rigs/plugins/action/m2p_facts.py"):
        assert needed in names
    assert not [n for n in names if "sandbox" in n or "standin" in n], "sandbox code in the product wheel"
    galaxy = yaml.safe_load((ROOT / "ansible_collections/m2p/rigs/galaxy.yml").read_text())
    assert galaxy["version"] == __version__


def test_installed_m2p_runs_without_the_checkout(installed):
    venv, tmp = installed["venv"], installed["tmp"]
    # From another folder, with no PYTHONPATH: only the installed files can answer.
    env = {"PYTHONPATH": "", "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    assert "convert" in ok(sh(venv / "bin/m2p", "--help", cwd=tmp, env=env))
    where = ok(sh(venv / "bin/python", "-c", "from miner2provider.core import collection; print(collection.root())",
                  cwd=tmp, env=env)).strip()
    assert where.startswith(str(venv)), where
    demo = sh(venv / "bin/m2p", "demo", cwd=tmp, env=env)
    assert demo.returncode == 2 and "needs the sandbox harness" in demo.stderr, demo.stderr
    # The dashboard's web libraries and templates came with the wheel (they load before this refusal).
    (tmp / "one.yml").write_text("all:\n  hosts:\n    rig01: {ansible_host: 192.0.2.1}\n")
    dash = sh(venv / "bin/m2p", "dashboard", "-i", tmp / "one.yml", "--bind", "0.0.0.0", cwd=tmp, env=env)
    assert dash.returncode == 2 and "serves beyond this machine: give --tls-cert and --tls-key" in dash.stderr, dash.stderr
    ok(sh(venv / "bin/python", "-c", "from miner2provider.dashboard.app import TEMPLATES; "
          "TEMPLATES.get_template('fleet.html.j2')", cwd=tmp, env=env))
    # Users who drive rigs with their own playbooks: the collection as Ansible sees it.
    (tmp / "hosts.yml").write_text("all:\n  hosts:\n    rig01: {ansible_host: 192.0.2.1}\n")
    for playbook in ("convert", "revert", "verify", "schedule", "provider"):
        ok(sh(venv / "bin/ansible-playbook", "-i", tmp / "hosts.yml", f"m2p.rigs.{playbook}", "--syntax-check",
              cwd=tmp, env=env))


def test_ansible_galaxy_builds_the_collection_and_a_playbook_uses_it(installed):
    venv, tmp = installed["venv"], installed["tmp"] / "galaxy"
    tmp.mkdir()
    env = {"PYTHONPATH": "", "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    ok(sh(venv / "bin/ansible-galaxy", "collection", "build", ROOT / "ansible_collections/m2p/rigs", cwd=tmp,
          env=env))
    (tarball,) = tmp.glob("m2p-rigs-*.tar.gz")
    assert tarball.name == f"m2p-rigs-{__version__}.tar.gz"
    with tarfile.open(tarball) as tar:
        members = tar.getnames()
    assert "roles/preflight/tasks/main.yml" in members and not [m for m in members if "__pycache__" in m]
    ok(sh(venv / "bin/ansible-galaxy", "collection", "install", "-p", tmp / "collections", tarball, cwd=tmp,
          env=env))
    (tmp / "site.yml").write_text(
        "- name: My own play with m2p's roles\n  hosts: all\n  gather_facts: false\n  roles:\n"
        "    - m2p.rigs.preflight\n    - m2p.rigs.k3s\n  tasks:\n    - name: Facts\n"
        "      m2p.rigs.m2p_facts: {}\n")
    (tmp / "hosts.yml").write_text("all:\n  hosts:\n    rig01: {ansible_host: 192.0.2.1}\n")
    ok(sh(venv / "bin/ansible-playbook", "-i", "hosts.yml", "site.yml", "--syntax-check", cwd=tmp,
          env={**env, "ANSIBLE_COLLECTIONS_PATH": str(tmp / "collections")}))


def test_quick_start_walked_with_the_installed_m2p_on_a_4gb_hiveos_rig(installed, boot_rigs):
    """docs/quick-start.md's commands in order, each exiting as the page says (tests/integration/quick_start.py)."""
    walk_the_page(boot_rigs, installed["tmp"] / "walk", installed["venv"])
