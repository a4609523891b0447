"""Role k3s_server: m2p's unit and config.yaml (no install script), running, token written."""

import yaml


def test_server_runs_from_m2ps_unit_and_config(host):
    svc = host.service("k3s")
    assert svc.is_enabled and svc.is_running
    unit = host.file("/etc/systemd/system/k3s.service").content_string
    assert "ExecStart=/usr/local/bin/k3s server\n" in unit and "Type=notify\n" in unit
    with host.sudo():
        config_file = host.file("/etc/rancher/k3s/config.yaml")
        assert config_file.mode == 0o600
        config = yaml.safe_load(config_file.content_string)
    assert config["node-name"] == "ks-hive"
    assert config["disable"] == ["traefik"]
    assert "image-gc-high-threshold=80" in config["kubelet-arg"]
    assert config["write-kubeconfig-mode"] == "0600"


def test_server_wrote_its_join_token_root_only(host):
    with host.sudo():
        token = host.file("/var/lib/rancher/k3s/server/token")
        assert token.exists and token.mode == 0o600 and token.user == "root"
        assert token.content_string.startswith("K10")
