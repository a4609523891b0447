"""Issue 39, a miner's first inventory: every mistake said once in one `inventory check` (file:line each, then a
count), Ansible's own variable names checked against Ansible's list, groups that look like pooling but are not
m2p's refused with a sentence, a key file that is not there named at its line, and one way to find the inventory
for every command (-i, then M2P_INVENTORY, then ./rigs.yml)."""

from __future__ import annotations

import json

import pytest
from ansible import constants
from ansible.plugins.loader import become_loader, connection_loader, fragment_loader, shell_loader
from ansible.utils.plugin_docs import get_docstring

from miner2provider.cli import main
from miner2provider.core import inventory
from miner2provider.core.ansible_names import CONNECTION_VARIABLES, is_ansible_variable
from miner2provider.core.errors import InventoryError, InventoryProblems

MANY_MISTAKES = """all:
  hosts:
    rig01:
      ansible_host: 10.0.0.1
      ansible_ssh_private_key_fle: ~/.ssh/id_ed25519
    rig02:
      ansible_host: 10.0.0.2
      ansible_port: many
      m2p_min_free_disk: 5
    rig03:
      ansible_host: "10.0.0.3; reboot"
"""


def test_the_list_of_ansible_variables_is_ansibles_own():
    """The plugins' documented variables and the magic variable mapping, read from the Ansible m2p pins."""
    names = {name for spellings in constants.MAGIC_VARIABLE_MAPPING.values() for name in spellings}
    for loader, plugins in ((connection_loader, ("ssh", "paramiko_ssh", "local")), (become_loader, ("sudo", "su")),
                            (shell_loader, ("sh",))):
        for plugin in plugins:
            doc = get_docstring(loader.find_plugin(plugin), fragment_loader=fragment_loader)[0] or {}
            names |= {var["name"] for option in doc.get("options", {}).values() for var in option.get("vars") or []}
    assert CONNECTION_VARIABLES == {name for name in names if name.startswith("ansible_")}
    assert is_ansible_variable("ansible_python_interpreter") and is_ansible_variable("ansible_perl_interpreter")
    assert not is_ansible_variable("ansible_ssh_private_key_fle")


def test_inventory_check_says_every_mistake_with_its_line_then_how_many(tmp_path, capsys):
    path = tmp_path / "rigs.yml"
    path.write_text(MANY_MISTAKES)
    assert main(["inventory", "check", str(path)]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"m2p: error: {path}:5: unknown Ansible variable 'ansible_ssh_private_key_fle'; did you mean "
        "ansible_ssh_private_key_file?",
        f"m2p: error: {path}:8: ansible_port must be a whole number, found text 'many'",
        f"m2p: error: {path}:9: unknown m2p setting 'm2p_min_free_disk'; did you mean m2p_min_free_disk_gb?",
        f"m2p: error: {path}:11: ansible_host '10.0.0.3; reboot' is not an IP address or a DNS name (letters, digits, "
        "hyphens and dots)",
        f"m2p: error: 4 mistakes in {path}, each above"]
    assert main(["inventory", "check", "--json", str(path)]) == 3
    said = json.loads(capsys.readouterr().out)
    assert said["error"] == f"4 mistakes in {path}" and said["exit_code"] == 3
    assert [(p["file"], p["line"]) for p in said["problems"]] == [(str(path), n) for n in (5, 8, 9, 11)]


def test_another_command_says_the_first_mistake_and_how_many_more(tmp_path):
    path = tmp_path / "rigs.yml"
    path.write_text(MANY_MISTAKES)
    with pytest.raises(InventoryProblems) as found:
        inventory.load(path)
    assert str(found.value) == (f"{path}:5: unknown Ansible variable 'ansible_ssh_private_key_fle'; did you mean "
                                "ansible_ssh_private_key_file? (and 3 more: `m2p inventory check` lists them all)")


@pytest.mark.parametrize(("group", "said"), [
    ("server", "rename it to k3s_server"), ("agent", "rename it to k3s_agent"),
    ("k3s_servers", "rename it to k3s_server"), ("k3s_agents", "rename it to k3s_agent"),
    ("k3s_cluster", "rename it to k3s_server and k3s_agent"),
])
def test_a_group_that_looks_like_pooling_is_refused_with_a_sentence(tmp_path, group, said):
    path = tmp_path / "rigs.yml"
    path.write_text(f"all:\n  children:\n    {group}:\n      hosts:\n        rig01: {{ansible_host: 10.0.0.1}}\n")
    with pytest.raises(InventoryError, match=f"group '{group}' looks like a pooling group.*{said}") as found:
        inventory.load(path)
    assert found.value.where == f"{path}:4"


def test_groups_inside_the_pooling_groups_and_unrelated_names_pass(tmp_path):
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  children:\n    k3s_agent:\n      children:\n        k3s_agent_garage:\n          hosts:\n"
                    "            rig01: {ansible_host: 10.0.0.1}\n    serverroom:\n      hosts:\n"
                    "        rig02: {ansible_host: 10.0.0.2}\n")
    hosts = {h.name: h.groups for h in inventory.load(path).hosts}
    assert "k3s_agent" in hosts["rig01"] and hosts["rig02"] == ("all", "serverroom")


def test_a_key_file_that_is_not_there_is_named_at_its_line(tmp_path):
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  hosts:\n    rig01:\n      ansible_host: 10.0.0.1\n"
                    "      ansible_ssh_private_key_file: keys/rig01\n")
    with pytest.raises(InventoryError, match="keys/rig01' does not exist on this machine") as found:
        inventory.load(path)
    assert found.value.where == f"{path}:5"
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "rig01").write_text("stand-in key\n")
    assert inventory.load(path).hosts[0].key_file == str(tmp_path / "keys" / "rig01")


def test_every_command_finds_the_inventory_the_same_way(tmp_path, capsys, monkeypatch):
    """-i, then M2P_INVENTORY, then ./rigs.yml (what `m2p init` writes); `inventory check FILE` too."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("M2P_INVENTORY", raising=False)
    for name, address in (("rigs.yml", "10.0.0.1"), ("env.yml", "10.0.0.2"), ("given.yml", "10.0.0.3")):
        (tmp_path / name).write_text(f"all:\n  hosts:\n    rig-{name[:-4]}: {{ansible_host: {address}}}\n")

    def checked(*argv: str) -> str:
        assert main(["inventory", "check", "--json", *argv]) == 0
        return json.loads(capsys.readouterr().out)["hosts"][0]["name"]

    def varied(*argv: str) -> str:
        assert main(["inventory", "vars", *argv]) == 0
        return capsys.readouterr().out

    assert checked() == "rig-rigs"
    monkeypatch.setenv("M2P_INVENTORY", "env.yml")
    assert checked() == "rig-env" and "rig-env" in varied()
    assert checked("given.yml") == "rig-given"
    monkeypatch.delenv("M2P_INVENTORY")
    (tmp_path / "rigs.yml").unlink()
    assert main(["status"]) == 2
    assert "no inventory: pass -i FILE, set M2P_INVENTORY, or run m2p where rigs.yml is" in capsys.readouterr().err


def test_a_mistake_in_all_vars_is_said_once_not_once_per_rig(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("RIG_PW", raising=False)
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  vars:\n    m2p_ssh_password_env: RIG_PW\n  hosts:\n"
                    + "".join(f"    rig0{i}: {{ansible_host: 10.0.0.{i}}}\n" for i in range(1, 6))
                    + "    rig09: {ansible_host: 10.0.0.9, ansible_port: many}\n")
    with pytest.raises(InventoryProblems) as raised:
        inventory.load(path)
    assert sorted(p.where for p in raised.value.problems) == [f"{path}:10", f"{path}:3"]
    assert sum("names $RIG_PW, which is not set" in p.message for p in raised.value.problems) == 1
    assert main(["inventory", "check", str(path)]) == 3
    assert capsys.readouterr().err.count("$RIG_PW") == 1


def test_one_rig_under_two_names_is_a_mistake(tmp_path):
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  hosts:\n    rig01: {ansible_host: 10.0.0.1}\n    spare: {ansible_host: 10.0.0.1, ansible_port: 22}\n"
                    "    other-port: {ansible_host: 10.0.0.1, ansible_port: 2222}\n")
    with pytest.raises(InventoryError, match=r"rigs.yml:4: host 'spare' has the same address 10.0.0.1:22 as 'rig01'"):
        inventory.load(path)
