"""Role nvidia_container_toolkit: pinned packages held, hardened config, CDI spec per GPU."""

import pytest
import yaml

from m2p_sandbox import pythons

TOOLKIT = ["libnvidia-container1", "libnvidia-container-tools", "nvidia-container-toolkit-base",
           "nvidia-container-toolkit"]
GPUS = {"ct-hive": 2, "ct-plain": 1}


def name(host):
    return host.backend.get_hostname()


def test_pinned_packages_installed_held_and_marked_as_m2ps(host):
    with host.sudo():
        assert {p: host.package(p).version for p in TOOLKIT} == {p: "1.17.8-1" for p in TOOLKIT}
        assert set(host.check_output("apt-mark showhold").split()) == set(TOOLKIT)
        # revert purges only what m2p installed: the marker says so.
        assert host.file("/var/lib/m2p/nvidia_container_toolkit.installed-by-m2p").exists


def test_unprivileged_containers_cannot_ask_for_gpus_by_envvar(host):
    config = host.file("/etc/nvidia-container-runtime/config.toml").content_string
    assert "\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n" in config
    assert config.count("accept-nvidia-visible-devices-envvar-when-unprivileged") == 1


def test_cdi_spec_names_each_gpu_by_index_and_uuid_and_all(host):
    """The device plugin hands GPUs over by UUID (deviceIDStrategy: uuid); the runtime in CDI
    mode looks those names up in this spec."""
    spec = yaml.safe_load(host.file("/etc/cdi/nvidia.yaml").content_string)
    assert spec["kind"] == "nvidia.com/gpu"
    uuids = [line.rsplit("(UUID: ", 1)[1].rstrip(")") for line in host.check_output("nvidia-smi -L").splitlines()]
    assert len(uuids) == GPUS[name(host)]
    assert [d["name"] for d in spec["devices"]] == [
        n for i, u in enumerate(uuids) for n in (str(i), u)] + ["all"]


def test_every_gpu_container_passes_m2ps_gate_and_the_runtime_uses_the_spec(host):
    spec = yaml.safe_load(host.file("/etc/cdi/nvidia.yaml").content_string)
    gate = spec["containerEdits"]["hooks"][0]
    assert gate["hookName"] == "createRuntime" and gate["path"] == "/bin/sh"
    # No time-share agent on these rigs (run as runc would: an empty environment, the state on
    # stdin): a plain rig's container passes; on the HiveOS rig the miner holds the GPUs and
    # nothing could stop it, so the container does not start.
    assert gate["args"][:2] == ["sh", "-c"]
    with host.sudo():
        run = host.run("echo '{\"id\": \"c1\", \"pid\": 1}' | env -i /bin/sh -c %s", gate["args"][2])
    if name(host) == "ct-plain":
        assert run.rc == 0, run.stderr
    else:
        assert run.rc == 1 and "outside every container holds a GPU, and no m2p time-share agent" in run.stderr
    config = host.file("/etc/nvidia-container-runtime/config.toml").content_string
    assert '\nmode = "cdi"\n' in config and config.count("mode =") == 1


def test_nvidias_own_cdi_refresher_is_masked_and_the_spec_it_left_is_gone(host):
    """Toolkit 1.18+'s nvidia-cdi-refresh writes a spec without m2p's gate to /var/run/cdi, which outranks /etc/cdi:
    masked on every rig (its units not installed here: masked before they exist), and the one prepare.yml left on
    ct-plain removed; the note tells revert that the mask is m2p's."""
    with host.sudo():
        for unit in ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service"):
            assert host.run("systemctl is-enabled %s", unit).stdout.strip() == "masked", unit
        assert not host.file("/var/run/cdi/nvidia.yaml").exists
        assert host.file("/var/lib/m2p/nvidia-cdi-refresh.masked-by-m2p").exists


def test_the_python38_rig_has_no_newer_python(host):
    """ct-hive is booted as HiveOS 0.6-227 (Ubuntu 20.04): python3 3.8 and nothing newer."""
    if name(host) != "ct-hive":
        pytest.skip("another rig")
    pythons.assert_only(host, "3.8")
