"""The settings contract: one declaration per setting, README shows it, every name a user is told
to set exists, and each pinned constant is written in one place."""

import re
from pathlib import Path

import pytest

from miner2provider.core import collection, settings
from miner2provider.dashboard.metrics import metric_names

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "miner2provider", collection.root()]
README = ROOT / "README.md"
SETTINGS_PAGE = ROOT / "docs" / "commands" / "inventory-check.md"  # the settings table
DOCS = [README, *sorted((ROOT / "docs").rglob("*.md"))]

# Names with the m2p_ prefix that are not inventory settings: plugins, and the variables the
# collection's playbooks read (the offline bundle's folder, rolling batches for own runs), and the group
# m2p's runner puts control nodes in (runner.CONTROL_NODES).
NOT_SETTINGS = {"m2p_facts", "m2p_fingerprint_state", "m2p_bundle", "m2p_agent_pyz", "m2p_bundle_dir",
                "m2p_bundle_vars", "m2p_batch", "m2p_max_fail_percentage", "m2p_sandbox", "m2p_control_nodes"}
GROUPS = {"k3s_server", "k3s_agent"}  # inventory groups, not variables


def product_files(*suffixes):
    for top in PRODUCT:
        for path in sorted(top.rglob("*")):
            if path.is_file() and path.suffix in suffixes and "__pycache__" not in path.parts:
                yield path


def test_the_docs_show_the_contract():
    text = SETTINGS_PAGE.read_text()
    table = text.split("<!-- settings:begin -->\n", 1)[1].split("<!-- settings:end -->", 1)[0]
    assert table == settings.markdown_table(settings.contract()), "the settings table is stale: run scripts/settings-table"


def test_a_fed_setting_takes_its_default_from_the_role():
    contract = settings.contract()
    assert contract["m2p_min_free_disk_gb"].default == collection.role_defaults("preflight")["preflight_min_free_disk_gb"]
    assert contract["m2p_data_dir"].default == collection.role_defaults("k3s")["k3s_data_dir"]
    for setting in contract.values():
        for target in setting.feeds:
            assert target in collection.role_options(), f"{setting.name} feeds {target}, which no role declares"


def test_every_m2p_name_users_are_told_about_is_a_setting():
    """A message or README that names a setting must name one that works (issue: the driver advice
    once named a variable the mapping layer overrode)."""
    contract = settings.contract()
    texts = {**{p: p.read_text() for p in DOCS}, **{p: p.read_text() for p in product_files(".py", ".yml", ".j2", ".md")}}
    for path, text in texts.items():
        for name in set(re.findall(r"\bm2p_[a-z0-9_]+", text)):
            assert name in contract or name in NOT_SETTINGS or name in metric_names(), \
                f"{path}: {name} is no m2p setting"


def test_every_role_variable_a_message_names_exists():
    options = collection.role_options()
    prefixes = tuple(f"{role}_" for role in collection.role_names())
    for path in product_files(".yml"):
        for message in re.findall(r"fail_msg: >-\n((?:\s{6,}.*\n)+)", path.read_text()):
            prose = re.sub(r"{{.*?}}", "", message, flags=re.S)  # what the user reads, not the template
            for name in re.findall(r"\b[a-z][a-z0-9_]+\b", prose):
                if name.startswith(prefixes) and name not in GROUPS:
                    assert name in options, f"{path}: its message names {name}, which no role declares"


def pins():
    k3s = collection.role_defaults("k3s")
    preflight = collection.role_defaults("preflight")
    return {
        "k3s version": str(k3s["k3s_version"]),
        "k3s data dir": str(k3s["k3s_data_dir"]),
        "kubelet args": str(k3s["k3s_kubelet_args"][0]),
        "minimum driver": str(collection.role_defaults("nvidia_driver")["nvidia_driver_min_version"]),
        "RAM floor": str(preflight["preflight_min_ram_mb"]),
        "disk floor": str(preflight["preflight_min_free_disk_gb"]),
    }


@pytest.mark.parametrize("what", sorted(pins()))
def test_each_constant_is_written_once(what):
    """Each pinned value is in one defaults/main.yml; the role's argument_specs.yml repeats it as its
    documented default (test_roles.py keeps the two equal) and nothing else in the product does."""
    value = pins()[what]
    pattern = re.compile(rf"(?<![\w.]){re.escape(value)}(?![\w])")
    places = [f"{p.relative_to(p.parents[3] if 'roles' in p.parts else ROOT)}"
              for p in product_files(".py", ".yml", ".j2", ".cfg", ".json", ".toml")
              if p.name != "argument_specs.yml" and pattern.search(p.read_text())]
    assert len(places) == 1 and places[0].endswith("defaults/main.yml"), f"{what} {value!r} in {places}"


def test_the_docs_quote_the_pins_they_show():
    """The docs' sample output shows a k3s version: it is the pinned one."""
    shown = set(re.findall(r"k3s (v\d+\.\d+\.\d+\+k3s\d+)", "".join(p.read_text() for p in DOCS)))
    assert shown == {pins()["k3s version"]}
