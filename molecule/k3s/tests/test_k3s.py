"""Role k3s: the bundle's binary; a server from m2p's unit and config.yaml on its data disk; an agent
that joins an external server with a token that is only in a 0600 env file."""

import hashlib
import os
from pathlib import Path

import pytest
import testinfra
import yaml

DATA_DIR = "/srv/k3s-data"  # the server's m2p_data_dir in molecule.yml


def name(host):
    return host.backend.get_hostname()


def rig(hostname):
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    return testinfra.get_host(f"ansible://{hostname}?ansible_inventory={inventory}")


def server_address():
    return rig("k-server").ansible.get_variables()["ansible_host"]


def config(host):
    with host.sudo():
        config_file = host.file("/etc/rancher/k3s/config.yaml")
        assert config_file.mode == 0o600
        return yaml.safe_load(config_file.content_string)


def test_binary_is_the_bundles_byte_for_byte(host):
    root = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "bundle"
    k3s = yaml.safe_load((root / "manifest.yml").read_text())["k3s"]
    binary = host.file("/usr/local/bin/k3s")
    assert binary.mode == 0o755 and binary.user == "root"
    assert binary.sha256sum == k3s["sha256"] == hashlib.sha256((root / k3s["file"]).read_bytes()).hexdigest()
    assert f"k3s version {k3s['version']}" in host.check_output("/usr/local/bin/k3s --version")


def test_server_runs_from_m2ps_unit_and_config_on_its_data_disk(host):
    if name(host) != "k-server":
        pytest.skip("an agent")
    svc = host.service("k3s")
    assert svc.is_enabled and svc.is_running
    unit = host.file("/etc/systemd/system/k3s.service").content_string
    assert "ExecStart=/usr/local/bin/k3s server\n" in unit and "Type=notify\n" in unit
    cfg = config(host)
    assert cfg["node-name"] == "k-server" and cfg["data-dir"] == DATA_DIR
    assert cfg["disable"] == ["traefik", "servicelb"] and cfg["write-kubeconfig-mode"] == "0600"
    assert cfg["secrets-encryption"] is True
    assert "image-gc-high-threshold=80" in cfg["kubelet-arg"]
    # Sandbox rigs boot with cgroup v1 (the host's): kubelet 1.35 starts there only with this flag.
    v1 = host.check_output("stat -fc %T /sys/fs/cgroup") != "cgroup2fs"
    assert ("fail-cgroupv1=false" in cfg["kubelet-arg"]) == v1
    with host.sudo():
        token = host.file(f"{DATA_DIR}/server/token")
        assert token.exists and token.mode == 0o600 and token.user == "root"
        assert token.content_string.startswith("K10")
        assert not host.file("/var/lib/rancher/k3s/server/token").exists
        # The agents' token (k3s's agent-token-file): a file of its own, not k3s's link to the server token.
        agents = host.file(f"{DATA_DIR}/server/agent-token")
        assert agents.is_file and not agents.is_symlink and "::node:" in agents.content_string
        assert agents.content_string.split("::")[0] == token.content_string.split("::")[0]


def test_agent_runs_and_points_at_its_server(host):
    if name(host) == "k-server":
        pytest.skip("the server the agents join")
    svc = host.service("k3s-agent")
    assert svc.is_enabled and svc.is_running
    assert not host.file("/etc/systemd/system/k3s.service").exists
    unit = host.file("/etc/systemd/system/k3s-agent.service").content_string
    assert "ExecStart=/usr/local/bin/k3s agent\n" in unit
    cfg = config(host)
    assert cfg["server"] == f"https://{server_address()}:6443"
    assert cfg["node-name"] == name(host) and "disable" not in cfg
    assert "image-gc-high-threshold=80" in cfg["kubelet-arg"]  # the same kubelet args as the server


def test_token_given_only_in_the_root_env_file_never_in_argv(host):
    if name(host) == "k-server":
        pytest.skip("the server the agents join")
    token = "K10standin-external-token::node:molecule"  # k-ext's, as molecule.yml gives it
    with host.sudo():
        env = host.file("/etc/systemd/system/k3s-agent.service.env")
        assert env.mode == 0o600 and env.user == "root"
        assert env.content_string == f"K3S_TOKEN={token}\n"
        pid = host.check_output("systemctl show -p MainPID --value k3s-agent")
        assert token not in host.file(f"/proc/{pid}/cmdline").content_string
        assert token not in host.file("/etc/rancher/k3s/config.yaml").content_string
