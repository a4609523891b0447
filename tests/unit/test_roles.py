"""Every role: prefixed variables, defaults/main.yml and meta/argument_specs.yml in sync."""

import pytest
import yaml

from miner2provider.core import collection

ROLES = sorted(p for p in (collection.root() / "roles").iterdir() if p.is_dir())


def load(path):
    return yaml.safe_load(path.read_text()) or {}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_defaults_and_argument_specs_agree(role):
    defaults = load(role / "defaults" / "main.yml")
    specs = load(role / "meta" / "argument_specs.yml")["argument_specs"]
    options = specs["main"]["options"]
    assert set(defaults) == set(options), "defaults/main.yml and argument_specs main differ"
    for name, spec in options.items():
        assert spec.get("default") == defaults[name], f"{name}: spec default {spec.get('default')!r}"
        assert spec.get("description"), f"{name} has no description"
        assert spec.get("type"), f"{name} has no type"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_variables_are_prefixed_with_the_role_name(role):
    for name in load(role / "defaults" / "main.yml"):
        assert name.startswith(role.name + "_"), name


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_tasks_file_has_an_entry_point(role):
    specs = load(role / "meta" / "argument_specs.yml")["argument_specs"]
    tasks = {p.stem for p in (role / "tasks").glob("*.yml")}
    # Files only included from inside the role (vars.yml, bundle.yml, cluster.yml, agent.yml, join_token.yml,
    # joined.yml, forget_identity.yml, upgrade_*.yml, reclaimer*.yml, server_side.yml, k3s's pods_on.yml and
    # pods_off.yml, the tunnel's up.yml and down.yml) are not entry points.
    internal = {t for t in tasks if t in {"vars", "bundle", "repository", "cluster", "agent", "join_token", "joined",
                                          "forget_identity", "up", "down", "server_side", "pods_on", "pods_off"}
                or t.startswith(("upgrade_", "reclaimer"))}
    assert tasks - internal == set(specs), f"entry points {sorted(specs)} vs tasks {sorted(tasks - internal)}"


def test_no_role_runs_a_distribution_upgrade():
    for path in (collection.root() / "roles").rglob("*.yml"):
        text = path.read_text()
        for banned in ("upgrade: dist", "dist-upgrade", "upgrade: full", "upgrade: yes", "apt-get upgrade"):
            assert banned not in text, f"{path}: {banned}"
