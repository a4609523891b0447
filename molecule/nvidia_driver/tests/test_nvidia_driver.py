"""Role nvidia_driver: keep a recent driver, upgrade an old one only through the mining
OS's own tool and only when allowed, and come back mining after the reboot."""

import pytest

from m2p_sandbox import flavours, pythons
from miner2provider.core import collection

MIN_DRIVER = collection.role_defaults("nvidia_driver")["nvidia_driver_min_version"]

LOG = "/var/log/nvidia-driver-update.log"


def name(host):
    return host.backend.get_hostname()


def driver(host):
    return host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader")


def test_old_hiveos_driver_upgraded_through_hiveos_tool_and_rig_rebooted(host):
    if name(host) != "nd-hive":
        pytest.skip("another rig")
    assert driver(host) == "550.127.05"
    with host.sudo():
        calls = host.file(LOG).content_string.splitlines()
    assert [c.split()[1] for c in calls] == ["550.127.05"]  # once: the second converge kept it
    # Rebooted after the upgrade: this boot's systemd started after the upgrade call.
    boot = host.check_output("systemctl show -p UserspaceTimestamp --value --timestamp=unix")
    assert int(boot.lstrip("@").split(".")[0]) >= int(calls[0].split()[0])
    # hive.service started the miner at boot; the owner's config is as it was.
    with host.sudo():
        assert ".miner" in host.run("screen -ls miner").stdout
    assert flavours.config_changes(host, "hiveos") == []


def test_old_driver_without_permission_is_refused_with_the_fix(host):
    if name(host) != "nd-old":
        pytest.skip("another rig")
    assert driver(host) == "470.82.01"
    with host.sudo():
        text = host.file("/root/m2p-molecule-refusal.txt").content_string
    assert text.startswith(f"nd-old: NVIDIA driver 470.82.01 is older than {MIN_DRIVER}; upgrade it (your OS's driver tool)")
    assert "m2p_allow_driver_upgrade: true" in text


def test_the_setting_the_refusal_names_reaches_the_role(host):
    """nd-allowed is nd-old plus m2p_allow_driver_upgrade: true.  The role now gets past the
    permission check and stops at the next one (no safe upgrade path on plain Debian)."""
    if name(host) != "nd-allowed":
        pytest.skip("another rig")
    assert driver(host) == "470.82.01"
    with host.sudo():
        text = host.file("/root/m2p-molecule-refusal.txt").content_string
    assert text.startswith("nd-allowed: m2p cannot upgrade the driver on debian")


def test_old_ubuntu_driver_upgraded_with_apt_and_rig_rebooted(host):
    """upgrade_apt.yml: the branch's packages from the rig's apt sources (offline: a repository
    on its disk), a reboot, and the packages held by nothing but dpkg's own state."""
    if name(host) != "nd-ubuntu":
        pytest.skip("another rig")
    assert driver(host) == "550.127.05"
    for package in ("nvidia-headless-550-server", "nvidia-utils-550-server"):
        assert host.package(package).is_installed
        assert host.package(package).version == "550.127.05-0ubuntu1"
    assert not host.package("python3-apt").is_installed  # apt-get, not the apt module
    assert not host.file(LOG).exists  # never HiveOS's tool
    # Rebooted after the install: this boot's systemd started after dpkg wrote the package's file list.
    installed = int(host.check_output("stat -c %Y /var/lib/dpkg/info/nvidia-utils-550-server.list"))
    boot = host.check_output("systemctl show -p UserspaceTimestamp --value --timestamp=unix")
    assert int(boot.lstrip("@").split(".")[0]) >= installed
    pythons.assert_only(host, "3.8")
