"""After convert.yml (twice): real state on the HiveOS-layout server and the plain agent."""

import json
import os
import re

import pytest
import testinfra
import yaml

from m2p_sandbox import flavours, pythons
from miner2provider.fleet.bundle import pins

K3S_VERSION = pins.K3S_VERSION  # the k3s_install role's pin
TOOLKIT = ["libnvidia-container1", "libnvidia-container-tools", "nvidia-container-toolkit-base",
           "nvidia-container-toolkit"]


def name(host):
    return host.backend.get_hostname()


def other(hostname):
    inventory = os.environ["MOLECULE_INVENTORY_FILE"]
    return testinfra.get_host(f"ansible://{hostname}?ansible_inventory={inventory}")


def journal(host, unit):
    with host.sudo():
        return host.run(f"journalctl -u {unit} --no-pager -n 40").stdout


def test_toolkit_installed_held_and_hardened(host):
    with host.sudo():
        for pkg in TOOLKIT:
            assert host.package(pkg).version == "1.17.8-1"
        assert set(TOOLKIT) <= set(host.check_output("apt-mark showhold").split())
        config = host.file("/etc/nvidia-container-runtime/config.toml").content_string
    assert "\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n" in config
    assert "\naccept-nvidia-visible-devices-as-volume-mounts = true\n" in config
    # The keys went above the first table, where TOML top-level keys must be.
    assert config.index("accept-nvidia-visible-devices-as-volume-mounts = true") < config.index("[nvidia-container-cli]")


def test_cdi_spec_lists_every_gpu(host):
    spec = yaml.safe_load(host.file("/etc/cdi/nvidia.yaml").content_string)
    names = [d["name"] for d in spec["devices"]]
    expected = {"conv-hive": ["0", "1", "all"]}.get(name(host), ["0", "all"])
    assert [n for n in names if not n.startswith("GPU-")] == expected
    # and by UUID (the runtime in CDI mode looks up the device plugin's UUIDs)
    assert len([n for n in names if n.startswith("GPU-")]) == len(expected) - 1
    assert spec["containerEdits"]["hooks"][0]["hookName"] == "createRuntime"  # m2p's gate


def test_unattended_upgrades_keep_off_nvidia(host):
    text = host.file("/etc/apt/apt.conf.d/51m2p-no-unattended-nvidia").content_string
    assert '"nvidia-";' in text and '"libnvidia-";' in text


def test_k3s_runs_with_the_pinned_binary_and_sees_the_nvidia_runtime(host):
    unit = "k3s" if name(host) == "conv-hive" else "k3s-agent"
    svc = host.service(unit)
    assert svc.is_enabled and svc.is_running, journal(host, unit)
    assert K3S_VERSION in host.check_output("/usr/local/bin/k3s --version")
    with host.sudo():
        generated = host.file("/var/lib/rancher/k3s/agent/etc/containerd/config.toml").content_string
        config = host.file("/etc/rancher/k3s/config.yaml")
        assert config.mode == 0o600
        assert yaml.safe_load(config.content_string)["node-name"] == name(host)
    # k3s found the toolkit's runtime when it started: the toolkit came first.
    assert 'runtimes."nvidia"]' in generated and "DO NOT EDIT" in generated


def test_agent_joined_with_a_one_time_token_kept_out_of_argv():
    """The worker joined with a bootstrap token its server made for it (k3s token create: K10<CA hash>::<id>.<secret>)
    and deleted once it joined; neither the server token nor the server's long-lived agent token is on the worker."""
    agent, server = other("conv-plain"), other("conv-hive")
    with server.sudo():
        server_token = server.file("/var/lib/rancher/k3s/server/token").content_string.strip()
        agent_token = server.file("/var/lib/rancher/k3s/server/agent-token").content_string.strip()
        made = json.loads(server.file("/var/lib/rancher/k3s/server/m2p-standin-bootstrap-tokens.json").content_string)
    assert "::node:" in agent_token
    with agent.sudo():
        env = agent.file("/etc/systemd/system/k3s-agent.service.env")
        assert env.mode == 0o600 and env.user == "root"
        joined = re.fullmatch(r"K3S_TOKEN=K10([0-9a-f]{64})::([a-z0-9]{6})\.([a-z0-9]{16})\n", env.content_string)
        pid = agent.check_output("systemctl show -p MainPID --value k3s-agent")
        cmdline = agent.file(f"/proc/{pid}/cmdline").content_string
        config = yaml.safe_load(agent.file("/etc/rancher/k3s/config.yaml").content_string)
        for secret in (server_token.split("::")[-1], agent_token.split("::")[-1]):
            assert agent.run(f"grep -rlF {secret} /etc /var/lib /opt /root /home").stdout == ""
    assert joined and joined[1] == server_token.split("::")[0][3:], env.content_string
    assert f"bootstrap-token-{joined[2]}" not in made, made  # deleted on the server once the worker joined
    assert joined[3] not in cmdline
    assert config["server"] == "https://10.213.0.2:6443" or config["server"].endswith(":6443")


def test_device_plugin_manifest_on_the_server_only(host):
    path = "/var/lib/rancher/k3s/server/manifests/m2p-nvidia-device-plugin.yaml"
    with host.sudo():
        f = host.file(path)
        if name(host) != "conv-hive":
            assert not f.exists
            return
        docs = list(yaml.safe_load_all(f.content_string))
    kinds = {d["kind"]: d for d in docs}
    assert kinds["RuntimeClass"]["metadata"]["name"] == "nvidia" and kinds["RuntimeClass"]["handler"] == "nvidia"
    pod = kinds["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"m2p.io/nvidia-device-plugin": "true"}


def test_gpu_labels_from_the_cards_the_rig_has(host):
    labels = json.loads(host.file("/var/lib/m2p/node-labels.json").content_string)
    model, count = {"conv-hive": ("rtx3090", "2"), "conv-plain": ("rtx3060", "1")}[name(host)]
    assert labels[f"akash.network/capabilities.gpu.vendor.nvidia.model.{model}"] == count
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["m2p.io/nvidia-device-plugin"] == "true"
    registration = yaml.safe_load(host.file("/etc/rancher/k3s/config.yaml.d/60-m2p-gpu-labels.yaml").content_string)
    assert f"nvidia.com/gpu.count={count}" in registration["node-label"]


MINING_OS = {"conv-hive": ("hiveos", ["hive.service"])}  # autostart units m2p records


def test_mining_config_untouched_and_miner_still_mining(host):
    if name(host) not in MINING_OS:
        pytest.skip("a rig without a mining OS")
    kind, autostart = MINING_OS[name(host)]
    assert flavours.mining_problems(host, kind) == []
    with host.sudo():
        before = json.loads(host.file("/var/lib/m2p/mining_os/before.json").content_string)
    assert before == {"mining_os": kind, "miner_running": True, "autostart_enabled": autostart, "holds_added": []}


def test_fingerprint_records_what_convert_left(host):
    """The next `m2p convert` skips this rig only if every watched line still reads the same."""
    with host.sudo():
        record = json.loads(host.file("/var/lib/m2p/fingerprint.json").content_string)
        watch = host.file("/var/lib/m2p/fingerprint.watch").content_string.splitlines()
        config_sha = host.check_output("sha256sum /etc/rancher/k3s/config.yaml").split()[0]
    state = dict(line.split(" ", 2)[1:] for line in record["state"])
    assert len(record["state"]) == len(watch)
    assert state["/etc/rancher/k3s/config.yaml"] == config_sha
    unit = "k3s.service" if name(host) == "conv-hive" else "k3s-agent.service"
    assert state[unit] == "active enabled"
    assert state["nvidia-container-toolkit"] == "1.17.8-1 hi"  # installed and held
    assert record["gpus"].startswith("driver 550.127.05; ")  # a recent driver is kept (role nvidia_driver)
    assert not host.file("/var/log/nvidia-driver-update.log").exists  # HiveOS's driver tool never ran
    assert record["inputs"] == ""  # converged by Molecule, not by m2p: the next m2p convert runs in full


def test_the_python38_rig_has_no_newer_python(host):
    """conv-hive is booted as HiveOS 0.6-227 (Ubuntu 20.04): python3 3.8 and nothing newer."""
    if name(host) != "conv-hive":
        pytest.skip("another rig")
    pythons.assert_only(host, "3.8")
