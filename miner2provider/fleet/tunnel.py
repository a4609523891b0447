"""A farm across sites: the WireGuard hub-and-spoke plan for rigs behind NAT (issue 37).  Pure: no I/O.

k3s's embedded etcd wants its servers in one place; agents may be anywhere (k3s docs, "Distributed hybrid or
multicloud cluster").  So the k3s server is the hub, at a public address (``m2p_hub_endpoint``), and every rig
with an ``m2p_site`` dials out to it.  Why a hub and not flannel's ``wireguard-native`` mesh: a mesh has no relay,
and two rigs behind different NATs each advertise a private address the other cannot reach (k3s-io/k3s#2689,
#10011, #7355; the NAT lab in tests/integration/test_sites_lab.py shows it).  Through the hub:

- the hub has one peer per rig, allowed only that rig's tunnel address (/32), and forwards between them;
- a rig has one peer, the hub, allowed the whole tunnel network, with a keepalive so its NAT keeps the
  mapping open (the hub cannot dial a rig behind NAT: it answers the rig's own packets);
- node IPs are tunnel addresses, so flannel's default backend (VXLAN) runs over the tunnel unchanged and pod
  traffic needs no other AllowedIPs;
- the tunnel MTU is 1280 unless the owner measured better: a 1400-byte path (PPPoE, LTE) stalled a 2 MB upload
  at WireGuard's default 1420 (k3s-io/k3s#8372; the NAT lab).

Private keys are made on each rig and never leave it: the configs here carry public keys only, and
``wg_config`` leaves ``PrivateKey`` out (the rig sets it from its own file with ``wg set ... private-key``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

from miner2provider.core.errors import InventoryError
from miner2provider.core.inventory import Host
from miner2provider.core.settings import OWN

_DEFAULTS = {s.name: s.default for s in OWN}
DEFAULT_NETWORK = str(_DEFAULTS["m2p_tunnel_network"])
DEFAULT_MTU = int(_DEFAULTS["m2p_tunnel_mtu"])  # IPv6's minimum: every path carries it (RFC 8200); see above
DEFAULT_PORT = 51820  # WireGuard's customary port
KEEPALIVE_S = 25  # wg(8): "a sensible interval that works with a wide variety of firewalls is 25"
# k3s's defaults (cluster-cidr, service-cidr): a tunnel inside them would route pods into the tunnel.
K3S_RANGES = (ipaddress.IPv4Network("10.42.0.0/16"), ipaddress.IPv4Network("10.43.0.0/16"))
RFC1918 = tuple(ipaddress.IPv4Network(r) for r in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))
_ENDPOINT = re.compile(r"^(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})$")
_KEY = re.compile(r"^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$")  # 32 bytes, base64 (wg genkey | wg pubkey)


@dataclass(frozen=True)
class Member:
    name: str
    site: str  # "" for the hub when it is on no named site
    address: ipaddress.IPv4Address  # in the tunnel


@dataclass(frozen=True)
class TunnelPlan:
    network: ipaddress.IPv4Network
    mtu: int
    hub: Member
    endpoint: str  # HOST:PORT the rigs dial
    rigs: tuple[Member, ...]

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])

    def member(self, name: str) -> Member:
        return next(m for m in (self.hub, *self.rigs) if m.name == name)

    @property
    def sites(self) -> dict[str, tuple[str, ...]]:
        """site -> its rigs, in inventory order."""
        found: dict[str, list[str]] = {}
        for rig in self.rigs:
            found.setdefault(rig.site, []).append(rig.name)
        return {site: tuple(names) for site, names in found.items()}


def plan(hosts: list[Host]) -> TunnelPlan | None:
    """The farm's tunnel, or None when no rig names a site (one LAN, as before).  Addresses follow inventory
    order after the hub's (.1), so adding a rig at the end moves no one; a rig with ``m2p_tunnel_address`` keeps
    that one, and the others skip it."""
    sited = [h for h in hosts if h.var("m2p_site")]
    if not sited:
        return None
    tailnet = next((h for h in hosts if h.var("m2p_vpn_auth_file")), None)
    if tailnet is not None:
        raise InventoryError(f"{tailnet.where}: {tailnet.name} has m2p_vpn_auth_file (k3s on the owner's tailnet) in "
                             "a farm with m2p_site (m2p's own tunnel): choose one, the two would route the same "
                             "nodes two ways")
    servers = [h for h in hosts if "k3s_server" in h.groups]
    if len(servers) != 1:
        first = sited[0]
        raise InventoryError(f"{first.where}: {first.name} has m2p_site, so the farm needs exactly one k3s server "
                             f"as its public hub (group k3s_server); found {len(servers)}")
    hub = servers[0]
    endpoint = str(hub.var("m2p_hub_endpoint") or "")
    if not endpoint:
        raise InventoryError(f"{hub.where}: {hub.name} is the hub of a farm across sites: set m2p_hub_endpoint to "
                             f"the public HOST:PORT its rigs dial (UDP, e.g. vps.example.net:{DEFAULT_PORT})")
    if not is_endpoint(endpoint):
        raise InventoryError(f"{hub.where}: m2p_hub_endpoint {endpoint!r} is not HOST:PORT (port 1-65535)")
    network = _network(hub)
    mtu = _mtu(hub)
    members = [h for h in hosts if h is not hub]
    if len(members) + 1 > network.num_addresses - 2:
        raise InventoryError(f"{hub.where}: m2p_tunnel_network {network} holds {network.num_addresses - 2} "
                             f"addresses; the farm has {len(members) + 1} members")
    unsited = [h for h in members if not h.var("m2p_site")]
    if unsited:
        raise InventoryError(f"{unsited[0].where}: {unsited[0].name} has no m2p_site while others do: in a farm "
                             "across sites every rig names its site (a rig on the hub's own LAN too)")
    pinned = _pinned(members, network)
    free = (a for a in list(network.hosts())[1:] if a not in pinned.values())
    hub_member = Member(hub.name, str(hub.var("m2p_site") or ""), network.network_address + 1)
    rigs = tuple(Member(h.name, str(h.var("m2p_site")), pinned.get(h.name) or next(free)) for h in members)
    declared_keys(hosts)  # checked with the plan, so `inventory check` says it
    return TunnelPlan(network, mtu, hub_member, endpoint, rigs)


def _pinned(members: list[Host], network: ipaddress.IPv4Network) -> dict[str, ipaddress.IPv4Address]:
    """Rigs whose tunnel address is pinned (``m2p_tunnel_address``): taking a rig out of the middle of the
    inventory would otherwise move every rig after it to a new address, and k3s's node IPs with them."""
    pinned: dict[str, ipaddress.IPv4Address] = {}
    for host in members:
        raw = host.var("m2p_tunnel_address")
        if raw is None:
            continue
        try:
            address = ipaddress.IPv4Address(str(raw))
        except ValueError:
            address = None
        if address is None or address not in network or address in (network.network_address,
                                                                    network.network_address + 1,
                                                                    network.broadcast_address):
            raise InventoryError(f"{host.where}: {host.name}'s m2p_tunnel_address {raw!r} is not a rig's address in "
                                 f"{network} (the hub has {network.network_address + 1})")
        twin = next((name for name, other in pinned.items() if other == address), None)
        if twin is not None:
            raise InventoryError(f"{host.where}: {host.name}'s m2p_tunnel_address {address} is {twin}'s too")
        pinned[host.name] = address
    return pinned


def _network(hub: Host) -> ipaddress.IPv4Network:
    raw = str(hub.var("m2p_tunnel_network") or DEFAULT_NETWORK)
    try:
        network = ipaddress.IPv4Network(raw)
    except ValueError as exc:
        raise InventoryError(f"{hub.where}: m2p_tunnel_network {raw!r} is not an IPv4 network ({exc})") from None
    # RFC 1918 only: Python's is_private would let 198.18.0.0/15 or 100.64.0.0/10 pass, and the marketplace's
    # lease NetworkPolicy refuses tenants' pods just these three ranges (docs/security.md, issue 55).
    if not any(network.subnet_of(r) for r in RFC1918):
        raise InventoryError(f"{hub.where}: m2p_tunnel_network {raw} is not inside 10.0.0.0/8, 172.16.0.0/12 or "
                             "192.168.0.0/16 (RFC 1918)")
    clash = next((r for r in K3S_RANGES if r.overlaps(network)), None)
    if clash is not None:
        raise InventoryError(f"{hub.where}: m2p_tunnel_network {raw} overlaps k3s's {clash} (pods and services)")
    return network


def _mtu(hub: Host) -> int:
    mtu = hub.var("m2p_tunnel_mtu", DEFAULT_MTU)
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not 1280 <= mtu <= 1420:
        raise InventoryError(f"{hub.where}: m2p_tunnel_mtu {mtu!r} is not a whole number from 1280 (safe on any path) "
                             "to 1420 (WireGuard's default, for a measured 1500-byte path)")
    return mtu


def is_endpoint(text: str) -> bool:
    """HOST:PORT, port 1-65535."""
    match = _ENDPOINT.fullmatch(text)
    return match is not None and 0 < int(match["port"]) < 65536


def declared_keys(hosts: list[Host]) -> dict[str, str]:
    """rig -> the public key the owner put in the inventory (``m2p_tunnel_public_key``, printed by ``m2p join``):
    the hub gets it before the controller can reach the rig."""
    found: dict[str, str] = {}
    for host in hosts:
        key = host.var("m2p_tunnel_public_key")
        if key is None:
            continue
        if not isinstance(key, str) or not is_public_key(key.strip()):
            raise InventoryError(f"{host.where}: {host.name}'s m2p_tunnel_public_key is not a WireGuard public key "
                                 "(44 characters of base64, as `m2p join` printed it)")
        # One key, one peer: the hub would take a second [Peer] with the same key as a change to the first, and the
        # key's holder would then be allowed the other member's address.
        other = next((h for h in hosts if found.get(h.name) == key.strip()), None)
        if other is not None:
            raise InventoryError(f"{host.where}: {host.name}'s m2p_tunnel_public_key is {other.name}'s too "
                                 f"({other.where}): each member has a key of its own")
        found[host.name] = key.strip()
    return found


def is_public_key(text: str) -> bool:
    """32 bytes of base64, as ``wg pubkey`` prints them: nothing a rig sends can add a line to a configuration."""
    return _KEY.fullmatch(text) is not None


def wg_config(tunnel: TunnelPlan, name: str, public_keys: Mapping[str, str]) -> str:
    """``name``'s configuration in wg(8)'s ``setconf`` format, without ``PrivateKey`` (the rig's own file gives
    it).  ``public_keys``: member name -> its public key, as each rig reported it."""
    for member, key in public_keys.items():
        if not is_public_key(key):
            raise ValueError(f"{member}'s WireGuard public key is not 32 bytes of base64")
    if name == tunnel.hub.name:
        lines = ["[Interface]", f"ListenPort = {tunnel.port}"]
        for rig in tunnel.rigs:
            if rig.name in public_keys:  # a rig not joined yet has no key: no peer
                lines += ["", f"# {rig.name} (site {rig.site})", "[Peer]", f"PublicKey = {public_keys[rig.name]}",
                          f"AllowedIPs = {rig.address}/32"]
        return "\n".join(lines) + "\n"
    tunnel.member(name)  # StopIteration for a name not in the plan: a caller's bug, never a silent config
    return "\n".join(["[Interface]", "", f"# the hub, {tunnel.hub.name}", "[Peer]",
                      f"PublicKey = {public_keys[tunnel.hub.name]}", f"Endpoint = {tunnel.endpoint}",
                      f"AllowedIPs = {tunnel.network}", f"PersistentKeepalive = {KEEPALIVE_S}"]) + "\n"


def member_names(hosts: list[Host]) -> dict[str, str]:
    """tunnel address -> member, for status to name the hub's silent peers ({} for one LAN, or a plan with a
    mistake: inventory check says that, status goes on without names)."""
    try:
        found = plan(hosts)
    except InventoryError:
        return {}
    return {} if found is None else {str(m.address): m.name for m in (found.hub, *found.rigs)}


def site_needs(tunnel: TunnelPlan) -> list[str]:
    """What each site must provide, for ``inventory check``: only the hub needs an open port."""
    lines = [f"hub {tunnel.hub.name} ({tunnel.hub.address}): UDP {tunnel.port} reachable from every site at "
             f"{tunnel.endpoint}; it forwards between sites"]
    for site, names in tunnel.sites.items():
        rigs = f"{len(names)} rig{'' if len(names) == 1 else 's'}"
        lines.append(f"site {site}: {rigs} ({', '.join(names)}) dial out to {tunnel.endpoint}; no port "
                     f"to forward there; tunnel MTU {tunnel.mtu}")
    return lines
