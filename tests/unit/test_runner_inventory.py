"""The runner's generated inventory carries secrets only vault-encrypted under the run's key."""

import yaml
from ansible.constants import DEFAULT_VAULT_ID_MATCH
from ansible.parsing.vault import VaultLib, VaultSecret

from miner2provider.core.inventory import Host, Secret
from miner2provider.fleet.runner import build_inventory


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!vault", lambda loader, node: ("vault", loader.construct_scalar(node)))


def test_secrets_are_vaulted_and_groups_kept():
    host = Host("rig01", "10.0.0.5", 2222, "user", "/k/id", Secret("pw-123"), Secret("sudo-456"),
                ("all", "farm"), {"m2p_data_dir": "/mnt/ssd"}, k3s_token=Secret("K10abc::server:Zq7xw"),
                agent_token=Secret("eyJhbGciOi.agent"))
    text = build_inventory([host], "one-time-key")
    assert "pw-123" not in text and "sudo-456" not in text and "Zq7xw" not in text and "eyJhbGciOi" not in text
    data = yaml.load(text, Loader=_Loader)
    hv = data["all"]["hosts"]["rig01"]
    assert (hv["ansible_host"], hv["ansible_port"], hv["ansible_user"]) == ("10.0.0.5", 2222, "user")
    assert hv["m2p_data_dir"] == "/mnt/ssd"
    assert data["all"]["children"] == {"m2p_control_nodes": {}, "farm": {"hosts": {"rig01": None}}}
    vault = VaultLib([(DEFAULT_VAULT_ID_MATCH, VaultSecret(b"one-time-key"))])
    kind, blob = hv["ansible_password"]
    assert kind == "vault" and vault.decrypt(blob.encode()) == b"pw-123"
    assert vault.decrypt(hv["ansible_become_password"][1].encode()) == b"sudo-456"
    # The k3s_agent role's variable, so an agent joins an external server with it.
    assert vault.decrypt(hv["k3s_agent_token"][1].encode()) == b"K10abc::server:Zq7xw"
    # The timeshare_agent role's variable (m2p schedule apply with m2p_agent_token_env).
    assert vault.decrypt(hv["timeshare_agent_api_token"][1].encode()) == b"eyJhbGciOi.agent"


def test_rigs_with_one_address_never_share_an_ssh_connection():
    """Ansible names its SSH master by address, port and user: two rigs at 192.168.1.2 behind different jump hosts
    would share the first one's connection (the second rig's play run on the first).  Each gets a path of its own,
    in the run's own folder (ANSIBLE_SSH_CONTROL_PATH_DIR)."""
    home = Host("home-rig", "192.168.1.2", 22, "user", "/k/id", None, None, ("all",), {})
    away = Host("away-rig", "192.168.1.2", 22, "user", "/k/id", None, None, ("all",), {})
    hosts = yaml.load(build_inventory([home, away], "one-time-key"), Loader=_Loader)["all"]["hosts"]
    paths = [hosts[name]["ansible_control_path"] for name in ("home-rig", "away-rig")]
    assert paths == ["%(directory)s/0", "%(directory)s/1"]


def test_a_control_node_is_in_the_group_the_gpu_plays_leave_out():
    vps = Host("vps", "203.0.113.10", 22, "root", "/k/id", None, None, ("all", "k3s_server"), {"m2p_control_node": True})
    rig = Host("rig01", "10.0.0.5", 22, "user", "/k/id", None, None, ("all", "k3s_agent"), {})
    children = yaml.load(build_inventory([vps, rig], "one-time-key"), Loader=_Loader)["all"]["children"]
    assert children["m2p_control_nodes"] == {"hosts": {"vps": None}}


def test_every_rig_names_its_python_so_no_task_discovers_one():
    """Never Ansible's interpreter discovery: under Mitogen's strategy a task delegated to another rig (an agent's
    join token, made on its server) got the discovered interpreter of the rig the task was for, and a python3.11
    agent ran /usr/bin/python3.11 on a python3.8 HiveOS server (Molecule's convert scenario under Mitogen).  Named:
    the rig's own /usr/bin/python3 (as the agent's unit runs), the one the inventory names, or the inventory's own
    ansible_python_interpreter as it is."""
    plain = Host("plain", "10.0.0.5", 22, "user", "/k/id", None, None, ("all",), {})
    named = Host("named", "10.0.0.6", 22, "user", "/k/id", None, None, ("all",),
                 {"m2p_python_interpreter": "/opt/python3.10/bin/python3"})
    own = Host("own", "10.0.0.7", 22, "user", "/k/id", None, None, ("all",), {"ansible_python_interpreter": "python3"})
    hosts = yaml.load(build_inventory([plain, named, own], "one-time-key"), Loader=_Loader)["all"]["hosts"]
    assert {name: hv["ansible_python_interpreter"] for name, hv in hosts.items()} == {
        "plain": "/usr/bin/python3", "named": "/opt/python3.10/bin/python3", "own": "python3"}
