"""Verify the sandbox rigs hold real state after converge (testinfra over SSH)."""

import pytest

from m2p_sandbox import flavours


def _dump_journal(host, unit):
    print(host.run(f"journalctl -u {unit} --no-pager -n 50").stdout)


def test_heartbeat_unit_survived_the_reboot(host):
    svc = host.service("m2p-sandbox-heartbeat")
    try:
        assert svc.is_enabled
        assert svc.is_running
        # The unit came up by itself after the converge's reboot: PID 1 is younger than it ran.
        assert host.file("/run/m2p-heartbeat/beat").exists
    except AssertionError:
        _dump_journal(host, "m2p-sandbox-heartbeat")
        raise


def test_check_file_content(host):
    f = host.file("/etc/m2p-sandbox-check.conf")
    assert f.user == "root" and f.mode == 0o644
    name = host.backend.get_hostname()
    assert f.content_string == f"rig={name}\ndistribution=Debian 12\n"


def test_rig_rebooted_during_converge(host):
    # PID 1 started after the unit file was written: the reboot really happened.
    pid1_age = int(host.check_output("ps -o etimes= -p 1").strip())
    unit_age = int(host.check_output(
        "echo $(( $(date +%s) - $(stat -c %Y /etc/systemd/system/m2p-sandbox-heartbeat.service) ))"))
    assert pid1_age < unit_age


def test_hiveos_mining_config_untouched(host):
    if host.backend.get_hostname() != "mol-hive":
        pytest.skip("HiveOS check runs on the HiveOS-layout rig only")
    assert flavours.config_changes(host, "hiveos") == []
    # The reboot in converge restarted the miner through hive.service, as on HiveOS.
    with host.sudo():
        assert ".miner" in host.check_output("screen -ls miner || true")
