"""Network plumbing of the sandbox rigs: one bridge, one namespace and veth per rig.

Every rig lives in its own network namespace whose ``eth0`` is one end of a veth pair;
the other end sits on the bridge ``m2pbr0``, which holds the gateway address of a
private range (default 10.213.0.0/16, ``M2P_SANDBOX_NET`` to change it).  Nothing is
routed or masqueraded beyond it: a rig can talk to the controller and to other rigs,
and to nothing else.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path

from m2p_sandbox.errors import SandboxError

BRIDGE = "m2pbr0"


def sandbox_network() -> ipaddress.IPv4Network:
    raw = os.environ.get("M2P_SANDBOX_NET", "10.213.0.0/16")
    try:
        net = ipaddress.IPv4Network(raw)
    except ValueError as exc:
        raise SandboxError(f"M2P_SANDBOX_NET={raw!r} is not an IPv4 network: {exc}") from exc
    if not net.is_private or net.prefixlen > 28:
        raise SandboxError(f"M2P_SANDBOX_NET={raw!r} must be a private range of at least /28")
    return net


def gateway() -> ipaddress.IPv4Address:
    return sandbox_network().network_address + 1


def address_for(slot: int) -> ipaddress.IPv4Address:
    """Slot 2 is the first rig (slot 1 is the bridge's gateway address)."""
    net = sandbox_network()
    addr = net.network_address + slot
    if addr >= net.broadcast_address:
        raise SandboxError(f"sandbox network {net} is full")
    return addr


def namespace_name(slot: int) -> str:
    return f"m2p{slot:05d}"


def veth_host_name(slot: int) -> str:
    return f"m2pv{slot:05d}"  # 9 characters: under the kernel's 15


def slot_in_use(slot: int) -> bool:
    """A slot is busy while its namespace or its veth still exist (veth deletion is async)."""
    return (
        Path("/run/netns", namespace_name(slot)).exists()
        or Path("/sys/class/net", veth_host_name(slot)).exists()
    )


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise SandboxError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc


def ensure_bridge() -> None:
    """Create the bridge with the gateway address; callers hold the allocation lock."""
    net = sandbox_network()
    if not Path("/sys/class/net", BRIDGE).exists():
        _ip("link", "add", BRIDGE, "type", "bridge")
    addrs = _ip("-o", "addr", "show", "dev", BRIDGE).stdout
    if f" {gateway()}/{net.prefixlen} " not in addrs:
        _ip("addr", "add", f"{gateway()}/{net.prefixlen}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def remove_bridge() -> None:
    if Path("/sys/class/net", BRIDGE).exists():
        _ip("link", "del", BRIDGE, check=False)


def plumb(slot: int) -> ipaddress.IPv4Address:
    """Create the rig's namespace with eth0 on the bridge, addressed and routed."""
    net = sandbox_network()
    ns, host_end, rig_end = namespace_name(slot), veth_host_name(slot), f"m2pr{slot:05d}"
    addr = address_for(slot)
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", host_end, "type", "veth", "peer", "name", rig_end)
        _ip("link", "set", rig_end, "netns", ns)
        _ip("-n", ns, "link", "set", rig_end, "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{addr}/{net.prefixlen}", "dev", "eth0")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "set", "eth0", "up")
        # k3s and the preflight role want a default route; it leads only to the bridge.
        _ip("-n", ns, "route", "add", "default", "via", str(gateway()))
        _ip("link", "set", host_end, "master", BRIDGE)
        _ip("link", "set", host_end, "up")
        _forget_neighbour(addr)
    except SandboxError:
        unplumb(slot)
        raise
    return addr


def unplumb(slot: int) -> None:
    """Delete the host end explicitly (the kernel's own cleanup is asynchronous)."""
    _ip("link", "del", veth_host_name(slot), check=False)
    _ip("netns", "del", namespace_name(slot), check=False)
    if Path("/run/netns", router_name(slot)).exists():
        _ip("netns", "del", router_name(slot), check=False)
    _forget_neighbour(address_for(slot))


def _forget_neighbour(addr: ipaddress.IPv4Address) -> None:
    """A reused address gets a new MAC: a stale ARP entry would black-hole it for ~30 s."""
    if Path("/sys/class/net", BRIDGE).exists():
        _ip("neigh", "flush", "to", str(addr), "dev", BRIDGE, check=False)


def namespace_inode(slot: int) -> int | None:
    try:
        return os.stat(Path("/run/netns", namespace_name(slot))).st_ino
    except OSError:
        return None


def set_link(slot: int, up: bool) -> None:
    """Cut (or restore) a rig's network the way a flaky farm switch does: its veth's host end goes
    down, open connections stall; nothing on the rig notices until it is back."""
    _ip("link", "set", veth_host_name(slot), "up" if up else "down")


HOME_LAN = "192.168.1"  # most home routers' default: every NAT'd rig has the same address, as real homes do
_HOME_ROUTER_RULES = """
table ip m2p_home {
  chain postrouting { type nat hook postrouting priority 100; oifname "wan" masquerade; }
  chain forward {
    type filter hook forward priority 0; policy drop;
    ct state established,related accept
    iifname "lan" accept
  }
}
"""


def router_name(slot: int) -> str:
    return f"{namespace_name(slot)}r"


def behind_nat(slot: int) -> str:
    """Put a running rig behind a home router, as a rig at a miner's home sits (issue 37): the router (a namespace
    of its own) takes the rig's place on the sandbox LAN, at the rig's old address, and masquerades; the rig moves
    to 192.168.1.2 behind it.  Nothing reaches the rig from outside (no port forward, new connections dropped), and
    what the rig sends out leaves from the router's address.  Returns the router's namespace: a process run there
    is a machine at the rig's site.  Modelled on a home router's defaults (NAT, stateful firewall, one /24)."""
    ns, router, net = namespace_name(slot), router_name(slot), sandbox_network()
    _ip("netns", "add", router)
    try:
        _ip("-n", ns, "link", "set", "eth0", "netns", router)
        _ip("-n", router, "link", "set", "eth0", "name", "wan")
        _ip("-n", router, "addr", "add", f"{address_for(slot)}/{net.prefixlen}", "dev", "wan")
        _ip("-n", router, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", router, "addr", "add", f"{HOME_LAN}.1/24", "dev", "lan")
        for link in ("lo", "wan", "lan"):
            _ip("-n", router, "link", "set", link, "up")
        _ip("-n", router, "route", "add", "default", "via", str(gateway()))
        _ip("-n", ns, "addr", "add", f"{HOME_LAN}.2/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "route", "add", "default", "via", f"{HOME_LAN}.1")
        _in(router, ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        _in(router, ["nft", "-f", "-"], stdin=_HOME_ROUTER_RULES)
        _forget_neighbour(address_for(slot))
    except SandboxError:
        _ip("netns", "del", router, check=False)
        raise
    return router


def set_router(slot: int, up: bool) -> None:
    """A site's outage: its router's uplink goes down (or comes back)."""
    _ip("-n", router_name(slot), "link", "set", "wan", "up" if up else "down")


def _in(namespace: str, argv: list[str], stdin: str | None = None) -> None:
    done = subprocess.run(["ip", "netns", "exec", namespace, *argv], capture_output=True, text=True, input=stdin)
    if done.returncode != 0:
        raise SandboxError(f"{namespace}: `{' '.join(argv)}` failed: {done.stderr.strip()[:300]}")
