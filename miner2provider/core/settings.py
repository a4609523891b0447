"""The inventory settings m2p reads (``m2p_*``): the one contract between a rig inventory and m2p.

Each setting is declared once, here.  A setting that hands its value to role variables
(``feeds``) takes its type, description, default and choices from the first of them in that
role's ``meta/argument_specs.yml``, so a default lives in one place: the role.  A setting the
controller reads itself (passwords from the environment, the schedule file, ...) is declared
with its own.  ``role_vars.py`` turns settings into role variables; ``inventory.py`` checks an
inventory against the contract; the settings table (docs/commands/inventory-check.md) is this contract (tested).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from miner2provider.core import collection


@dataclass(frozen=True)
class Setting:
    name: str
    kind: str  # an argument_specs type: str, path, int, bool
    description: str
    default: Any = None
    choices: tuple[Any, ...] = ()
    feeds: tuple[str, ...] = ()  # role variables that get the value as it is

    @property
    def python_type(self) -> type:
        return {"str": str, "path": str, "int": int, "bool": bool}[self.kind]


NO_MARKETPLACE = "none"  # m2p_marketplace's value for a rig that serves its owner's workloads only

# Settings whose value goes to role variables as it is: name -> those variables.
FEEDS: dict[str, tuple[str, ...]] = {
    "m2p_min_free_disk_gb": ("preflight_min_free_disk_gb",),
    "m2p_min_ram_mb": ("preflight_min_ram_mb",),
    "m2p_data_dir": ("k3s_data_dir", "preflight_data_dir"),
    # Also the controller's readiness verdict, and the plays that leave a control node out (runner.py's group).
    "m2p_control_node": ("preflight_control_node",),
    "m2p_allow_driver_upgrade": ("nvidia_driver_allow_upgrade",),
    "m2p_miner_unit": ("mining_os_miner_unit",),
    "m2p_k3s_server_url": ("k3s_agent_server_url",),
    "m2p_agent_ca_file": ("timeshare_agent_ca_src",),
    # Also ansible_python_interpreter (role_vars.py), and the probe's python3 (detect.py).
    "m2p_python_interpreter": ("timeshare_agent_python",),
    "m2p_trex_api_port": ("timeshare_agent_trex_api_port",),
    # Rigs behind NAT on the owner's own tailnet instead of m2p's tunnel (docs/sites.md; never with m2p_site).
    "m2p_vpn_auth_file": ("k3s_vpn_auth_file",),
    # Which marketplace (market/: the names it registers; none: the owner's own workloads only).
    "m2p_marketplace": ("timeshare_agent_marketplace",),
    # Issue 56: a card over it leaves the market (the agent's health rule; the default and why: the role's).
    "m2p_gpu_temperature_limit": ("timeshare_agent_temperature_limit",),
    # How often the agent reads its cards (docs/monitoring.md: what each reading costs a weak CPU).
    "m2p_gpu_telemetry_interval": ("timeshare_agent_telemetry_interval_s",),
}

# Settings read by m2p itself, or that several role variables are derived from (role_vars.py).
OWN: tuple[Setting, ...] = (
    Setting("m2p_ssh_password_env", "str", "Name of an environment variable holding the SSH password."),
    Setting("m2p_become_password_env", "str", "Name of an environment variable holding the sudo password."),
    Setting("m2p_check_default_password", "bool",
            "Warn when the rig still accepts its mining OS's default login.", True),
    Setting("m2p_location_region", "str", "Provider attribute location-region."),
    Setting("m2p_jump_host", "str",
            "Reach the rig through this SSH jump host: an inventory host's name, or [USER@]HOST[:PORT] "
            "(then the rig's own key logs in there too)."),
    Setting("m2p_schedule", "path", "Time-share schedule file for this rig (relative to the inventory)."),
    Setting("m2p_economics", "path",
            "Economics file (lease prices, mining revenue, power) for schedule policy profit (relative to the "
            "inventory); m2p schedule apply --economics gives one for every rig."),
    Setting("m2p_time_slicing_replicas", "int",
            "Advertise each GPU this many times (device plugin time-slicing); "
            "needs m2p_marketplace: none or m2p_time_slicing_on_marketplace: true.", 1),
    Setting("m2p_time_slicing_on_marketplace", "bool",
            "Allow time-slicing on a marketplace rig whose marketplace sells each slice as a whole GPU.", False),
    Setting("m2p_k3s_token_env", "str",
            "Name of an environment variable holding the join token of the m2p_k3s_server_url server."),
    Setting("m2p_agent_api_server", "str",
            "Kubernetes API the time-share agent talks to (https://HOST:6443); default: the rig's k3s server."),
    Setting("m2p_agent_token_env", "str",
            "Name of an environment variable holding the time-share agent's API token "
            "(a cluster outside the inventory)."),
    # A farm across sites (fleet/tunnel.py, docs/sites.md).
    Setting("m2p_site", "str",
            "The site the rig is at (a farm across sites: it dials the hub over WireGuard); unset: one LAN."),
    Setting("m2p_hub_endpoint", "str",
            "On the k3s server of a farm across sites: the public HOST:PORT (UDP) its rigs dial."),
    Setting("m2p_tunnel_network", "str",
            "On the hub: the private range of tunnel addresses (not inside k3s's 10.42.0.0/16 or 10.43.0.0/16).",
            "10.237.0.0/24"),
    Setting("m2p_tunnel_mtu", "int", "On the hub: the tunnel's MTU, 1280 (safe on any path) to 1420.", 1280),
    Setting("m2p_tunnel_address", "str",
            "A rig's tunnel address, pinned (in m2p_tunnel_network); unset: the next free one in inventory order."),
    Setting("m2p_tunnel_public_key", "str",
            "A rig that joined from its site (`m2p join`): the WireGuard public key it printed; the hub gets it "
            "before the controller can reach the rig."),
)


def build(role_options: Mapping[str, Mapping[str, Any]]) -> dict[str, Setting]:
    """The contract from ``OWN``, ``FEEDS`` and the roles' argument specs (pure)."""
    contract = {s.name: s for s in OWN}
    for name, targets in FEEDS.items():
        spec = role_options[targets[0]]
        contract[name] = Setting(name, str(spec["type"]), str(spec["description"]), spec.get("default"),
                                 tuple(spec.get("choices", ())), targets)
    return dict(sorted(contract.items()))


@functools.cache
def contract() -> dict[str, Setting]:
    """The contract of the installed collection."""
    return build(collection.role_options())


def markdown_table(settings: Mapping[str, Setting]) -> str:
    """The settings table in docs/commands/inventory-check.md."""
    rows = ["| Setting | Type | Default | What it does |", "|---|---|---|---|"]
    for s in settings.values():
        default = "" if s.default in (None, "") else f"`{str(s.default).lower() if s.kind == 'bool' else s.default}`"
        names = ", ".join(f"`{v}`" for v in s.feeds)
        fed = f" (role variable{'s' if len(s.feeds) > 1 else ''} {names})" if s.feeds else ""
        choices = f" One of {', '.join(f'`{c}`' for c in s.choices)}." if s.choices else ""
        rows.append(f"| `{s.name}` | {s.kind} | {default} | {s.description}{choices}{fed} |")
    return "\n".join(rows) + "\n"
