"""Inventory loading: Ansible YAML, inherited vars, and file:line errors for bad input."""

import dataclasses
from pathlib import Path

import pytest

from miner2provider import market
from miner2provider.core import inventory
from miner2provider.core.errors import InventoryError, VaultError
from miner2provider.core.inventory import Secret

HERE = Path(__file__).parent / "inventories"


def refused(path) -> InventoryError:
    """The error loading the inventory at ``path`` raises (the test fails if none)."""
    with pytest.raises(InventoryError) as err:
        inventory.load(path, rig_check=market.rig_settings_problems)  # the marketplaces' rules, as the CLI loads it
    return err.value


def test_good_inventory_resolves_group_and_host_vars():
    inv = inventory.load(HERE / "good.yml", environ={"RIG_PASS": "s3cret"})
    hosts = {h.name: h for h in inv.hosts}
    assert set(hosts) == {"rig01", "rig02", "gpu-box.example.org"}
    r1, r2, box = hosts["rig01"], hosts["rig02"], hosts["gpu-box.example.org"]
    assert (r1.address, r1.port, r1.user) == ("10.0.0.11", 22, "user")
    assert r1.key_file == str((HERE / "keys/farm").resolve())
    assert r1.var("m2p_min_free_disk_gb") == 40
    assert (r2.port, r2.var("m2p_min_free_disk_gb")) == (2222, 20)  # host beats group
    assert box.address == "gpu-box.example.org"  # a DNS name needs no ansible_host
    assert box.password.reveal() == "s3cret"
    assert "s3cret" not in repr(box) and "s3cret" not in str(box.password)
    assert r1.groups == ("all", "hive_farm")
    assert [h.name for h in inv.select("plain")] == ["gpu-box.example.org"]
    with pytest.raises(InventoryError, match="names no host or group: nope"):
        inv.select("nope")


@pytest.mark.parametrize(
    "case, line, message",
    [
        ("syntax", 5, "YAML syntax error"),
        ("no_address", 3, "host 'rig01' has no address: add ansible_host"),
        ("duplicate_key", 7, "duplicate hosts of group 'all' key 'rig01' (first at line 3)"),
        ("duplicate_address", 5, "same address 10.0.0.1:22 as 'rig01'"),
        ("unknown_var", 3, "unknown m2p setting 'm2p_min_free_disk'; did you mean m2p_min_free_disk_gb?"),
        ("wrong_type", 5, "ansible_port must be a whole number, found text 'twenty-two'"),
        ("unknown_role_var", 5, "unknown variable 'k3s_verison' of role m2p.rigs.k3s; did you mean k3s_version?"),
        ("negative", 5, "m2p_time_slicing_replicas must not be negative, found -2"),
        ("stray_key", 2, "group 'all' has 'rig01'; a group holds only hosts, vars and children"),
        ("slicing_marketplace", 5, "rig01: m2p_time_slicing_replicas 4 on a marketplace rig: Akash would sell"),
        ("control_node_agent", 7, "vps has m2p_control_node but is in k3s_agent: a control node is its farm's k3s "
                                  "server (group k3s_server)"),
    ],
)
def test_bad_inventories_name_file_and_line(case, line, message):
    path = HERE / f"{case}.yml"
    err = refused(path)
    assert err.where == f"{path}:{line}"
    assert message in err.message


def test_missing_file_and_unset_password_env(tmp_path):
    with pytest.raises(InventoryError, match="not found"):
        inventory.load(tmp_path / "nope.yml")
    with pytest.raises(InventoryError, match=r"names \$RIG_PASS, which is not set") as err:
        inventory.load(HERE / "good.yml", environ={})
    assert err.value.where == f"{HERE / 'good.yml'}:19"


@pytest.mark.parametrize(("setting", "attribute", "variable"), [
    ("m2p_k3s_token_env", "k3s_token", "k3s_agent_token"),
    ("m2p_agent_token_env", "agent_token", "timeshare_agent_api_token"),
])
def test_tokens_from_the_environment_stay_secret(tmp_path, setting, attribute, variable):
    inv_file = tmp_path / "rigs.yml"
    inv_file.write_text("all:\n  vars:\n    m2p_k3s_server_url: https://10.0.0.9:6443\n"
                        f"    {setting}: FARM_TOKEN\n  hosts:\n    rig01:\n      ansible_host: 10.0.0.1\n")
    host = inventory.load(inv_file, environ={"FARM_TOKEN": "K10abc::server:Zq7xw"}).hosts[0]
    assert getattr(host, attribute).reveal() == "K10abc::server:Zq7xw"
    assert host.secrets() == {variable: Secret("K10abc::server:Zq7xw")}  # the runner vaults it as that variable
    assert "Zq7xw" not in repr(host) and variable not in host.vars
    with pytest.raises(InventoryError, match=r"names \$FARM_TOKEN, which is not set") as err:
        inventory.load(inv_file, environ={})
    assert err.value.where == f"{inv_file}:4"


def test_vault_encrypted_password(tmp_path):
    from ansible.constants import DEFAULT_VAULT_ID_MATCH
    from ansible.parsing.vault import VaultLib, VaultSecret

    lib = VaultLib([(DEFAULT_VAULT_ID_MATCH, VaultSecret(b"vaultpw"))])
    blob = lib.encrypt("rig-password").decode()
    indented = "\n".join("        " + line for line in blob.splitlines())
    inv_file = tmp_path / "rigs.yml"
    inv_file.write_text(f"all:\n  hosts:\n    rig01:\n      ansible_host: 10.0.0.1\n"
                        f"      ansible_password: !vault |\n{indented}\n")
    pw_file = tmp_path / "pw"
    pw_file.write_text("vaultpw\n")
    host = inventory.load(inv_file, vault_password_file=str(pw_file)).hosts[0]
    assert host.password.reveal() == "rig-password"
    assert "ansible_password" not in host.vars
    with pytest.raises(VaultError, match="pass --vault-password-file"):
        inventory.load(inv_file)
    pw_file.write_text("wrong\n")
    with pytest.raises(VaultError, match="wrong vault password"):
        inventory.load(inv_file, vault_password_file=str(pw_file))


def test_time_slicing_is_for_the_owners_own_rigs_or_an_owner_who_takes_the_risk(tmp_path):
    text = (HERE / "slicing_marketplace.yml").read_text()
    (tmp_path / "own.yml").write_text(text.replace("      m2p_time_slicing_replicas: 4\n    rig02",
                                                   "      m2p_time_slicing_replicas: 4\n"
                                                   "      m2p_time_slicing_on_marketplace: true\n    rig02"))
    hosts = {h.name: h for h in inventory.load(tmp_path / "own.yml", rig_check=market.rig_settings_problems).hosts}
    assert hosts["rig01"].var("m2p_time_slicing_replicas") == hosts["rig02"].var("m2p_time_slicing_replicas") == 4


def test_the_time_slice_rule_is_the_marketplaces_and_says_which(monkeypatch):
    """The refusal is Akash's rule behind the seam (its slices_sold_whole), not the loader's: the loader alone knows
    no marketplace, and a marketplace that sells slices as slices takes them."""
    path = HERE / "slicing_marketplace.yml"
    assert [h.var("m2p_time_slicing_replicas") for h in inventory.load(path).hosts] == [4, 4]
    assert "Akash would sell each slice as a whole GPU" in refused(path).message
    monkeypatch.setitem(market.MARKETPLACES, market.DEFAULT,
                        dataclasses.replace(market.marketplace(), slices_sold_whole=""))
    assert len(inventory.load(path, rig_check=market.rig_settings_problems).hosts) == 2


def test_jump_hosts_by_inventory_name_by_address_or_by_proxyjump(tmp_path):
    inv = tmp_path / "rigs.yml"
    key = tmp_path / "gate"
    key.write_text("a stand-in key: only its existence is checked\n")
    inv.write_text("all:\n  hosts:\n"
                   "    gate: {ansible_host: 10.0.0.1, ansible_user: ops, ansible_port: 2222,"
                   f" ansible_ssh_private_key_file: {key}}}\n"
                   "    rig01: {ansible_host: 192.168.1.10, m2p_jump_host: gate}\n"
                   "    rig02: {ansible_host: 192.168.1.10, ansible_user: user, m2p_jump_host: 'admin@site2.example:2200'}\n"
                   "    rig03: {ansible_host: 192.168.1.11, ansible_ssh_common_args: '-o ProxyJump=gate -o Compression=yes'}\n")
    hosts = {h.name: h for h in inventory.load(inv).hosts}  # one private address at two sites: two rigs
    assert hosts["rig01"].jump == inventory.Jump("gate", "10.0.0.1", 2222, "ops", str(key))
    assert hosts["rig02"].jump == inventory.Jump("admin@site2.example:2200", "site2.example", 2200, "admin", None)
    assert hosts["rig03"].jump == hosts["rig01"].jump and hosts["gate"].jump is None


@pytest.mark.parametrize("rig01, message", [
    ("m2p_jump_host: rig01", "rig01: m2p_jump_host names the rig itself"),
    ("m2p_jump_host: 'a@b@c'", "give an inventory host's name or [USER@]HOST[:PORT] (one hop)"),
    ("m2p_jump_host: 'gw:70000'", "give an inventory host's name or [USER@]HOST[:PORT] (one hop)"),
    ("m2p_jump_host: gw1, ansible_ssh_common_args: '-o ProxyJump=gw2'", "disagree: give one"),
])
def test_bad_jump_hosts_name_the_line(tmp_path, rig01, message):
    inv = tmp_path / "rigs.yml"
    inv.write_text(f"all:\n  hosts:\n    rig01: {{ansible_host: 10.0.0.5, {rig01}}}\n")
    err = refused(inv)
    assert message in err.message and err.where == f"{inv}:3"


@pytest.mark.parametrize("value, message", [
    ("false", "m2p_marketplace names the marketplace now: akash (was true) or none (was false)"),
    ("true", "m2p_marketplace names the marketplace now: akash (was true) or none (was false)"),
    ("akahs", "m2p_marketplace must be one of akash, none, found text 'akahs'"),
])
def test_the_marketplace_is_named_and_a_bool_of_before_says_what_to_write(tmp_path, value, message):
    path = tmp_path / "rigs.yml"
    path.write_text(f"all:\n  hosts:\n    rig01:\n      ansible_host: 10.0.0.1\n      m2p_marketplace: {value}\n")
    err = refused(path)
    assert err.where == f"{path}:5" and message in err.message


def test_the_roles_marketplace_choices_are_the_registry_s():
    """The setting's choices come from the role's argument specs (one place for the default); the
    registry (market/__init__.py) and they must name the same marketplaces."""
    from miner2provider.core import collection, settings
    from miner2provider.market import DEFAULT, MARKETPLACES

    option = collection.role_options()["timeshare_agent_marketplace"]
    assert set(option["choices"]) == {*MARKETPLACES, settings.NO_MARKETPLACE} and option["default"] == DEFAULT
