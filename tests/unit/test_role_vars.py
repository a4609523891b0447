"""role_vars: what one rig's settings mean for every rig's role variables (pure)."""

from miner2provider.core import collection
from miner2provider.fleet.role_vars import Rig, RunInputs, role_vars

K3S_DIR = collection.role_defaults("k3s")["k3s_data_dir"]  # the k3s role's default, read as m2p reads it


def rig(name, groups=(), **settings):
    return Rig(name, f"10.0.0.{len(name)}", tuple(groups), settings)


def test_an_agent_joins_the_server_and_finds_its_folders_on_the_servers_data_dir():
    """The defect this module replaced: the agent read the default paths of a server on a data disk."""
    server = rig("srv", ["k3s_server"], m2p_data_dir="/mnt/ssd/k3s/")
    agent = rig("agent1", ["k3s_agent"])
    out = role_vars([server, agent], K3S_DIR)
    assert out["agent1"]["k3s_agent_server_host"] == "srv"
    assert out["agent1"]["k3s_agent_server_url"] == f"https://{server.address}:6443"
    assert out["agent1"]["timeshare_agent_server_manifests_dir"] == "/mnt/ssd/k3s/server/manifests"
    assert out["agent1"]["timeshare_agent_api_server"] == f"https://{server.address}:6443"
    assert out["agent1"]["timeshare_agent_ca_file"] == f"{K3S_DIR}/agent/server-ca.crt"
    assert "k3s_data_dir" not in out["agent1"]  # the agent's own data dir: the role's default
    assert out["srv"]["k3s_data_dir"] == out["srv"]["preflight_data_dir"] == "/mnt/ssd/k3s/"
    assert out["srv"]["nvidia_device_plugin_manifests_dir"] == "/mnt/ssd/k3s/server/manifests"
    assert out["srv"]["fingerprint_extra_files"] == ["/mnt/ssd/k3s/server/manifests/m2p-nvidia-device-plugin.yaml"]
    assert out["srv"]["timeshare_agent_api_server"] == "https://127.0.0.1:6443"
    assert out["srv"]["timeshare_agent_ca_file"] == "/mnt/ssd/k3s/server/tls/server-ca.crt"
    assert out["agent1"]["fingerprint_extra_files"] == []
    # Tenant data follows k3s's onto the data disk: kubelet's root too (pods' volumes and secrets).
    assert out["srv"]["k3s_kubelet_root_dir"] == "/mnt/ssd/k3s/kubelet"
    assert "k3s_kubelet_root_dir" not in out["agent1"]  # its own data on the role's default: kubelet's default


def test_only_the_marketplaces_lease_pods_are_leases_to_the_agent():
    from miner2provider.market import AKASH

    out = role_vars([rig("a"), rig("b", m2p_marketplace="none")], K3S_DIR)
    assert out["a"]["timeshare_agent_lease_label"] == AKASH.lease_label
    assert out["a"]["timeshare_agent_system_namespaces"] == list(AKASH.system_namespaces)
    assert (out["b"]["timeshare_agent_lease_label"], out["b"]["timeshare_agent_system_namespaces"]) == ("", [])


def test_settings_reach_their_role_variables():
    out = role_vars([rig("r", m2p_allow_driver_upgrade=True, m2p_min_free_disk_gb=5, m2p_min_ram_mb=2048,
                         m2p_miner_unit="miner.service", m2p_agent_ca_file="/etc/ca.crt")], K3S_DIR)["r"]
    assert out["nvidia_driver_allow_upgrade"] is True
    assert (out["preflight_min_free_disk_gb"], out["preflight_min_ram_mb"]) == (5, 2048)
    assert out["mining_os_miner_unit"] == "miner.service"
    assert out["timeshare_agent_ca_src"] == "/etc/ca.crt"
    assert "preflight_min_free_disk_gb" not in role_vars([rig("r")], K3S_DIR)["r"]  # unset: the role's default


def test_the_inventorys_own_role_variables_win():
    out = role_vars([rig("r", m2p_allow_driver_upgrade=True, nvidia_driver_allow_upgrade=False)], K3S_DIR)["r"]
    assert "nvidia_driver_allow_upgrade" not in out  # the inventory's value goes to Ansible as it is


def test_agents_of_an_outside_server_and_agents_without_a_server():
    ext = rig("ext", ["k3s_agent"], m2p_k3s_server_url="https://k3s.example:6443")
    lone = rig("lone", ["k3s_agent"])
    out = role_vars([rig("srv", ["k3s_server"]), ext], K3S_DIR)
    assert out["ext"]["k3s_agent_server_url"] == "https://k3s.example:6443"
    assert out["ext"]["k3s_agent_server_host"] == out["ext"]["timeshare_agent_server_host"] == ""
    assert out["ext"]["timeshare_agent_api_server"] == "https://k3s.example:6443"
    alone = role_vars([lone], K3S_DIR)["lone"]
    assert alone["k3s_agent_server_host"] == "" and alone["timeshare_agent_api_server"] == ""


def test_time_slicing_lists_every_value_in_the_fleet_on_every_server():
    rigs = [rig("a", ["k3s_server"], m2p_time_slicing_replicas=4), rig("b", ["k3s_agent"]),
            rig("c", ["k3s_agent"], m2p_time_slicing_replicas=2)]
    out = role_vars(rigs, K3S_DIR)
    assert out["a"]["nvidia_device_plugin_time_slicing"] == {"ts2": 2, "ts4": 4}
    assert (out["a"]["gpu_attributes_device_plugin_config"], out["b"]["gpu_attributes_device_plugin_config"],
            out["c"]["gpu_attributes_device_plugin_config"]) == ("ts4", "", "ts2")
    assert "timeshare_agent_gpu_replicas" not in out["a"]  # leases get whole GPUs: nothing counts slices


def test_schedule_files_and_api_server_of_the_command_line():
    rigs = [rig("a", m2p_schedule="schedules/lease-first.yml", m2p_agent_api_server="https://inv:6443")]
    plain = role_vars(rigs, K3S_DIR)["a"]
    assert plain["timeshare_agent_schedule_src"] == "schedules/lease-first.yml"
    assert plain["gpu_attributes_extra_labels"] == {"schedule": "lease-first"}
    assert plain["timeshare_agent_api_server"] == "https://inv:6443"
    run = role_vars(rigs, K3S_DIR, RunInputs({"a": "/abs/lease-first.yml"}, "https://cli:6443"))["a"]
    assert run["timeshare_agent_schedule_src"] == "/abs/lease-first.yml"
    assert run["timeshare_agent_api_server"] == "https://cli:6443"


def test_every_derived_variable_is_a_role_variable():
    """A derived name that no role declares would be silently ignored by Ansible."""
    rigs = [rig("a", ["k3s_server"], m2p_data_dir="/d", m2p_schedule="s.yml", m2p_time_slicing_replicas=2,
                **{name: "x" for name in ("m2p_miner_unit", "m2p_agent_ca_file")}),
            rig("b", ["k3s_agent"]), rig("c", ["k3s_agent"], m2p_k3s_server_url="https://x:6443")]
    options = collection.role_options()
    for name, values in role_vars(rigs, K3S_DIR).items():
        assert set(values) <= set(options), (name, set(values) - set(options))


def test_the_agent_learns_the_marketplaces_own_namespaces_from_the_marketplace():
    """The agent names no marketplace: role_vars hands it the marketplace's namespaces (market/)."""
    from miner2provider.market import marketplace

    out = role_vars([rig("r"), rig("own", m2p_marketplace="none")], K3S_DIR)
    assert out["r"]["timeshare_agent_system_namespaces"] == list(marketplace().system_namespaces) == ["akash-services"]
    assert out["own"]["timeshare_agent_system_namespaces"] == []
