"""A failure never leaves a rig worse than it was: faults injected on HiveOS and msOS rigs.

Each fault is real on the rig: dpkg refuses to run (its own ``pre-invoke`` hook fails, as a full
disk or a broken maintainer script would make it), k3s's unit cannot start (a systemd drop-in
whose ExecStartPre fails), the rig's network drops mid-play (its veth goes down).  After each failed run the miner runs exactly as before, the mining
configuration is byte-identical, the fleet table counts what changed before the failure, and the
next run (fault gone) converges.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time

import pytest
import yaml

from m2p_sandbox import flavours, network
from m2p_sandbox import rig as sandbox
from m2p_sandbox.bundle import build_test_bundle

from .conftest import M2P, infra_host, m2p, outcomes, rig_entry, run, ssh

pytestmark = pytest.mark.integration

# What runs while each OS mines: HiveOS's miner-run loop (its screen session proves nothing: sandbox
# flavours.MINING), msOS's screen session.
RUNNING = {"hiveos": flavours.MINING["hiveos"][1], "msos": "screen -ls minew"}
DPKG_FAULT = "/etc/dpkg/dpkg.cfg.d/zz-m2p-test-fault"
K3S_FAULT = "/etc/systemd/system/k3s.service.d/zz-m2p-test-fault.conf"


def sh(r: sandbox.Rig, command: str) -> str:
    with ssh(r) as client:
        rc, out = run(client, command)
    assert rc == 0, f"{r.name}: {command}: {out}"
    return out


def mining(r: sandbox.Rig) -> bool:
    with ssh(r) as client:
        return run(client, f"sudo {RUNNING[r.flavour]}")[0] == 0


def untouched(r: sandbox.Rig) -> bool:
    return flavours.config_changes(infra_host(r), r.flavour) == []


def fault(r: sandbox.Rig, kind: str, on: bool) -> None:
    path, content = {"dpkg": (DPKG_FAULT, "pre-invoke=false"),
                     "k3s": (K3S_FAULT, "[Service]\nExecStartPre=/bin/false")}[kind]
    if on:
        sh(r, f"sudo mkdir -p $(dirname {path}) && printf '{content}\\n' | sudo tee {path} >/dev/null")
    else:
        sh(r, f"sudo rm -f {path}")
    if kind == "k3s":
        sh(r, "sudo systemctl daemon-reload")


# apt's own timers (apt-daily-upgrade's unattended-upgrades) hold dpkg's lock for minutes on a plain Ubuntu or
# Debian rig; the sandbox masks them (m2p_sandbox/base.py), so the lock is held here on purpose: by a process on
# the rig that takes it as apt and dpkg do (an fcntl write lock on /var/lib/dpkg/lock-frontend) and lets go 3 s
# after an `apt-get install` has been seen waiting for it (at most 180 s).
LOCK_MARK = "/run/m2p-test-dpkg-lock"
HOLD_DPKG_LOCK = f"""
import fcntl, subprocess, time
lock = open("/var/lib/dpkg/lock-frontend", "w")
fcntl.lockf(lock, fcntl.LOCK_EX)
open("{LOCK_MARK}", "w").write("held\\n")
deadline = time.monotonic() + 180
while time.monotonic() < deadline:
    if subprocess.run(["pgrep", "-f", "^apt-get install"], capture_output=True).returncode == 0:
        time.sleep(3)
        open("{LOCK_MARK}", "a").write("apt-get waited\\n")
        break
    time.sleep(0.2)
"""


def hold_dpkg_lock(r: sandbox.Rig) -> None:
    """The lock held on ``r`` until an apt-get install waits for it (a unit of its own: it outlives the SSH session)."""
    sh(r, f"sudo rm -f {LOCK_MARK} && sudo systemd-run --quiet --collect --unit=m2p-test-dpkg-lock "
          f"python3 -c {shlex.quote(HOLD_DPKG_LOCK)}")
    deadline = time.monotonic() + 30
    while sh(r, f"cat {LOCK_MARK} 2>/dev/null || true").strip() != "held":
        assert time.monotonic() < deadline, f"{r.name}: the lock holder never took dpkg's lock"
        time.sleep(0.3)


def test_failed_convert_and_revert_leave_the_rigs_mining_and_the_next_run_converges(boot_rigs, tmp_path):
    hive, ms = boot_rigs(sandbox.RigSpec("flt-hive", "hiveos", ("rtx3090",)),
                         sandbox.RigSpec("flt-ms", "msos", ("rtx3060",)))
    rigs = (hive, ms)
    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"m2p_min_free_disk_gb": 5},
                                           "hosts": {r.name: rig_entry(r) for r in rigs}}}))
    common = ["-i", str(inv), "--accept-new", "--known-hosts", str(tmp_path / "kh"), "--yes", "--json"]
    convert = ["convert", "--bundle", str(bundle), *common]
    for r in rigs:
        assert mining(r), f"{r.name}: the flavour's miner should run from boot"

    # 1. A package that fails to install: dpkg itself refuses.
    for r in rigs:
        fault(r, "dpkg", on=True)
    proc = m2p(*convert)
    result = outcomes(proc)
    assert proc.returncode == 12, proc.stdout[-3000:] + proc.stderr[-3000:]
    for r in rigs:
        assert result[r.name]["result"] == "failed", result
        assert "Install the packages together with apt" in result[r.name]["message"], result[r.name]
        assert result[r.name]["changed"] > 0, result[r.name]  # what it did before the failure counts
        assert mining(r) and untouched(r), r.name
        fault(r, "dpkg", on=False)

    # 2. k3s that cannot start; on the HiveOS rig dpkg's lock is held by another program when the toolkit's
    #    packages install: apt waits for it, and the run goes on to k3s.
    for r in rigs:
        fault(r, "k3s", on=True)
    hold_dpkg_lock(hive)
    result = outcomes(m2p(*convert))
    assert sh(hive, f"cat {LOCK_MARK}").split("\n")[:2] == ["held", "apt-get waited"], "apt-get never met the lock"
    for r in rigs:
        assert result[r.name]["result"] == "failed" and "k3s" in result[r.name]["message"], result[r.name]
        assert mining(r) and untouched(r), r.name
        fault(r, "k3s", on=False)

    # The next run completes what was left; one more changes nothing.
    proc = m2p(*convert)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {o["result"] for o in outcomes(proc).values()} == {"changed"}
    again = outcomes(m2p(*convert, "--full"))
    assert [again[r.name]["changed"] for r in rigs] == [0, 0], again

    # 3. Revert while m2p has the miner stopped (as the agent does while leasing), and dpkg
    #    refuses the purge: the rig mines again anyway, and a second revert finishes.
    sh(hive, "sudo /hive/bin/miner stop")
    sh(ms, "sudo /home/minerstat/minerstat-os/core/stop || true")  # it always exits 1, as the real one does
    for r in rigs:
        assert not mining(r), r.name
        fault(r, "dpkg", on=True)
    result = outcomes(m2p("revert", *common))
    for r in rigs:
        assert result[r.name]["result"] == "failed", result
        assert result[r.name]["message"].startswith("Report the step that failed"), result[r.name]
        assert "Purge the toolkit packages" in result[r.name]["message"], result[r.name]
        assert "the rig mines as before" in result[r.name]["message"]
        assert mining(r) and untouched(r), r.name
        fault(r, "dpkg", on=False)
    proc = m2p("revert", *common)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for r in rigs:
        assert mining(r) and untouched(r), r.name
        assert sh(r, "dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n' 'nvidia-container*' "
                     "'libnvidia-container*' 2>/dev/null | grep -c '^ii' || true").strip() == "0"
        assert sh(r, "test -e /var/lib/m2p && echo left || echo gone").strip() == "gone"


def test_connection_cut_mid_revert_leaves_the_rig_mining_and_the_next_revert_finishes(boot_rigs, tmp_path):
    """The controller loses the rig mid-revert (its network drops for 40 s right after revert gave
    the miner back): the rig is reported unreachable, it mines, and the next revert finishes."""
    (r,) = boot_rigs(sandbox.RigSpec("flt-cut", "hiveos", ("rtx3090",)))
    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"m2p_min_free_disk_gb": 5}, "hosts": {r.name: rig_entry(r)}}}))
    common = ["-i", str(inv), "--accept-new", "--known-hosts", str(tmp_path / "kh"), "--yes"]
    assert m2p("convert", "--bundle", str(bundle), *common).returncode == 0
    sh(r, "sudo /hive/bin/miner stop")  # as the agent does while leasing
    assert not mining(r)
    proc = subprocess.Popen([*M2P, "revert", *common], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen: list[str] = []
    cut_at = None
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            seen.append(line)
            if "changed" in line and "Start the miner again" in line:
                network.set_link(r.slot, up=False)
                cut_at = time.monotonic()
                break
        rest, _ = proc.communicate(timeout=300)
    finally:
        if cut_at is not None:  # the drop lasts 40 s (m2p's ssh gives up after 30 s of silence)
            time.sleep(max(0.0, cut_at + 40 - time.monotonic()))
            network.set_link(r.slot, up=True)
    text = "".join(seen) + rest
    assert cut_at is not None, "revert never restarted the miner: the cut never happened\n" + text[-3000:]
    assert proc.returncode == 11 and "unreachable" in text, text[-3000:]
    sandbox.wait_ssh(r, timeout=60)
    assert mining(r) and untouched(r)
    proc = m2p("revert", *common)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert mining(r) and untouched(r)
    assert sh(r, "test -e /var/lib/m2p && echo left || echo gone").strip() == "gone"
