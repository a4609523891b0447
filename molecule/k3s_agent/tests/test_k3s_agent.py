"""Role k3s_agent: joins its server with a token that is only in a 0600 env file."""

import os

import pytest
import testinfra
import yaml


def name(host):
    return host.backend.get_hostname()


def rig(hostname):
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    return testinfra.get_host(f"ansible://{hostname}?ansible_inventory={inventory}")


def server_address():
    return rig("ka-server").ansible.get_variables()["ansible_host"]


def test_agent_runs_and_points_at_its_server(host):
    if name(host) == "ka-server":
        pytest.skip("the server the agents join")
    svc = host.service("k3s-agent")
    assert svc.is_enabled and svc.is_running
    with host.sudo():
        config = yaml.safe_load(host.file("/etc/rancher/k3s/config.yaml").content_string)
    assert config["server"] == f"https://{server_address()}:6443"
    assert config["node-name"] == name(host)


def test_token_only_in_the_root_env_file_never_in_argv(host):
    if name(host) == "ka-server":
        pytest.skip("the server the agents join")
    if name(host) == "ka-agent":
        with rig("ka-server").sudo():
            token = rig("ka-server").file("/var/lib/rancher/k3s/server/token").content_string.strip()
    else:
        token = "K10standin-external-token::server:molecule"
    with host.sudo():
        env = host.file("/etc/systemd/system/k3s-agent.service.env")
        assert env.mode == 0o600 and env.user == "root"
        assert env.content_string == f"K3S_TOKEN={token}\n"
        pid = host.check_output("systemctl show -p MainPID --value k3s-agent")
        assert token not in host.file(f"/proc/{pid}/cmdline").content_string
        assert token not in host.file("/etc/rancher/k3s/config.yaml").content_string
