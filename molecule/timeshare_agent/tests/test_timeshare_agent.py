"""Role timeshare_agent: the agent runs under systemd with its secrets root-only; the cluster
objects land on the rig's k3s server; with no API to reach it keeps mining."""

import json
import os

import pytest
import testinfra
import yaml

from m2p_sandbox import flavours, pythons

TOKEN = "standin-agent-token-molecule"
MANIFESTS = "/var/lib/rancher/k3s/server/manifests"


def name(host):
    return host.backend.get_hostname()


def rig(hostname):
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    return testinfra.get_host(f"ansible://{hostname}?ansible_inventory={inventory}")


def test_agent_runs_with_its_config_and_a_root_only_token(host):
    svc = host.service("m2p-agent")
    assert svc.is_enabled and svc.is_running
    server = rig("ts-server").ansible.get_variables()["ansible_host"]
    with host.sudo():
        config = json.loads(host.file("/etc/m2p/agent.json").content_string)
        token = host.file("/etc/m2p/agent-token")
        assert token.mode == 0o600 and token.user == "root" and token.content_string == TOKEN + "\n"
        pid = host.check_output("systemctl show -p MainPID --value m2p-agent")
        assert TOKEN not in host.file(f"/proc/{pid}/cmdline").content_string
        assert TOKEN not in host.check_output("journalctl -u m2p-agent --no-pager")
        assert host.file("/etc/m2p/schedule.yml").content_string.startswith("# Idle mining")
    assert config["node"] == name(host) and config["token_file"] == "/etc/m2p/agent-token"
    expected = {"ts-server": ("https://127.0.0.1:6443", "/var/lib/rancher/k3s/server/tls/server-ca.crt", 2),
                "ts-agent": (f"https://{server}:6443", "/var/lib/rancher/k3s/agent/server-ca.crt", 1),
                "ts-ext": (f"https://{server}:6443", "/var/lib/rancher/k3s/agent/server-ca.crt", 1)}[name(host)]
    assert (config["api_server"], config["ca_file"], config["gpu_count"]) == expected
    assert host.file("/opt/m2p/zoneinfo/Europe/Berlin").exists


def test_cluster_objects_go_to_the_rigs_own_server_only(host):
    if name(host) != "ts-server":
        assert not host.file(MANIFESTS).exists
        return
    with host.sudo():
        files = sorted(host.file(MANIFESTS).listdir())
        # No placeholder DaemonSet: no pod holds idle-mining GPUs, so Akash counts them free.
        assert files == ["m2p-agent-ts-agent.yaml", "m2p-agent-ts-server.yaml", "m2p-timeshare.yaml"]
        for file in files:
            assert host.file(f"{MANIFESTS}/{file}").mode == 0o600
        kinds = {d["kind"] for f in files
                 for d in yaml.safe_load_all(host.file(f"{MANIFESTS}/{f}").content_string) if d}
    assert not kinds & {"DaemonSet", "Pod", "PriorityClass"}


def test_blind_agent_keeps_mining_and_says_why(host):
    """The API cannot be reached: the mode stays mining and the miner is never stopped."""
    status = json.loads(host.file("/var/lib/m2p/agent/status.json").content_string)
    assert status["mode"] == "mining" and status["last_error"].startswith("API: GET /api/v1/pods")
    if name(host) == "ts-ext":
        return  # plain Debian: no miner
    session = {"ts-server": "miner", "ts-agent": "minew"}[name(host)]
    with host.sudo():
        assert host.run(f"screen -ls {session}").rc == 0


def test_mining_config_untouched(host):
    flavour = {"ts-server": "hiveos", "ts-agent": "msos"}.get(name(host))
    if flavour is None:
        pytest.skip("plain Debian: no mining config")
    assert flavours.config_changes(host, flavour) == []


def test_the_python38_rig_has_no_newer_python(host):
    """ts-server is booted as HiveOS 0.6-227 (Ubuntu 20.04): python3 3.8 and nothing newer."""
    if name(host) != "ts-server":
        pytest.skip("another rig")
    pythons.assert_only(host, "3.8")
