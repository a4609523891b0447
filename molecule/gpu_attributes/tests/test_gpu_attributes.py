"""Role gpu_attributes: the labels of the cards the rig has, for k3s and for the live node."""

import json

import pytest
import yaml

# The rig is on no marketplace (m2p_marketplace: none, molecule.yml): m2p's own labels and NVIDIA's only; a
# marketplace's labels (Akash's capabilities.gpu...) would offer time slices it sells as whole GPUs (issue 54).
EXPECTED = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.count": "2",
    "nvidia.com/device-plugin.config": "ts2",
    "m2p.io/nvidia-device-plugin": "true",
    "m2p.io/gpu.model.rtx3090": "1",
    "m2p.io/gpu.model.rtx3080": "1",
    "m2p.io/gpu-models": "2",
    "m2p.io/gpu-db": "known",
    "m2p.io/schedule": "night-lease",
}


def name(host) -> str:
    return host.backend.get_hostname()


def test_live_node_label_set(host):
    if name(host) != "ga-hive":
        pytest.skip("another rig")
    labels = json.loads(host.file("/var/lib/m2p/node-labels.json").content_string)
    assert {k: labels.get(k) for k in EXPECTED} == EXPECTED
    assert [k for k in labels if not k.startswith(("m2p.io/", "nvidia.com/"))] == []
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-3090"


def test_k3s_registers_the_same_labels(host):
    if name(host) != "ga-hive":
        pytest.skip("another rig")
    text = host.file("/etc/rancher/k3s/config.yaml.d/60-m2p-gpu-labels.yaml").content_string
    registered = dict(item.split("=", 1) for item in yaml.safe_load(text)["node-label"])
    assert registered == json.loads(host.file("/var/lib/m2p/node-labels.json").content_string)


def test_a_lost_card_leaves_the_labels_as_they_were_and_says_why(host):
    """nvidia-smi stops at a lost card and lists none: labels made from that would take every card off the market."""
    if name(host) != "ga-lost":
        pytest.skip("another rig")
    before = '{"nvidia.com/gpu.count": "2", "m2p.io/by": "the last convert"}\n'  # prepare.yml, from molecule.yml
    assert host.file("/var/lib/m2p/node-labels.json").content_string == before
    assert host.file("/etc/rancher/k3s/config.yaml.d/60-m2p-gpu-labels.yaml").content_string == before
    with host.sudo():
        refusal = host.file("/root/m2p-molecule-refusal.txt").content_string
    assert "nvidia-smi did not list this rig's GPUs (driver-error: Unable to determine the device handle" in refusal
    assert "GPU is lost" in refusal and "left as they were" in refusal
