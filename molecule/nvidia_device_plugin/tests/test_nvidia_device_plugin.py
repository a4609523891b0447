"""Role nvidia_device_plugin: what k3s will apply, read back from the rig."""

import yaml

MANIFEST = "/var/lib/rancher/k3s/server/manifests/m2p-nvidia-device-plugin.yaml"


def documents(host):
    with host.sudo():
        f = host.file(MANIFEST)
        assert f.mode == 0o600 and f.user == "root"
        return {d["kind"]: d for d in yaml.safe_load_all(f.content_string)}


def test_runtime_class_and_daemonset_use_the_nvidia_runtime(host):
    docs = documents(host)
    assert docs["RuntimeClass"]["handler"] == "nvidia"
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    # Scheduled on m2p's own label; a mining window cordons the node, which a DaemonSet's pod
    # tolerates by itself (the first design's m2p.io/mining taint is gone, and its toleration).
    assert pod["nodeSelector"] == {"m2p.io/nvidia-device-plugin": "true"}
    assert [t["key"] for t in pod["tolerations"]] == ["nvidia.com/gpu"]


def test_time_slicing_config_for_the_rigs_replicas(host):
    configs = documents(host)["ConfigMap"]["data"]
    assert sorted(configs) == ["default", "ts4"]
    ts4 = yaml.safe_load(configs["ts4"])["sharing"]["timeSlicing"]["resources"]
    assert ts4 == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert "sharing" not in yaml.safe_load(configs["default"])
