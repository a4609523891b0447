"""Pure parts of the harness: recipe hashing, address plan, flavour data."""

import functools
import subprocess

import pytest

from m2p_sandbox import base, flavours, network
from m2p_sandbox.errors import SandboxError


def test_recipe_hash_is_stable_and_tracks_the_recipe(monkeypatch):
    first = base.recipe_hash()
    assert first == base.recipe_hash()
    monkeypatch.setattr(base, "PACKAGES", base.PACKAGES + ("curl",))
    assert base.recipe_hash() != first


def test_addresses_stay_inside_the_private_range(monkeypatch):
    monkeypatch.setenv("M2P_SANDBOX_NET", "10.99.0.0/24")
    assert str(network.gateway()) == "10.99.0.1"
    assert str(network.address_for(2)) == "10.99.0.2"
    with pytest.raises(SandboxError, match="full"):
        network.address_for(255)


@pytest.mark.parametrize("bad", ["8.8.8.0/24", "10.0.0.0/30", "not-a-net"])
def test_public_or_tiny_networks_are_refused(monkeypatch, bad):
    monkeypatch.setenv("M2P_SANDBOX_NET", bad)
    with pytest.raises(SandboxError):
        network.sandbox_network()


def test_flavours_load_and_name_their_stand_ins():
    assert flavours.available() == ["ethos", "hiveos", "mmpos", "msos", "nhos", "plain", "raveos", "smos", "ubuntu"]
    ubuntu = flavours.load("ubuntu")
    assert "STAND-IN" in ubuntu.description and "ID=ubuntu\n" in (ubuntu.root / "etc/os-release").read_text()
    hive = flavours.load("hiveos")
    assert [u.name for u in hive.users] == ["user"]
    assert (hive.root / "hive-config/rig.conf").is_file()
    assert (hive.root / "etc/environment").is_symlink()
    assert "STAND-IN" in hive.description
    with pytest.raises(SandboxError, match="unknown rig flavour"):
        flavours.load("winos")


def test_pristine_mining_config_lists_every_file_of_it():
    """The Molecule verifiers compare these on the rig: an empty map would make them vacuous."""
    hive = flavours.pristine_config("hiveos")
    assert sorted(hive) == ["/hive-config/RepoVer", "/hive-config/nvidia-oc.conf", "/hive-config/rig.conf",
                           "/hive-config/wallet.conf"]
    assert all(len(sha) == 64 for sha in hive.values())
    assert list(flavours.pristine_config("msos")) == ["/media/storage/config.js"]
    assert flavours.pristine_config("plain") == {}


def test_a_rig_root_still_listed_after_umount_is_tried_again_before_the_teardown_gives_up(monkeypatch, tmp_path):
    """Under a CI run's load a rig's root was still listed after `umount` and `umount --lazy` had both run, and a
    destroy a moment later unmounted it: teardown tries again before it leaves the rig in place."""
    from m2p_sandbox import rig

    listed = iter([True, True, False])  # mounted; still listed after the first try; gone after the second
    calls: list[list[str]] = []

    def umount(argv, **_kw):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 32, "", "umount: target is busy.")

    monkeypatch.setattr(rig, "_is_mounted", lambda path: next(listed))
    monkeypatch.setattr(rig.subprocess, "run", umount)
    assert rig._unmount(tmp_path / "merged", pause_s=0.0) == ""
    assert [argv[:2] for argv in calls] == [["umount", str(tmp_path / "merged")], ["umount", "--lazy"]] * 2

    monkeypatch.setattr(rig, "_is_mounted", lambda path: True)  # never goes: what umount said is kept, for the error
    assert "target is busy" in rig._unmount(tmp_path / "merged", tries=3, pause_s=0.0)


def test_a_busy_mount_goes_lazily(tmp_path):
    """The real thing, as root: a tmpfs a process keeps busy (its working directory) fails a plain umount and goes
    with the lazy one."""
    import os

    from m2p_sandbox import rig

    if os.geteuid() != 0:
        pytest.fail("needs root (mount, umount): run the harness tests as root, as scripts/test does")
    merged = tmp_path / "merged"
    merged.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(merged)], check=True)
    holder = subprocess.Popen(["sleep", "30"], cwd=merged)
    try:
        assert rig._is_mounted(merged)
        assert rig._unmount(merged, pause_s=0.0) == "" and not rig._is_mounted(merged)
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["umount", str(merged)], capture_output=True)


def _rig_of_slot_12(slot_dir, name: str, owner: int):
    """A rig record of slot 12, as two workers' rigs in turn hold it (same address, key path and directory)."""
    from m2p_sandbox import rig as sandbox

    return sandbox.Rig(id="m2p00012", name=name, flavour="plain", slot=12, address="10.213.0.12", user="rigadmin",
                       key_file=str(slot_dir / "id_ed25519"), dir=str(slot_dir), owner_pid=owner,
                       owner_start=1000 + owner)


def _slot_12_with_sshd(monkeypatch, tmp_path, logs_in: bool):
    """Slot 12's folder in a sandbox of ``tmp_path``, its supervisor running and its sshd answering (a stand-in):
    taking logins or not."""
    from m2p_sandbox import rig as sandbox

    monkeypatch.setenv("M2P_SANDBOX_ROOT", str(tmp_path))
    monkeypatch.setattr(sandbox, "ssh_banner", lambda address, port=22: "SSH-2.0-OpenSSH_9.2")
    monkeypatch.setattr(sandbox, "can_log_in", lambda rig: logs_in)
    monkeypatch.setattr(sandbox, "_supervisors", lambda rig_dir: [4242])
    slot_dir = sandbox.rigs_dir() / "m2p00012"
    slot_dir.mkdir(parents=True)
    return slot_dir


def test_a_second_stop_of_a_rig_never_stops_the_rig_that_took_its_slot(monkeypatch, tmp_path):
    """A test stops its rig, another worker's rig takes the slot, then the first test's fixture stops the rig again:
    that stop must leave the new rig alone (a CI run lost the other worker's rig to it).  The directory's rig.json
    says whose the slot is; stop's effects are recorded, not run."""
    from m2p_sandbox import rig as sandbox

    monkeypatch.setenv("M2P_SANDBOX_ROOT", str(tmp_path))
    done: list[str] = []
    monkeypatch.setattr(sandbox, "_supervisors", lambda rig_dir: done.append(f"looked {rig_dir.name}") or [])
    monkeypatch.setattr(sandbox, "teardown", lambda rig_dir: done.append(f"teardown {rig_dir.name}"))
    slot_dir = sandbox.rigs_dir() / "m2p00012"
    slot_dir.mkdir(parents=True)
    rig = functools.partial(_rig_of_slot_12, slot_dir)

    first, later = rig("short1", 17856), rig("flaky1", 17862)
    later.save()  # the slot is the other worker's rig now
    sandbox.stop(first)
    assert done == []
    first.save()  # the slot still its own: stopped as before
    sandbox.stop(first)
    assert done == ["looked m2p00012", "teardown m2p00012"]


def test_a_wait_for_a_stopped_rig_never_believes_the_rig_that_took_its_slot(monkeypatch, tmp_path):
    """A test stops its rig and waits for it to say why; meanwhile another worker's rig takes the slot (same
    address, key path and directory) and answers SSH: the wait must raise with the first rig's own story, not log
    into the other one (a four-worker run: 'DID NOT RAISE').  The logins and supervisors are stand-ins here."""
    from m2p_sandbox import rig as sandbox

    slot_dir = _slot_12_with_sshd(monkeypatch, tmp_path, logs_in=True)
    rig = functools.partial(_rig_of_slot_12, slot_dir)

    keep, other = rig("keep1", 17856), rig("flaky1", 17862)
    sandbox.note_end(slot_dir, sandbox.taken_mark(keep))
    sandbox.note_end(slot_dir, "stop asked by pid 17856 (m2p_sandbox down)")
    sandbox.note_end(slot_dir, "nspawn exit 0 (as asked)")
    sandbox.note_end(slot_dir, sandbox.taken_mark(other))
    sandbox.note_end(slot_dir, "stop asked by pid 17862 (someone else's)")
    other.save()
    with pytest.raises(SandboxError) as raised:
        sandbox.wait_ssh(keep, timeout=5)
    said = str(raised.value)
    assert "keep1 (m2p00012) stopped while booting" in said and "m2p_sandbox down" in said, said
    assert "nspawn exit 0" in said and "someone else's" not in said and "flaky1" not in said, said
    keep.save()  # the slot its own again (a reboot of the same rig): a login is believed
    sandbox.wait_ssh(keep, timeout=5)


def test_a_rig_whose_user_sessions_unit_failed_is_given_up_at_once_for_the_retry(monkeypatch, tmp_path):
    """sshd answers, PAM refuses every login (/run/nologin kept: systemd-user-sessions.service failed inside the
    rig): the wait says so with the unit's journal within seconds, for boot's retry, instead of the whole boot
    timeout.  A rig still booting (the unit not failed) is waited for.  The rig's inside is a stand-in here."""
    from m2p_sandbox import rig as sandbox

    slot_dir = _slot_12_with_sshd(monkeypatch, tmp_path, logs_in=False)
    rig = _rig_of_slot_12(slot_dir, "us1", 17856)
    rig.save()
    journal = "systemd-user-sessions.service: Main process exited, code=exited, status=1/FAILURE"
    failed = {"now": False}

    def inside(r, script):
        assert "systemctl is-failed --quiet systemd-user-sessions.service" in script
        return subprocess.CompletedProcess([], 0 if failed["now"] else 1, journal if failed["now"] else "", "")

    monkeypatch.setattr(sandbox, "_inside", inside)
    monkeypatch.setattr(sandbox, "_inside_state", lambda r: "(inside)")
    with pytest.raises(SandboxError, match="not SSH-ready after 1s"):
        sandbox.wait_ssh(rig, timeout=1)  # still booting: waited out
    failed["now"] = True
    with pytest.raises(SandboxError, match=r"us1 \(m2p00012\) refuses logins for good: systemd-user-sessions\.service "
                                           r"failed inside it \(/run/nologin stays\): .*status=1/FAILURE"):
        sandbox.wait_ssh(rig, timeout=30)


def test_a_stop_never_tears_down_the_rig_that_took_the_slot_while_it_waited(monkeypatch, tmp_path):
    """A stop signals the rig's supervisor and waits for it; the supervisor tears its rig down and frees the slot,
    and another worker's rig takes it before the stop's own teardown runs: that teardown must not touch the new rig
    (a CI run: "could not unmount .../merged ()", the new rig's root mounted there meanwhile).  The supervisor and
    the other worker are stand-ins here."""
    from m2p_sandbox import processes
    from m2p_sandbox import rig as sandbox

    monkeypatch.setenv("M2P_SANDBOX_ROOT", str(tmp_path))
    slot_dir = sandbox.rigs_dir() / "m2p00012"
    slot_dir.mkdir(parents=True)
    mine, theirs = _rig_of_slot_12(slot_dir, "det1", 17856), _rig_of_slot_12(slot_dir, "flaky1", 17862)
    torn: list[str] = []
    monkeypatch.setattr(sandbox, "_supervisors", lambda rig_dir: [4242])
    monkeypatch.setattr(sandbox, "teardown", lambda rig_dir: torn.append(Rig.from_dir(rig_dir).name))
    monkeypatch.setattr(processes, "kill_all", lambda pids, sig: theirs.save())  # torn down, slot taken, meanwhile
    monkeypatch.setattr(processes, "wait_gone", lambda pids, timeout: [])
    Rig = sandbox.Rig
    mine.save()
    sandbox.stop(mine, at_once=True)
    assert torn == []
    monkeypatch.setattr(processes, "kill_all", lambda pids, sig: None)  # the slot still its own: torn down as before
    mine.save()
    sandbox.stop(mine)
    assert torn == ["det1"]
