"""Role mining_os: the rig's state before m2p is recorded once; driver packages are held;
the miner keeps running and the mining OS's configuration is untouched."""

import json

import pytest

from m2p_sandbox import flavours, pythons

EXPECTED = {  # rig -> (mining OS, autostart units enabled before)
    "mo-hive": ("hiveos", ["hive.service"]),
    "mo-msos": ("msos", ["minerstat.service"]),
    "mo-mmp": ("mmpos", []),
    "mo-smos": ("smos", []),
    "mo-plain": ("debian", []),
}


def name(host):
    return host.backend.get_hostname()


def before(host):
    with host.sudo():
        f = host.file("/var/lib/m2p/mining_os/before.json")
        assert f.mode == 0o600 and f.user == "root"
        return json.loads(f.content_string)


def test_the_rig_as_it_was_is_recorded(host):
    kind, autostart = EXPECTED[name(host)]
    record = before(host)
    assert record["mining_os"] == kind
    assert record["autostart_enabled"] == autostart
    assert record["miner_running"] is (kind != "debian")


def test_the_miner_still_runs_and_its_config_is_byte_identical(host):
    kind, autostart = EXPECTED[name(host)]
    for unit in autostart:
        assert host.service(unit).is_enabled
    running = {"hiveos": "screen -ls miner", "msos": "screen -ls minew", "smos": "runuser -u miner -- screen -ls miner",
               "mmpos": "pgrep -f '^python3 /opt/mmp/miners/'"}.get(kind)
    if running:
        with host.sudo():
            assert host.run(running).rc == 0, running
    assert flavours.config_changes(host, kind) == []


def test_driver_packages_are_held_and_kept_from_unattended_upgrades(host):
    with host.sudo():
        holds = host.check_output("apt-mark showhold").split()
    if name(host) == "mo-plain":
        assert holds == ["nvidia-utils-550-server"]
        assert before(host)["holds_added"] == ["nvidia-utils-550-server"]
    else:
        assert holds == [] and before(host)["holds_added"] == []  # .run drivers: nothing from dpkg
    text = host.file("/etc/apt/apt.conf.d/51m2p-no-unattended-nvidia").content_string
    assert '"nvidia-";' in text and '"libnvidia-";' in text


def test_the_python38_rig_has_no_newer_python(host):
    """mo-hive is booted as HiveOS 0.6-227 (Ubuntu 20.04): python3 3.8 and nothing newer."""
    if name(host) != "mo-hive":
        pytest.skip("another rig")
    pythons.assert_only(host, "3.8")
