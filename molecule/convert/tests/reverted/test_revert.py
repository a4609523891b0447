"""After convert.yml then revert.yml: the rig is the mining rig it was."""

import pytest

from m2p_sandbox import flavours, pythons


def name(host):
    return host.backend.get_hostname()


def test_k3s_is_gone(host):
    for unit in ("k3s", "k3s-agent"):
        assert not host.service(unit).is_running
    for path in ("/usr/local/bin/k3s", "/etc/rancher/k3s", "/var/lib/rancher/k3s",
                 "/etc/systemd/system/k3s.service", "/etc/systemd/system/k3s-agent.service",
                 "/etc/systemd/system/k3s-agent.service.env"):
        with host.sudo():
            assert not host.file(path).exists, path


def test_toolkit_m2p_installed_is_purged(host):
    with host.sudo():
        assert not host.package("nvidia-container-toolkit").is_installed
        assert not host.package("nvidia-container-toolkit-base").is_installed
        assert "nvidia-container" not in host.check_output("apt-mark showhold")
        assert not host.file("/etc/cdi/nvidia.yaml").exists
        assert not host.file("/var/lib/m2p").exists
    assert not host.file("/etc/apt/apt.conf.d/51m2p-no-unattended-nvidia").exists
    # NVIDIA's CDI refresher, masked by convert, is unmasked (no mask left in /etc/systemd/system)
    for unit in ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service"):
        assert not host.file(f"/etc/systemd/system/{unit}").exists, unit


def test_mining_os_rigs_mine_as_before(host):
    kind = {"conv-hive": "hiveos"}.get(name(host))
    if kind is None:
        pytest.skip("a rig without a mining OS")
    assert flavours.mining_problems(host, kind) == []


def test_the_python38_rig_has_no_newer_python(host):
    """conv-hive is booted as HiveOS 0.6-227 (Ubuntu 20.04): python3 3.8 and nothing newer."""
    if name(host) != "conv-hive":
        pytest.skip("another rig")
    pythons.assert_only(host, "3.8")
