"""What each rig's role variables are, from the whole inventory's settings: pure, no I/O.

Some settings of one rig decide role variables of another: a server's ``m2p_data_dir`` is
where its agents read the join token and where the time-share objects go; the server's
address is its agents' API URL; the device plugin's config map lists every time-slicing
value in the fleet.  All of that is computed here, once, over every rig of the inventory
(never only the rigs of a ``--limit``), and the runner hands the result to the playbook as
host variables of the inventory it generates.  A role variable the inventory sets itself wins:
it is left out here, so Ansible's usual precedence (inventory over role defaults) holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from miner2provider.core.inventory import python_of
from miner2provider.core.settings import FEEDS
from miner2provider.detect.facts.tunnel import TUNNEL_INTERFACE
from miner2provider.fleet.tunnel import TunnelPlan
from miner2provider.market import of_rig

API_PORT = 6443  # k3s's supervisor and Kubernetes API


@dataclass(frozen=True)
class Rig:
    name: str
    address: str
    groups: tuple[str, ...]
    settings: Mapping[str, Any]  # the rig's inventory variables (m2p_* settings, role variables)

    @property
    def is_agent(self) -> bool:
        return "k3s_agent" in self.groups

    @property
    def joins_outside_server(self) -> bool:
        return "m2p_k3s_server_url" in self.settings


@dataclass(frozen=True)
class RunInputs:
    """What one m2p command adds to the inventory's settings."""

    schedule_files: Mapping[str, str] = field(default_factory=dict)  # rig -> absolute schedule path
    api_server: str | None = None  # m2p schedule apply --api-server
    economics_files: Mapping[str, str] = field(default_factory=dict)  # rig -> absolute economics path


def role_vars(rigs: Sequence[Rig], k3s_data_dir: str, run: RunInputs | None = None,
              sites: TunnelPlan | None = None) -> dict[str, dict[str, Any]]:
    """Each rig's role variables.  ``k3s_data_dir``: the k3s role's default data directory; ``sites``: a farm
    across sites' tunnel plan (fleet/tunnel.py), whose addresses k3s then runs on."""
    run = run or RunInputs()
    servers = [r for r in rigs if "k3s_server" in r.groups]
    slicing = sorted({n for r in rigs if (n := replicas(r)) > 1})
    out: dict[str, dict[str, Any]] = {}
    for rig in rigs:
        # The rig whose k3s serves this rig's API: itself, its inventory server, or none (outside).
        server = (rig if not rig.is_agent else None if rig.joins_outside_server
                  else servers[0] if servers else None)
        derived = {target: rig.settings[name] for name, targets in FEEDS.items() if name in rig.settings
                   for target in targets}
        if sites is not None:  # k3s runs on the tunnel: every address another member dials is a tunnel address
            server = _through(server, sites)
        derived.update(_k3s(rig, server, k3s_data_dir))
        derived.update(_over_tunnel(rig, sites))
        derived.update(_device_plugin(rig, slicing, k3s_data_dir))
        derived.update(_timeshare(rig, server, k3s_data_dir, run))
        derived.update(_python(rig))
        out[rig.name] = {k: v for k, v in derived.items() if k not in rig.settings}
    return out


def _python(rig: Rig) -> dict[str, Any]:
    named = python_of(rig.settings)
    return {"ansible_python_interpreter": named, "timeshare_agent_python": named} if named else {}


def replicas(rig: Rig) -> int:
    return int(rig.settings.get("m2p_time_slicing_replicas", 1))


def data_dir(rig: Rig, default: str) -> str:
    return str(rig.settings.get("m2p_data_dir") or default).rstrip("/") or "/"


def _k3s(rig: Rig, server: Rig | None, default: str) -> dict[str, Any]:
    # Tenant data (emptyDir volumes, secrets) follows k3s's data onto the data disk, off the USB stick.
    own = {"k3s_kubelet_root_dir": f"{data_dir(rig, default)}/kubelet"} if rig.settings.get("m2p_data_dir") else {}
    if not rig.is_agent:
        return own
    if rig.joins_outside_server or server is None:
        return {**own, "k3s_agent_server_host": ""}
    return {**own, "k3s_agent_server_host": server.name, "k3s_agent_server_url": f"https://{server.address}:{API_PORT}"}


def _through(server: Rig | None, sites: TunnelPlan) -> Rig | None:
    """The server as members reach it in a farm across sites: at its tunnel address."""
    if server is None or server.name != sites.hub.name:
        return server
    return Rig(server.name, str(sites.hub.address), server.groups, server.settings)


def _over_tunnel(rig: Rig, sites: TunnelPlan | None) -> dict[str, Any]:
    """k3s on the tunnel: the node's IP is its tunnel address and flannel's VXLAN rides the tunnel's interface;
    the server's certificate names its tunnel address too (agents dial it there)."""
    if sites is None:
        return {}
    address = str(sites.member(rig.name).address)
    own = {"k3s_node_ip": address, "k3s_flannel_iface": TUNNEL_INTERFACE}
    return {**own, "k3s_tls_san": [address]} if rig.name == sites.hub.name else own


def _device_plugin(rig: Rig, slicing: list[int], default: str) -> dict[str, Any]:
    manifests = f"{data_dir(rig, default)}/server/manifests"
    own = replicas(rig)
    schedule = rig.settings.get("m2p_schedule")
    labels = {"schedule": PurePosixPath(str(schedule)).stem} if schedule is not None else {}
    return {
        "nvidia_device_plugin_manifests_dir": manifests,
        "nvidia_device_plugin_time_slicing": {f"ts{n}": n for n in slicing},
        "gpu_attributes_device_plugin_config": f"ts{own}" if own > 1 else "",
        "gpu_attributes_extra_labels": labels,
        # A server's device plugin manifest is part of what convert applied (agents have none).
        "fingerprint_extra_files": [] if rig.is_agent else [f"{manifests}/m2p-nvidia-device-plugin.yaml"],
    }


def _timeshare(rig: Rig, server: Rig | None, default: str, run: RunInputs) -> dict[str, Any]:
    if run.api_server or "m2p_agent_api_server" in rig.settings:
        api = run.api_server or str(rig.settings["m2p_agent_api_server"])
    elif rig.joins_outside_server:
        api = str(rig.settings["m2p_k3s_server_url"])
    elif server is None:
        api = ""  # an agent with no server: the role refuses with the settings to give
    else:
        api = f"https://{'127.0.0.1' if server is rig else server.address}:{API_PORT}"
    own_dir = data_dir(rig, default)
    market = of_rig(rig.settings)  # None: m2p_marketplace none
    return {
        "timeshare_agent_schedule_src": run.schedule_files.get(rig.name, str(rig.settings.get("m2p_schedule", ""))),
        "timeshare_agent_economics_src": run.economics_files.get(rig.name, ""),
        "timeshare_agent_server_host": server.name if server else "",
        "timeshare_agent_server_manifests_dir": f"{data_dir(server, default)}/server/manifests" if server else "",
        "timeshare_agent_api_server": api,
        # m2p_marketplace none: the rig serves its owner's workloads only, and no marketplace runs there.
        "timeshare_agent_system_namespaces": list(market.system_namespaces) if market else [],
        "timeshare_agent_lease_label": market.lease_label if market else "",
        # k3s's own copy of the cluster CA on this rig.
        "timeshare_agent_ca_file": own_dir + ("/agent/server-ca.crt" if rig.is_agent else "/server/tls/server-ca.crt"),
        # The agent's identity: the rig's own kubelet (k3s writes this on every node, server or agent).
        "timeshare_agent_kubeconfig": own_dir + "/agent/kubelet.kubeconfig",
    }
