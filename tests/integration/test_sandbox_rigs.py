"""The sandbox-rig harness itself: real systemd hosts, real SSH, clean teardown."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import paramiko
import pytest
import yaml

from m2p_sandbox import network, processes, supervisor
from m2p_sandbox import rig as sandbox

from .conftest import run, ssh

pytestmark = pytest.mark.integration


def test_every_rig_is_a_systemd_host_reachable_over_ssh(sandbox_rigs):
    for name, r in sandbox_rigs.items():
        client = ssh(r)
        try:
            assert run(client, "hostname") == (0, f"{name}\n")
            code, state = run(client, "systemctl is-system-running --wait")
            assert state.strip() in {"running", "degraded"}, state
            assert run(client, "cat /proc/1/comm") == (0, "systemd\n")
            assert run(client, "sudo -n id -u") == (0, "0\n")
            code, addr = run(client, "ip -4 -o addr show dev eth0")
            assert f" {r.address}/" in addr
        finally:
            client.close()


def wait_until(check, timeout=15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.3)
    return False


def test_rigs_have_distinct_addresses_in_the_sandbox_range(sandbox_rigs):
    addresses = [r.address for r in sandbox_rigs.values()]
    assert len(set(addresses)) == len(addresses)
    for addr in addresses:
        assert str(network.sandbox_network()).split(".")[0] == addr.split(".")[0]


MINER_RUNS = "pgrep -f '^bash /hive/bin/miner-run '"  # a miner window's loop (sandbox flavours.MINING)
SYSTEMD_ENV = "env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # a unit's, no /etc/environment
HIVE_ENV = "set -a; . /etc/environment; set +a;"  # a login's (pam_env), or HiveOS's own boot script's


def test_hiveos_flavour_has_the_hiveos_layout_and_miner(sandbox_rigs):
    """The HiveOS stand-in holds to the contract of HiveOS's own scripts (minershive/hiveos-linux, the commits
    cited in each stand-in's header), its unkind parts first: what fails silently fails silently here too."""
    client = ssh(sandbox_rigs["hive1"])
    try:
        assert run(client, "readlink /etc/environment") == (0, "/hive/etc/environment\n")
        assert "RIG_CONF=/hive-config/rig.conf" in run(client, "cat /etc/environment")[1]
        assert run(client, "dpkg-query -W -f '${Version}' hive") == (0, "0.6-229")
        # Started by the boot script's `wd start`, late in the boot as on HiveOS: under load after sshd answers.
        assert wait_until(lambda: run(client, "systemctl is-active hive-watchdog")[1].strip() == "active", timeout=60)
        # The miner runs in a window of the screen session "miner", under miner-run's restart loop.
        assert ".miner" in run(client, "sudo screen -ls miner")[1]
        assert run(client, f"sudo {MINER_RUNS}")[0] == 0
        # `miner status` always exits 0 (hive/bin/miner @fae42644: its $? is tail's).
        assert run(client, "sudo /hive/bin/miner status")[0] == 0
        # miner-run starts the miner again 3 s after it exits.
        miner = run(client, "pgrep -f '^python3 /usr/lib/m2p-standin/standin-cuda'")[1].split()[0]
        assert run(client, f"sudo kill -KILL {miner}")[0] == 0
        assert wait_until(lambda: run(client, "pgrep -f '^python3 /usr/lib/m2p-standin/standin-cuda'")[1].split()[:1]
                          not in ([], [miner]), timeout=15)
        # Its signal handlers set in each of its processes (a miner Ctrl-C'd as it starts dies of it, and its
        # miner-run with it): SIGTERM caught (/proc's SigCgt, bit 15 - 1), which the stand-in sets with SIGINT's; a
        # fixed 2 s was too short on loaded cores.
        def handlers_set() -> bool:
            masks = run(client, "for p in $(pgrep -f '^python3 /usr/lib/m2p-standin/standin-cuda'); do "
                                "awk '/^SigCgt/ {print $2}' /proc/$p/status; done")[1].split()
            return bool(masks) and all(int(mask, 16) & 1 << 14 for mask in masks)
        assert wait_until(handlers_set, timeout=30)
        # `miner stop`: MINER_STOP meanwhile, the session quit, MINER_RUN gone; the watchdog left alone.
        t0 = time.monotonic()
        code, out = run(client, f"sudo sh -c '{HIVE_ENV} /hive/bin/miner stop & sleep 2; cat /run/hive/MINER_STOP; wait'")
        assert code == 0 and out.splitlines()[0] == "1" and "Miner stopped" in out, out
        assert time.monotonic() - t0 >= 10  # Ctrl-C, the miner back 3 s later, the session quit after 15 s
        assert ".miner" not in run(client, "sudo screen -ls miner")[1]
        assert run(client, f"sudo {MINER_RUNS}")[0] == 1 and run(client, "test -e /run/hive/MINER_RUN")[0] == 1
        assert run(client, "systemctl is-active hive-watchdog")[1].strip() == "active"
        # `wd stop` does nothing (hive/bin/wd @f0df8ec6); only its unit stops it.
        assert run(client, "sudo /hive/bin/wd stop")[0] == 0
        assert run(client, "systemctl is-active hive-watchdog")[1].strip() == "active"

        # Without HiveOS's environment (what systemd gives a unit): `miner start` starts nothing and exits 0,
        # leaving a session that holds only a bash, which every later start takes for a running miner.
        assert run(client, f"sudo {SYSTEMD_ENV} /hive/bin/miner start")[0] == 0
        assert ".miner" in run(client, "sudo screen -ls miner")[1]
        time.sleep(1)
        assert run(client, f"sudo {MINER_RUNS}")[0] == 1
        code, out = run(client, f"sudo sh -c '{HIVE_ENV} /hive/bin/miner start'")
        assert code == 0 and "already running" in out, out
        assert run(client, f"sudo {MINER_RUNS}")[0] == 1
        # Its own stop clears it; with the environment the miner starts (exit 0, WD_ENABLED or not).
        assert run(client, f"sudo sh -c '{HIVE_ENV} /hive/bin/miner stop'")[0] == 0
        assert run(client, f"sudo sh -c '{HIVE_ENV} /hive/bin/miner start'")[0] == 0
        assert run(client, f"sudo {MINER_RUNS}")[0] == 0 and run(client, "test -e /run/hive/MINER_RUN")[0] == 0
        # nvidia-oc without the environment tunes nothing: no cards (it `cat`s its stdin), exit 1.
        code, out = run(client, f"sudo {SYSTEMD_ENV} /hive/sbin/nvidia-oc < /dev/null")
        assert code == 1 and "No cards available for OC" in out, out
        code, out = run(client, f"sudo sh -c '{HIVE_ENV} /hive/sbin/nvidia-oc' < /dev/null")
        assert code == 0 and "Detected 2 NVIDIA cards" in out, out

        # The miner is the GPU miner stand-in, with a real miner's weight: resident memory, on every card.
        pid = run(client, "pgrep -f '^python3 /usr/lib/m2p-standin/standin-cuda'")[1].split()[0]
        deadline = time.monotonic() + 20  # it writes its 256 MB first (a loaded CI saw 103 MB at once)
        while int(run(client, f"ps -o rss= -p {pid}")[1] or 0) <= 200_000 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert int(run(client, f"ps -o rss= -p {pid}")[1]) > 200_000
        assert run(client, "nvidia-smi --query-compute-apps=pid --format=csv,noheader")[1].split() == [pid, pid]

        # The watchdog reboots (the stand-in's sreboot records it) on low hashrate for WD_REBOOT minutes, while
        # the miner runs (a minute shortened to 1 s here); and idles once the miner is stopped.
        low = base64.b64encode(b"""WD_MINHASHES='{"custom": 1000000000}'\nWD_REBOOT=2\nWD_MINER=0\n""").decode()
        assert run(client, f"sudo cp -a /hive-config/rig.conf /run/rig.conf.keep && echo {low} | base64 -d | "
                           "sudo tee -a /hive-config/rig.conf > /dev/null && sudo mkdir -p /etc/m2p-standin && "
                           "printf 'WD_MINUTE_S=1\\nWD_SLEEP=1\\n' | sudo tee /etc/m2p-standin/wd.conf > /dev/null && "
                           "sudo systemctl restart hive-watchdog")[0] == 0
        try:
            assert wait_until(lambda: "sreboot by" in run(client, "cat /var/log/m2p-standin-reboots.log")[1],
                              timeout=20)
        finally:
            assert run(client, "sudo sh -c 'cp -a /run/rig.conf.keep /hive-config/rig.conf && "
                               "rm -f /etc/m2p-standin/wd.conf /var/log/m2p-standin-reboots.log && "
                               "systemctl restart hive-watchdog'")[0] == 0
    finally:
        client.close()


def test_hiveos_default_password_login_works(sandbox_rigs):
    import paramiko

    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(sandbox_rigs["hive1"].address, username="user", password="1",
                   allow_agent=False, look_for_keys=False, timeout=10)
    try:
        assert run(client, "id -un") == (0, "user\n")
    finally:
        client.close()


def test_msos_flavour_has_its_markers_and_miner(sandbox_rigs):
    client = ssh(sandbox_rigs["ms1"])
    try:
        assert run(client, "test -d /home/minerstat/minerstat-os && echo yes") == (0, "yes\n")
        assert "DISTRIB_RELEASE=1.8.6" in run(client, "cat /etc/lsb-release")[1]
        # msOS's client (start.sh, in the screen minerstat-console) starts the miner a moment after boot.
        assert wait_until(lambda: ".minew" in run(client, "sudo screen -ls minew")[1])
        # core/stop exits 1 whatever happened, as the real one does (minerstat-os core/stop).
        assert run(client, "sudo /home/minerstat/minerstat-os/core/stop")[0] == 1
        assert run(client, "cat /tmp/stop.pid") == (0, "stop\n")
        assert ".minew" not in run(client, "sudo screen -ls minew")[1]
        # mstart's way (core/.bashrc; msOS has no core/start): the client again, which starts the miner.
        assert run(client, "cd /home/minerstat/minerstat-os && sudo rm -f /tmp/stop.pid && "
                           "sudo screen -A -m -d -S minerstat-console bash start.sh")[0] == 0
        assert wait_until(lambda: ".minew" in run(client, "sudo screen -ls minew")[1])
    finally:
        client.close()


def test_gpu_standin_prints_the_chosen_cards(sandbox_rigs):
    client = ssh(sandbox_rigs["hive1"])
    try:
        code, out = run(client, "nvidia-smi --query-gpu=index,name,pci.device_id,memory.total "
                                "--format=csv,noheader,nounits")
        assert code == 0
        assert out.splitlines() == [
            "0, NVIDIA GeForce RTX 3090, 0x220410DE, 24576",
            "1, NVIDIA GeForce RTX 3090, 0x220410DE, 24576",
        ]
        code, out = run(client, "nvidia-smi --query-gpu=bogus --format=csv")
        assert code == 2 and 'Field "bogus" is not a valid field to query.' in out
    finally:
        client.close()
    plain = ssh(sandbox_rigs["plain1"])
    try:
        assert run(plain, "command -v nvidia-smi")[0] != 0  # no GPU, no stand-in
    finally:
        plain.close()


def test_a_rig_reboots_and_comes_back(boot_rigs):
    (r,) = boot_rigs(sandbox.RigSpec("reboot1", "hiveos"))
    client = ssh(r)
    boot_id = run(client, "cat /proc/sys/kernel/random/boot_id")[1]
    client.exec_command("sudo systemctl reboot")
    client.close()
    # The old boot's sshd may still answer while it shuts down (a loaded CI machine: "stopping" was read once):
    # the new boot is the one whose system is not stopping.
    deadline = time.monotonic() + 90
    while True:
        time.sleep(1)
        sandbox.wait_ssh(r, timeout=60)
        client = ssh(r)
        try:
            state = run(client, "systemctl is-system-running --wait")[1].strip()
        except (OSError, EOFError, paramiko.SSHException):  # the old boot went while asked
            state = "stopping"
        if state != "stopping" or time.monotonic() > deadline:
            break
        client.close()
    try:
        # A container's boot_id is the host's; PID 1's start time tells a new boot.
        assert state in {"running", "degraded"}
        code, out = run(client, "ps -o etimes= -p 1")
        assert int(out.strip()) < 30
        assert run(client, f"sudo {MINER_RUNS}")[0] == 0  # hive.service started it again
    finally:
        client.close()
    assert boot_id  # read before the reboot


def _traces(r: sandbox.Rig) -> list[str]:
    """Everything a rig could leave behind, named."""
    left = []
    if Path(r.dir).exists():
        left.append(f"directory {r.dir}")
    if any(r.dir in line for line in Path("/proc/self/mounts").read_text().splitlines()):
        left.append("mount")
    if Path("/run/netns", r.id).exists():
        left.append(f"netns {r.id}")
    if Path("/sys/class/net", network.veth_host_name(r.slot)).exists():
        left.append("veth")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if r.dir in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                left.append(f"process {pid}")
        except OSError:
            continue
    return left


# What the supervisor may take after its owner dies: the rig's poweroff grace, then teardown's wait for the rig's
# processes (10 s) and its unmount tries (5 s), with room for a loaded machine (a CI run on three workers took
# longer than the 40 s this test once waited).
CLEAN_WAIT_S = supervisor.POWEROFF_GRACE + 10 + 5 + 30


def _wait_clean(r: sandbox.Rig, timeout: float = CLEAN_WAIT_S) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := _traces(r)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


HANGING_RUN = '''
import json, os, sys, time
from m2p_sandbox import rig as sandbox
rigs = sandbox.boot([sandbox.RigSpec("doomed", "hiveos")], owner_pid=os.getpid())
print(json.dumps([r.__dict__ for r in rigs]), flush=True)
{action}
'''


@pytest.mark.parametrize("action", ["time.sleep(600)", "raise RuntimeError('forced failure')"])
def test_nothing_is_left_behind_when_the_runner_dies_or_fails(action):
    """Kill the owning run with SIGKILL mid-test, or let it crash: the rig must vanish."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HANGING_RUN.format(action=action)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    r = sandbox.Rig(**json.loads(line)[0])
    if action.startswith("time.sleep"):
        assert sandbox.ssh_banner(r.address), "rig was not up before the kill"
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    left = _wait_clean(r)
    end = sandbox.end_log(r.path)
    assert left == [], f"{left}; the rig's end log: {end.read_text() if end.exists() else 'none'}"


@pytest.mark.parametrize("at_once", [False, True], ids=["poweroff", "at-once"])
def test_stop_removes_everything(boot_rigs, at_once):
    """A stop leaves nothing, whether the rig powers off or is killed at once (the teardown of every test's rigs),
    and its end log says which it was."""
    (r,) = boot_rigs(sandbox.RigSpec("short1"))
    started = time.monotonic()
    sandbox.stop(r, at_once=at_once)
    assert _traces(r) == []
    said = sandbox.end_log(r.path).read_text().rpartition(sandbox.taken_mark(r))[2]
    assert ("nspawn exit -9 (as asked, at once)" in said) if at_once else ("nspawn exit 0 (as asked)" in said), said
    assert not at_once or time.monotonic() - started < 10


def test_a_rig_that_does_not_come_up_is_booted_again(monkeypatch):
    """The first wait fails (as a hung boot would): that rig is torn down, a new one boots."""
    from m2p_sandbox.errors import SandboxError

    real_wait = sandbox.wait_ssh
    failed_once: list[str] = []  # the hung rig's key, to tell the new rig from it

    def flaky_wait(r, timeout=60):
        if r.name == "flaky1" and not failed_once:
            failed_once.append(Path(r.key_file + ".pub").read_text())
            raise SandboxError("forced: not SSH-ready (test)")
        return real_wait(r, timeout)

    monkeypatch.setattr(sandbox, "wait_ssh", flaky_wait)
    log = sandbox.sandbox_root() / "boot_retries.log"
    before = log.read_text() if log.exists() else ""
    rigs = sandbox.boot([sandbox.RigSpec("steady1"), sandbox.RigSpec("flaky1")], owner_pid=os.getpid())
    try:
        assert [r.name for r in rigs] == ["steady1", "flaky1"]
        assert Path(rigs[1].key_file + ".pub").read_text() != failed_once[0]  # a fresh rig
        assert sandbox.ssh_banner(rigs[1].address)
        assert len(sandbox.running()) >= 2 and sum(r.name == "flaky1" for r in sandbox.running()) == 1
        assert "forced: not SSH-ready (test)" in log.read_text()[len(before):]
    finally:
        for r in rigs:
            sandbox.stop(r)


def test_a_stale_instance_config_stops_no_other_rig_and_a_stopped_rig_says_who_stopped_it(boot_rigs, tmp_path):
    """A rig id is a reused slot: a Molecule instance config left by an interrupted run names the id another
    test's rig holds now, and `molecule test` begins with destroy.  Only an entry whose id and name both
    match stops a rig; and a rig stopped under a test still waiting for it says who asked (its console log
    goes with its directory)."""
    from m2p_sandbox.errors import SandboxError

    (r,) = boot_rigs(sandbox.RigSpec("keep1"))
    stale = tmp_path / "instance_config.yml"
    stale.write_text(yaml.safe_dump([{"instance": "gone1", "address": r.address, "user": r.user, "port": 22,
                                      "identity_file": r.key_file, "rig_id": r.id}]))
    down = [sys.executable, "-m", "m2p_sandbox", "down", "--instance-config"]
    proc = subprocess.run([*down, str(stale)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sandbox.ssh_banner(r.address) and processes.supervisor_pids(r.path), "a stale entry stopped keep1"
    mine = tmp_path / "mine.yml"
    mine.write_text(yaml.safe_dump([{"instance": "keep1", "rig_id": r.id}]))
    proc = subprocess.run([*down, str(mine)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(SandboxError, match=r"keep1 .* stopped while booting: .*stop asked by pid \d+ .*m2p_sandbox "
                                           r"down --instance-config .*mine\.yml.* nspawn exit 0 \(as asked\)"):
        sandbox.wait_ssh(r, timeout=10)
