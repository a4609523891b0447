"""`m2p detect` over real SSH against sandbox rigs of each flavour, with failures mixed in."""

from __future__ import annotations

import dataclasses
import json
import secrets
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from m2p_sandbox import gpu_standin, network
from m2p_sandbox import rig as sandbox
from m2p_sandbox.bundle import build_test_bundle

from .conftest import m2p, outcomes, rig_entry, run

pytestmark = pytest.mark.integration

@pytest.fixture
def fleet(sandbox_rigs, boot_rigs, tmp_path):
    """Inventory: three good rigs, an address nobody answers on, a wrong password, a changed key."""
    locked, moved = boot_rigs(sandbox.RigSpec("locked1", "hiveos"), sandbox.RigSpec("moved1", "plain"))
    good = {name: rig_entry(sandbox_rigs[name]) for name in ("plain1", "hive1", "ms1")}
    with sandbox_ssh(sandbox_rigs["ms1"]) as client:  # msOS's client starts its miner a moment after boot
        deadline = time.monotonic() + 15
        while run(client, "sudo screen -ls minew")[0] != 0 and time.monotonic() < deadline:
            time.sleep(0.3)
    known_hosts = tmp_path / "known_hosts"
    good_inv = tmp_path / "good.yml"
    # Record every rig's key first (locked1 too, so that its failure is the password).
    good_inv.write_text(yaml.safe_dump({"all": {"hosts": {
        **good, "moved1": rig_entry(moved), "locked1": rig_entry(locked)}}}))
    first = m2p("detect", "-i", str(good_inv), "--accept-new", "--known-hosts", str(known_hosts), "--json")
    assert first.returncode == 0, first.stderr
    # moved1 is "reinstalled": a new host key replaces the one just recorded.
    key = Path(moved.dir, "merged/etc/ssh/ssh_host_ed25519_key")
    key.unlink()
    Path(str(key) + ".pub").unlink()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    with sandbox_ssh(moved) as client:
        client.exec_command("sudo systemctl restart ssh")[1].channel.recv_exit_status()
    nobody = str(network.address_for(250))  # inside the sandbox range, no rig there
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {
        "farm": {"hosts": {**good, "moved1": rig_entry(moved)}},
        "trouble": {"hosts": {
            "ghost1": {"ansible_host": nobody, "ansible_user": "user"},
            "locked1": {"ansible_host": locked.address, "ansible_user": "user",
                        "m2p_ssh_password_env": "LOCKED_PW"},
        }},
    }}}))
    return inv, known_hosts, locked


def sandbox_ssh(r: sandbox.Rig):
    from .conftest import ssh

    class _Ctx:
        def __enter__(self):
            self.c = ssh(r)
            return self.c

        def __exit__(self, *exc):
            self.c.close()

    return _Ctx()


def test_detect_recognises_rigs_and_explains_failures(fleet, tmp_path):
    inv, known_hosts, locked_rig = fleet
    env = {"LOCKED_PW": "not-the-password"}
    proc = m2p("detect", "-i", str(inv), "--known-hosts", str(known_hosts), "--json",
               "--connect-timeout", "3", env=env)
    # Three rigs failed: exit code 10 + 3.
    assert proc.returncode == 13, proc.stderr
    reports = {r["name"]: r for r in json.loads(proc.stdout)}

    plain, hive, ms = reports["plain1"], reports["hive1"], reports["ms1"]
    assert plain["facts"]["mining_os"]["kind"] == "debian"
    assert plain["status"] == "not ready"  # no GPU
    assert any(b["code"] == "no-nvidia-smi" and "no nvidia-smi" in b["sentence"] for b in plain["verdict"]["blockers"])

    assert hive["facts"]["mining_os"]["kind"] == "hiveos"
    assert hive["facts"]["mining_os"]["version"] == "0.6-229@20241231"
    assert [g["name"] for g in hive["facts"]["gpus"]["gpus"]] == ["NVIDIA GeForce RTX 3090"] * 2
    assert hive["facts"]["gpus"]["gpus"][0]["device_id"] == "2204"
    assert hive["facts"]["cuda"] == "12.4"
    assert hive["facts"]["miner"]["running"] is True
    assert hive["facts"]["python"]["version"].startswith("3.11")
    assert hive["facts"]["sudo"]["state"] == "nopasswd"

    assert ms["facts"]["mining_os"]["kind"] == "msos"
    assert ms["facts"]["mining_os"]["version"] == "1.8.6"
    assert ms["facts"]["gpus"]["gpus"][0]["name"] == "NVIDIA CMP 90HX"
    assert ms["facts"]["miner"]["sessions"] == ["screen:minerstat-console", "screen:minew"]

    assert reports["ghost1"]["failure"] in {"unreachable", "timeout"}
    assert str(network.address_for(250)) in reports["ghost1"]["error"]
    locked = reports["locked1"]
    assert locked["failure"] == "auth"
    assert locked["error"] == "authentication failed for user 'user' (tried key, agent, password)"
    assert any("default login (user 'user' with HiveOS's default password)" in w for w in locked["warnings"])
    moved = reports["moved1"]
    assert moved["failure"] == "host-key-changed"
    assert f'ssh-keygen -f "{known_hosts}" -R' in moved["error"]
    # The wrong password never appears anywhere.
    assert "not-the-password" not in proc.stdout + proc.stderr
    password_rig_gets_a_key(inv, known_hosts, locked_rig, tmp_path)


def password_rig_gets_a_key(inv: Path, known_hosts: Path, rig: sandbox.Rig, tmp_path: Path) -> None:
    """Issue 39, on locked1 (HiveOS: user logs in with a password; this one is changed from HiveOS's default):
    `m2p keys install` uses the password once to let a new controller key in, proves key login, and `detect` then
    works with an inventory that has the key and no password.  The password is in no output and no file."""
    password = "m2p-" + secrets.token_urlsafe(12)
    with sandbox_ssh(rig) as client:
        assert run(client, f"echo 'user:{password}' | sudo chpasswd")[0] == 0
    key = tmp_path / "controller" / "id_ed25519"  # missing: keys install makes it
    install = ["keys", "install", "-i", str(inv), "--limit", "locked1", "--key", str(key), "--known-hosts",
               str(known_hosts), "--json"]  # the password from the inventory's m2p_ssh_password_env
    refused = m2p(*install[:-1], env={"LOCKED_PW": password})  # no terminal to ask, no --yes: nothing made
    assert refused.returncode == 2 and "pass --yes" in refused.stderr and not key.exists(), refused.stderr
    first = m2p(*install, "--yes", env={"LOCKED_PW": password})
    assert first.returncode == 0, first.stdout + first.stderr
    assert outcomes(first)["locked1"]["message"] == "key added; key login works", first.stdout
    again = m2p(*install, "--yes", env={"LOCKED_PW": password})
    assert outcomes(again)["locked1"]["result"] == "converged", again.stdout  # one line, not two
    authorized = (rig.path / "merged/home/user/.ssh/authorized_keys").read_text()
    assert authorized.count(" m2p-login") == 1 and oct((rig.path / "merged/home/user/.ssh").stat().st_mode)[-3:] == \
        "700"
    keyed = tmp_path / "keyed.yml"
    keyed.write_text(yaml.safe_dump({"all": {"hosts": {"locked1": {
        "ansible_host": rig.address, "ansible_user": "user", "ansible_ssh_private_key_file": str(key)}}}}))
    detected = m2p("detect", "-i", str(keyed), "--known-hosts", str(known_hosts), "--json")
    assert detected.returncode == 0 and json.loads(detected.stdout)[0]["facts"]["mining_os"]["kind"] == "hiveos", \
        detected.stdout[-2000:] + detected.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    said = first.stdout + first.stderr + again.stdout + again.stderr + detected.stdout + detected.stderr
    assert password not in said and not [p for p in files if password in p.read_text(errors="replace")]


def test_detect_text_output_and_unknown_key_refusal(sandbox_rigs, tmp_path):
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"hive1": rig_entry(sandbox_rigs["hive1"])}}}))
    refused = m2p("detect", "-i", str(inv), "--known-hosts", str(tmp_path / "kh"))
    assert refused.returncode == 11
    assert "unknown host key" in refused.stdout and "--accept-new" in refused.stdout
    assert not (tmp_path / "kh").exists()  # nothing recorded without --accept-new
    ok = m2p("detect", "-i", str(inv), "--known-hosts", str(tmp_path / "kh"), "--accept-new")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "hive1 (10.213." in ok.stdout and "HiveOS 0.6-229@20241231" in ok.stdout
    assert "2 x NVIDIA GeForce RTX 3090 (10de:2204, 24576 MiB)" in ok.stdout
    assert "1 rig:" in ok.stdout


ODD_FILES = {
    # The GPU stand-in prints `N/A` for the index and `²` for the memory (nvidia-smi prints N/A
    # for fields a card or driver does not support; ² is a digit to str.isdigit, not to int).
    gpu_standin.RIG_FILE: None,  # filled from the rig's own file below
    # Files on the rig that whoever owns the rig can write: JSON nested 1,000 deep, null fields.
    "/var/lib/m2p/fingerprint.json": "[" * 1000 + "]" * 1000,
    "/var/lib/m2p/fingerprint.watch": "",  # the record is read only where convert left its list of watched files
    "/var/lib/m2p/agent/status.json": '{"mode": null, "leases": [null, 5, {"pod": 7}], "state": null}',
}


@pytest.fixture
def odd_ms1(sandbox_rigs):
    """ms1 prints odd output for a while; every file is put back as it was afterwards."""
    root = Path(sandbox_rigs["ms1"].dir, "merged")
    saved = {}
    for name, text in ODD_FILES.items():
        path = root / name.lstrip("/")
        saved[path] = path.read_bytes() if path.exists() else None
        if text is None:
            conf = json.loads(path.read_text())
            conf["gpus"][0].update({"index": "N/A", "memory.total": "\u00b2"})
            text = json.dumps(conf)
        made = [p for p in reversed(path.parents) if not p.exists()]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        saved.update({p: "dir" for p in made})
    try:
        yield
    finally:
        for path, before in saved.items():
            if before == "dir":
                continue
            if before is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(before)
        for path in sorted((p for p, b in saved.items() if b == "dir"), key=lambda p: -len(p.parts)):
            path.rmdir()


def test_one_rig_with_odd_output_never_stops_the_fleet(sandbox_rigs, odd_ms1, tmp_path):
    """detect, status and plan: the two good rigs report as always, the odd one reports what it can."""
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {n: rig_entry(sandbox_rigs[n]) for n in ("plain1", "hive1", "ms1")}}}))
    ssh_args = ["-i", str(inv), "--accept-new", "--known-hosts", str(tmp_path / "known_hosts")]
    detected = m2p("detect", *ssh_args, "--json")
    assert "internal error" not in detected.stderr, detected.stderr
    reports = {r["name"]: r for r in json.loads(detected.stdout)}
    assert set(reports) == {"plain1", "hive1", "ms1"}
    assert {n: r["error"] for n, r in reports.items() if r["failure"]} == {}
    odd = reports["ms1"]["facts"]
    assert [(g["index"], g["memory_mib"]) for g in odd["gpus"]["gpus"]] == [(0, 0)]
    assert odd["fingerprint"]["error"].endswith("is not valid: nested too deep")
    assert (odd["agent_status"]["mode"], odd["agent_status"]["leases"]) == ("unknown", [{"pod": "?", "since": ""}])
    assert reports["hive1"]["facts"]["gpus"]["gpus"][1]["memory_mib"] == 24576

    status = m2p("status", *ssh_args, "--json")
    assert "internal error" not in status.stderr, status.stderr
    rows = {r["rig"]: r for r in json.loads(status.stdout)}
    assert set(rows) == {"plain1", "hive1", "ms1"} and rows["hive1"]["gpus"] == "2 x NVIDIA GeForce RTX 3090"

    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    planned = m2p("plan", *ssh_args, "--bundle", str(bundle), "--json")
    assert "internal error" not in planned.stderr, planned.stderr[-3000:]
    results = outcomes(planned)
    assert set(results) == {"plain1", "hive1", "ms1"}, planned.stderr[-3000:]
    assert results["hive1"]["result"] == "pending", results["hive1"]
    assert results["plain1"]["result"] == "failed" and "no nvidia-smi" in results["plain1"]["message"]  # no GPU
    assert results["ms1"]["result"] == "pending", results["ms1"]  # odd, but nothing m2p cannot read


def test_a_rig_that_drips_or_floods_fails_alone_within_its_deadline(sandbox_rigs, tmp_path):
    """--command-timeout is a deadline for the whole command, not for each read, and output is capped: a rig
    sending a byte a second, or megabytes on stdout or stderr, is that rig's failure; the others finish."""
    from miner2provider.core import inventory
    from miner2provider.detect.ssh import MAX_OUTPUT, SshOptions, fan_out

    rig = sandbox_rigs["plain1"]
    scripts = {"drip": "while :; do printf x; sleep 0.5; done",
               "flood": f"head -c {MAX_OUTPUT * 2} /dev/zero",
               "flood-stderr": f"head -c {MAX_OUTPUT * 2} /dev/zero >&2; echo done",
               "good": "echo fine"}
    (tmp_path / "rigs.yml").write_text(yaml.safe_dump({"all": {"hosts": {"plain1": rig_entry(rig)}}}))
    one, = inventory.load(tmp_path / "rigs.yml").hosts
    hosts = [dataclasses.replace(one, name=name) for name in scripts]  # four "rigs" at one address
    opts = SshOptions(known_hosts=tmp_path / "kh", accept_new=True, command_timeout=4, look_for_keys=False,
                      use_agent=False)
    start = time.monotonic()
    results = {r.host.name: r for r in fan_out(hosts, lambda h: scripts[h.name], opts)}
    took = time.monotonic() - start
    assert results["drip"].failure == "command-timeout", results["drip"]
    assert results["flood"].failure == "output-too-large" and results["flood-stderr"].failure == "output-too-large"
    assert results["good"].ok and results["good"].stdout == "fine\n"
    assert took < 4 + 6, took  # the deadline, plus connecting on a loaded CI machine
