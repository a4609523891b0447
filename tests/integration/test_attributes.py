"""`m2p attributes -i` over SSH against sandbox rigs with the GPU stand-in; a card swap shows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from m2p_sandbox import gpu_standin
from m2p_sandbox import rig as sandbox

from .conftest import run, ssh

pytestmark = pytest.mark.integration
MODEL = "akash.network/capabilities.gpu.vendor.nvidia.model."


def attributes(inv, known_hosts):
    proc = subprocess.run([sys.executable, "-m", "miner2provider", "attributes", "-i", str(inv), "--accept-new",
                           "--known-hosts", str(known_hosts), "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_attributes_follow_the_cards_on_the_rigs(boot_rigs, tmp_path):
    (r,) = boot_rigs(sandbox.RigSpec("swap1", "hiveos", ("rtx3080", "rtx3080")))
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"m2p_location_region": "eu-central"}, "hosts": {
        "swap1": {"ansible_host": r.address, "ansible_user": r.user, "ansible_ssh_private_key_file": r.key_file}}}}))
    first = attributes(inv, tmp_path / "kh")
    labels = first["rigs"]["swap1"]["labels"]
    assert labels[MODEL + "rtx3080"] == "2" and labels[MODEL + "rtx3080.ram.10Gi"] == "2"
    assert {"key": "location-region", "value": "eu-central"} in first["attributes"]
    # 10de:2206 is the original RTX 3080, which Akash's list lacks: flagged with the entry to add.
    assert first["card_list_additions"] == [
        '"2206": {"name": "rtx3080", "interface": "PCIe", "memory_size": "10Gi"}']

    # The owner swaps one card for an RTX 4090: the next run sees two models.
    swapped = json.dumps(gpu_standin.rig_config("swap1", ["rtx3080", "rtx4090"]))
    client = ssh(r)
    try:
        code, out = run(client, f"echo '{swapped}' | sudo tee /etc/m2p-standin/gpus.json >/dev/null")
        assert code == 0, out
    finally:
        client.close()
    second = attributes(inv, tmp_path / "kh")
    labels = second["rigs"]["swap1"]["labels"]
    assert labels[MODEL + "rtx3080"] == "1" and labels[MODEL + "rtx4090"] == "1"
    assert any("mixed GPU models" in w for w in second["rigs"]["swap1"]["warnings"])
