"""Every Kubernetes manifest m2p ships, rendered and validated against the official schemas."""


import jinja2
import kubernetes_validate
import pytest
import yaml

from miner2provider.core import collection

ROOT = collection.root()
TEMPLATE = ROOT / "roles/nvidia_device_plugin/templates/nvidia-device-plugin.yaml.j2"
DEFAULTS = collection.role_defaults("nvidia_device_plugin")
K8S_VERSION = "1.35"  # the pinned k3s line (v1.35.x)


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


# -- the time-share objects (roles/timeshare_agent/templates) ---------------------------

AGENT_ROLE = ROOT / "roles/timeshare_agent"
AGENT_DEFAULTS = collection.role_defaults("timeshare_agent")


def render_timeshare(template, node="rig01", gpus=6):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    text = env.from_string((AGENT_ROLE / "templates" / template).read_text()).render(
        ansible_managed="test", **{**AGENT_DEFAULTS, "timeshare_agent_node_name": node,
                                   "timeshare_agent_gpu_count": gpus})
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("template", ["m2p-timeshare.yaml.j2", "m2p-agent-rbac.yaml.j2"])
def test_timeshare_manifests_validate(template):
    for doc in render_timeshare(template):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_no_object_holds_idle_mining_gpus():
    """Akash counts every scheduled pod's GPU requests as allocated: the time-share's cluster
    objects request no GPU and make no pod at all (the first design's placeholder did)."""
    kinds = [d["kind"] for t in ("m2p-timeshare.yaml.j2", "m2p-agent-rbac.yaml.j2") for d in render_timeshare(t)]
    assert not {"DaemonSet", "Deployment", "Pod", "PriorityClass"} & set(kinds)


def test_agent_identity_is_least_privilege():
    docs = render_timeshare("m2p-agent-rbac.yaml.j2", node="rig07")
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "resourceNames": ["rig07"],
                              "verbs": ["get", "patch"]}]
    (_, pods) = render_timeshare("m2p-timeshare.yaml.j2")
    assert pods["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert {b["roleRef"]["name"] for b in bindings} == {"m2p-agent-rig07", "m2p-agent-pods"}
    assert all(b["subjects"] == [{"kind": "ServiceAccount", "name": "m2p-agent-rig07", "namespace": "m2p-system"}]
               for b in bindings)
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert secret["type"] == "kubernetes.io/service-account-token"
