"""Every Kubernetes manifest m2p ships, rendered and validated against the official schemas."""

from pathlib import Path

import jinja2
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "roles/nvidia_device_plugin/templates/nvidia-device-plugin.yaml.j2"
DEFAULTS = yaml.safe_load((ROOT / "roles/nvidia_device_plugin/defaults/main.yml").read_text())
K8S_VERSION = "1.33"  # the pinned k3s line (v1.33.x)


def render(**overrides):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    text = env.from_string(TEMPLATE.read_text()).render(ansible_managed="test", **{**DEFAULTS, **overrides})
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("slicing", [{}, {"ts4": 4}, {"ts2": 2, "ts8": 8}], ids=["default", "ts4", "two"])
def test_device_plugin_manifests_validate(slicing):
    docs = render(nvidia_device_plugin_time_slicing=slicing)
    assert [d["kind"] for d in docs] == ["RuntimeClass", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                         "ConfigMap", "DaemonSet"]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_time_slicing_configs_are_valid_plugin_configs():
    configs = render(nvidia_device_plugin_time_slicing={"ts4": 4})[4]["data"]
    assert set(configs) == {"default", "ts4"}
    ts4 = yaml.safe_load(configs["ts4"])
    assert ts4["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert "sharing" not in yaml.safe_load(configs["default"])


def test_a_broken_manifest_is_caught():
    daemonset = render()[5]
    del daemonset["spec"]["selector"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, K8S_VERSION, strict=True)
