"""A NAT lab: a public hub and two home sites behind masquerading routers, in network namespaces.

Modelled on what a miner's farm across sites looks like (issue 37; ../shared/reference/akash-provider.md
section 4): a VPS with a public address, and homes whose routers masquerade one private range each, the same
192.168.1.0/24 at both (most home routers' default), one of them on a 1400-byte path (PPPoE's 1492 less a
tunnel's, or an LTE link) that drops packets over it silently (a PMTU black hole: no ICMP comes back).
The "internet" is a namespace that routes between the three public links and nowhere else: nothing leaves
the namespaces this module creates.

WireGuard runs in userspace (Debian's ``wireguard-go``; this kernel has no module), one interface per member,
each with its own name (wireguard-go's control sockets live in /var/run/wireguard/, shared by namespaces).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from m2p_sandbox.errors import SandboxError

TOOLS = {"wg": "wireguard-tools", "wireguard-go": "wireguard-go", "nft": "nftables", "ip": "iproute2",
         "bridge": "iproute2"}
HUB_PUBLIC = "203.0.113.10"  # TEST-NET-3 (RFC 5737): never routed anywhere
LAN = "192.168.1"  # both homes
POD_NETWORK = "10.42.0.0/16"  # k3s's default cluster-cidr


def missing_tools() -> list[str]:
    """Debian packages the lab needs and this machine lacks (scripts/install installs them)."""
    return sorted({pkg for tool, pkg in TOOLS.items() if shutil.which(tool) is None})


@dataclass
class Lab:
    tag: str  # a few characters that make this lab's names unique (parallel test workers)
    state: Path  # keys and logs (0700)
    namespaces: list[str] = field(default_factory=list)
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def ns(self, role: str) -> str:
        return f"m2pl{self.tag}{role}"

    def run(self, role: str, *argv: str, check: bool = True, timeout: float = 30,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["ip", "netns", "exec", self.ns(role), *argv], capture_output=True, text=True,
                              timeout=timeout, input=stdin)
        if check and done.returncode != 0:
            raise SandboxError(f"{role}: `{' '.join(argv)}` exit {done.returncode}: {done.stderr.strip()[:300]}")
        return done

    def _ip(self, *argv: str) -> None:
        done = subprocess.run(["ip", *argv], capture_output=True, text=True)
        if done.returncode != 0:
            raise SandboxError(f"`ip {' '.join(argv)}` failed: {done.stderr.strip()}")

    def _add(self, role: str) -> None:
        self._ip("netns", "add", self.ns(role))
        self.namespaces.append(self.ns(role))
        self.run(role, "ip", "link", "set", "lo", "up")

    def _link(self, a: str, a_addr: str, b: str, b_addr: str, mtu: int = 1500) -> None:
        """A cable between two namespaces, addressed at both ends."""
        ea, eb = f"l{self.tag}{a[:2]}{b[:2]}", f"l{self.tag}{b[:2]}{a[:2]}"
        self._ip("link", "add", ea, "mtu", str(mtu), "type", "veth", "peer", "name", eb, "mtu", str(mtu))
        self._ip("link", "set", ea, "netns", self.ns(a))
        self._ip("link", "set", eb, "netns", self.ns(b))
        for role, end, addr in ((a, ea, a_addr), (b, eb, b_addr)):
            self.run(role, "ip", "addr", "add", addr, "dev", end)
            self.run(role, "ip", "link", "set", end, "up")

    def build(self) -> None:
        """inet routes 203.0.113.0/24 (the hub), 198.51.100.0/30 (home A's router) and 198.51.100.4/30 (home B's,
        MTU 1400); each router masquerades its 192.168.1.0/24."""
        for role in ("inet", "hub", "ra", "rb", "a1", "b1"):
            self._add(role)
        self._link("inet", "203.0.113.1/24", "hub", f"{HUB_PUBLIC}/24")
        self._link("inet", "198.51.100.1/30", "ra", "198.51.100.2/30")
        self._link("inet", "198.51.100.5/30", "rb", "198.51.100.6/30", mtu=1400)
        self._link("ra", f"{LAN}.1/24", "a1", f"{LAN}.2/24")
        self._link("rb", f"{LAN}.1/24", "b1", f"{LAN}.2/24")
        self.run("hub", "ip", "route", "add", "default", "via", "203.0.113.1")
        for router, upstream in (("ra", "198.51.100.1"), ("rb", "198.51.100.5")):
            self.run(router, "ip", "route", "add", "default", "via", upstream)
            self.run(router, "nft", "-f", "-", stdin=(
                "table ip nat {\n chain postrouting {\n  type nat hook postrouting priority srcnat;\n"
                f"  ip saddr {LAN}.0/24 oifname != \"l{self.tag}{router[:2]}{'a1' if router == 'ra' else 'b1'}\" "
                "masquerade\n }\n}\n"))
        # Home B's path is a PMTU black hole (RFC 2923): its routers never send "fragmentation needed", as many
        # PPPoE and LTE links do not, so a packet over 1400 bytes is lost without a word.
        for role in ("inet", "rb"):
            self.run(role, "nft", "-f", "-", stdin=(
                "table ip blackhole {\n chain output {\n  type filter hook output priority 0;\n"
                "  icmp type destination-unreachable icmp code frag-needed drop\n }\n}\n"))
        for rig in ("a1", "b1"):
            self.run(rig, "ip", "route", "add", "default", "via", f"{LAN}.1")
        for role in ("inet", "ra", "rb"):
            self.run(role, "sysctl", "-qw", "net.ipv4.ip_forward=1")

    def wireguard(self, role: str, name: str) -> str:
        """A userspace WireGuard interface in ``role``'s namespace, with a private key made there (0600, never
        read back: only its public half is returned)."""
        key = self.state / f"{role}.key"
        key.write_text(self.run(role, "wg", "genkey").stdout)
        key.chmod(0o600)
        log = open(self.state / f"{role}-wireguard-go.log", "wb")  # noqa: SIM115 - the daemon holds it
        daemon = subprocess.Popen(["ip", "netns", "exec", self.ns(role), "wireguard-go", "-f", name],
                                  stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "LOG_LEVEL": "error"})
        self.daemons.append(daemon)
        deadline = time.monotonic() + 10
        while self.run(role, "ip", "link", "show", name, check=False).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise SandboxError(f"wireguard-go {name} in {role} did not start (exit {daemon.poll()})")
            time.sleep(0.05)
        return self.run(role, "wg", "pubkey", stdin=key.read_text()).stdout.strip()

    def configure(self, role: str, name: str, config: str, address: str, mtu: int) -> None:
        """``config`` (wg setconf's format, no PrivateKey) plus the namespace's own key, the tunnel address, MTU."""
        path = self.state / f"{role}.conf"
        path.write_text(config)
        self.run(role, "wg", "setconf", name, str(path))
        self.run(role, "wg", "set", name, "private-key", str(self.state / f"{role}.key"))
        self.run(role, "ip", "addr", "replace", address, "dev", name)
        self.run(role, "ip", "link", "set", name, "mtu", str(mtu), "up")

    def flannel(self, role: str, tunnel_if: str, local: str, subnet: int, mtu: int) -> str:
        """STAND-IN for flannel's VXLAN backend as k3s runs it (flannel-io/flannel pkg/backend/vxlan): the device
        flannel.1 (VNI 1, UDP 8472) over the member's tunnel address, its pod subnet 10.42.N.0/24 (N:
        ``subnet``) with 10.42.N.0/32 on flannel.1, forwarding on (k3s sets net/ipv4/conf/all/forwarding) and
        flannel's masquerade for pods leaving the pod network.  Returns flannel.1's MAC for its peers."""
        self.run(role, "ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "local", local, "dev", tunnel_if,
                 "dstport", "8472", "nolearning")
        self.run(role, "ip", "addr", "add", f"10.42.{subnet}.0/32", "dev", "flannel.1")
        self.run(role, "ip", "link", "set", "flannel.1", "mtu", str(mtu - 50), "up")  # VXLAN's 50 bytes
        self.run(role, "sysctl", "-qw", "net.ipv4.conf.all.forwarding=1")
        self.run(role, "nft", "-f", "-", stdin=(
            "table ip flannel {\n chain postrouting {\n  type nat hook postrouting priority srcnat;\n"
            f"  ip saddr {POD_NETWORK} ip daddr != {POD_NETWORK} masquerade\n }}\n}}\n"))
        return self.run(role, "cat", "/sys/class/net/flannel.1/address").stdout.strip()

    def flannel_peer(self, role: str, subnet: int, mac: str, tunnel_address: str) -> None:
        """What flannel writes for each other node: a route to its pod subnet over flannel.1, the neighbour
        entry for its VTEP and the forwarding entry that sends its frames to its tunnel address."""
        self.run(role, "ip", "route", "add", f"10.42.{subnet}.0/24", "via", f"10.42.{subnet}.0", "dev", "flannel.1",
                 "onlink")
        self.run(role, "ip", "neigh", "replace", f"10.42.{subnet}.0", "lladdr", mac, "dev", "flannel.1",
                 "nud", "permanent")
        self.run(role, "bridge", "fdb", "append", mac, "dev", "flannel.1", "dst", tunnel_address)

    def pod(self, role: str, subnet: int) -> str:
        """A pod on ``role`` (a namespace of its own, 10.42.N.2, its gateway the node's 10.42.N.1 as k3s's cni0
        is); returns the pod's role name for ``run``."""
        pod = f"{role[0]}p"
        self._add(pod)
        self._link(role, f"10.42.{subnet}.1/24", pod, f"10.42.{subnet}.2/24")
        self.run(pod, "ip", "route", "add", "default", "via", f"10.42.{subnet}.1")
        return pod

    def close(self) -> None:
        """End the daemons this lab started (by PID) and delete its namespaces (their links go with them)."""
        for daemon in self.daemons:
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(5)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait(5)
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
