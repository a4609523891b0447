"""detect/drift.py and fleet/fingerprint.py: which rigs convert runs on, judged from the fingerprint the probe read.  Pure."""

import hashlib
import json
import subprocess
from pathlib import Path

from miner2provider.detect.drift import reasons_to_run
from miner2provider.detect.facts.base import Output
from miner2provider.detect.facts.fingerprint import RECORD, WATCH, FingerprintFact, gpu_signature, state_script
from miner2provider.detect.facts.gpu import GpusFact
from miner2provider.fleet.fingerprint import inputs_digest

CASES = Path(__file__).parent / "facts" / "fingerprint"
# The two stand-in RTX 3090s of the sandbox rig the fingerprint cases were captured on.
GPU_ROWS = ("0, NVIDIA GeForce RTX 3090, GPU-1, 00000000:01:00.0, 0x220410DE, 0x38801462, 24576, 550.127.05\n"
            "1, NVIDIA GeForce RTX 3090, GPU-2, 00000000:02:00.0, 0x220410DE, 0x38801462, 24576, 550.127.05\n")


def case(name):
    data = json.loads((CASES / f"{name}.json").read_text())
    return FingerprintFact.parse(Output(data["output"], data["rc"]))


def gpus(rows=GPU_ROWS):
    return GpusFact.parse(Output(rows, 0))


def test_a_converged_rig_with_the_same_inputs_is_skipped():
    fp = case("hiveos-server-converged")
    assert gpu_signature(gpus()) == fp.gpus
    assert reasons_to_run(fp, gpus(), fp.inputs) == ()


def test_changed_roles_or_settings_run_the_playbook():
    fp = case("hiveos-server-converged")
    assert reasons_to_run(fp, gpus(), "0" * 64) == ("roles, settings or bundle changed since the last convert",)
    # status judges drift only: it does not know which roles and bundle a convert would use
    assert reasons_to_run(fp, gpus(), None) == ()


def test_a_hand_edited_config_and_a_stopped_unit_are_drift():
    fp = case("hiveos-server-drifted")
    reasons = reasons_to_run(fp, gpus(), fp.inputs)
    assert len(reasons) == 2, reasons
    assert reasons[0].startswith("drift: file /etc/rancher/k3s/config.yaml: sha256 ")
    assert reasons[1] == "drift: unit k3s.service: inactive enabled (was active enabled)"


def test_a_swapped_card_or_new_driver_changes_the_gpu_signature():
    fp = case("hiveos-server-converged")
    swapped = GPU_ROWS.replace("NVIDIA GeForce RTX 3090, GPU-2", "NVIDIA GeForce RTX 3080, GPU-2", 1) \
                      .replace("0x220410DE, 0x38801462, 24576, 550.127.05\n", "0x220610DE, 0x38801462, 10240, 550.127.05\n", 2)
    reasons = reasons_to_run(fp, gpus(swapped), fp.inputs)
    assert len(reasons) == 1 and reasons[0].startswith("GPUs changed: ") and "RTX 3080" in reasons[0]
    upgraded = reasons_to_run(fp, gpus(GPU_ROWS.replace("550.127.05", "570.86.15")), fp.inputs)
    assert len(upgraded) == 1 and "driver 570.86.15" in upgraded[0]


def test_no_fingerprint_or_a_corrupt_one_runs_the_playbook():
    assert reasons_to_run(case("never-converted"), gpus(), "x") == ("no fingerprint: never converted, or reverted",)
    (reason,) = reasons_to_run(case("corrupt-record"), gpus(), "x")
    assert reason.startswith(f"no fingerprint ({RECORD} is not valid")


def test_inputs_digest_follows_settings_role_vars_groups_and_code_never_connection_or_secrets():
    settings, derived = {"m2p_data_dir": "/mnt/ssd"}, {"k3s_data_dir": "/mnt/ssd"}
    base = inputs_digest("code", settings, derived, ["farm"])
    assert base == inputs_digest("code", settings, derived, ["farm", "farm"])
    assert base != inputs_digest("code", {"m2p_data_dir": "/mnt/other"}, derived, ["farm"])
    assert base != inputs_digest("code", settings, {"k3s_data_dir": "/mnt/other"}, ["farm"])  # e.g. its server moved
    assert base != inputs_digest("code", settings, derived, ["k3s_agent"])
    assert base != inputs_digest("code2", settings, derived, ["farm"])
    # a password never enters the digest (a hash of a short password can be brute-forced)
    assert base == inputs_digest("code", {**settings, "ansible_password": "hunter2", "ansible_host": "10.0.0.9"},
                                 derived, ["farm"])


def test_the_role_and_the_probe_read_state_with_the_same_loop(tmp_path):
    """The role records with state_script(watch); the probe re-reads from the watch file.  Same lines."""
    config = tmp_path / "config.yaml"
    config.write_text("node-name: rig01\n")
    big = tmp_path / "k3s"
    big.write_bytes(b"\0" * 4096)
    watch = [f"file {config}", f"file {tmp_path / 'absent.yaml'}", f"stat {big}", "package no-such-package-m2p"]
    recorded = subprocess.run(["sh", "-s"], input=state_script(watch), capture_output=True, text=True, check=True)
    (tmp_path / "fingerprint.watch").write_text("\n".join(watch) + "\n")
    (tmp_path / "fingerprint.json").write_text(json.dumps({"inputs": "i", "gpus": "g",
                                                           "state": recorded.stdout.splitlines()}))
    command = FingerprintFact.command.replace(WATCH, str(tmp_path / "fingerprint.watch")) \
                                     .replace(RECORD, str(tmp_path / "fingerprint.json"))
    probed = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    fp = FingerprintFact.parse(Output(probed.stdout, probed.returncode))
    assert fp.present and fp.recorded == fp.current
    lines = dict(line.split(" ", 2)[1:] for line in fp.current)
    assert lines[str(config)] == hashlib.sha256(b"node-name: rig01\n").hexdigest()
    assert lines[str(tmp_path / "absent.yaml")] == "missing"
    assert lines[str(big)].startswith("4096 ")
    assert lines["no-such-package-m2p"] == "missing"
    config.write_text("node-name: rig02\n")  # drift shows up in the next probe
    again = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    fp2 = FingerprintFact.parse(Output(again.stdout, 0))
    new, old = (hashlib.sha256(f"node-name: {n}\n".encode()).hexdigest()[:12] for n in ("rig02", "rig01"))
    no_gpu = GpusFact.parse(Output("", 127))
    assert reasons_to_run(fp2, no_gpu, "i") == (f"GPUs changed: g -> {gpu_signature(no_gpu)}",
                                                f"drift: file {config}: sha256 {new} (was sha256 {old})")
