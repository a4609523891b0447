"""Issue 55 point 2: role k3s's own nftables table (templates/m2p-pods.nft.j2, rendered as the role renders it and
loaded with the real `nft -f`) keeps a lease's pod off link-local addresses (169.254.0.0/16: a VPS's metadata service,
the node's own link-local services) on every node, and in k3s's Tailscale mode off the owner's tailnet
(100.64.0.0/10) too, all of which Akash's lease NetworkPolicy leaves it, on real kernel networking.  Whether the role
loads the table at all for a farm's mode is read from its tasks (the conditions on the way to the task that writes it).

Network namespaces stand in for what cannot exist here (no k3s, no Tailscale): a pod (10.42.1.2, its gateway the
node's 10.42.1.1 as k3s's cni0 is), the node (forwarding as k3s turns it on, flannel's masquerade for pods leaving the
pod network, kube-proxy's DNAT for the API's Service, its tailnet address 100.64.0.2) and the tailnet beyond it (a
peer at 100.64.0.1 with the API on 6443, Tailscale's resolver at 100.100.100.100, a metadata service at
169.254.169.254, and a public-looking 203.0.113.7 the pod may reach); on a farm on one LAN (neither m2p's tunnel nor
Tailscale), the LAN (its router 192.168.1.1, also the node's resolver) with the metadata service and the public
address behind the router, and a link-local address of the node's own (169.254.1.10).  Needs root, `ip` and `nft` (scripts/install);
without them it fails with the reason.  A second or so.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from miner2provider.core import collection

ROLE = collection.root() / "roles" / "k3s"
# Ansible's template module renders with trim_blocks on; StrictUndefined: a variable the role does not give fails.
JINJA = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
JINJA.filters["dirname"] = os.path.dirname  # Ansible's, as the unit's template uses it
TAILSCALE = "/etc/m2p/vpn-auth"  # any m2p_vpn_auth_file: k3s's Tailscale mode
POD, NODE_POD_SIDE, NODE_TAILNET, PEER = "10.42.1.2", "10.42.1.1", "100.64.0.2", "100.64.0.1"
QUAD100, METADATA, PUBLIC, API_SERVICE = "100.100.100.100", "169.254.169.254", "203.0.113.7", "10.43.0.1"
NODE_LAN, ROUTER, NODE_LINK_LOCAL = "192.168.1.10", "192.168.1.1", "169.254.1.10"
# On a LAN farm: a host in 100.64.0.0/10 beyond the router, the ISP's carrier-grade NAT resolver or a tailnet peer the
# owner runs by hand.
CGNAT = "100.64.9.9"

# Listens on each HOST:PORT given; every connection is greeted with b"ok" (the client's read proves both directions).
LISTEN = textwrap.dedent("""
    import socket, sys, threading
    def serve(sock):
        while True:
            conn, _ = sock.accept()
            conn.sendall(b"ok")
            conn.close()
    for target in sys.argv[1:]:
        host, port = target.rsplit(":", 1)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen()
        threading.Thread(target=serve, args=(sock,), daemon=True).start()
    print("listening", flush=True)
    threading.Event().wait()
""")
# Connects to every HOST:PORT at once and prints {target: "open" | why not}: "open" once the greeting came back;
# a dropped SYN waits out the one deadline shared by all.
PROBE = textwrap.dedent("""
    import json, os, selectors, socket, sys, time
    sel, said = selectors.DefaultSelector(), {}
    for target in sys.argv[2:]:
        host, port = target.rsplit(":", 1)
        sock = socket.socket()
        sock.setblocking(False)
        sock.connect_ex((host, int(port)))
        sel.register(sock, selectors.EVENT_WRITE, target)
    end = time.monotonic() + float(sys.argv[1])
    while sel.get_map() and time.monotonic() < end:
        for key, events in sel.select(max(0.0, end - time.monotonic())):
            sock = key.fileobj
            if events & selectors.EVENT_WRITE and key.events == selectors.EVENT_WRITE:
                err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    said[key.data] = os.strerror(err)
                    sel.unregister(sock)
                    sock.close()
                else:
                    sel.modify(sock, selectors.EVENT_READ, key.data)
                continue
            said[key.data] = "open" if sock.recv(2) == b"ok" else "no greeting"
            sel.unregister(sock)
            sock.close()
    for key in list(sel.get_map().values()):
        said[key.data] = "no answer"
    print(json.dumps(said))
""")


def pod_network() -> str:
    """k3s_pod_network as the role's default gives it (k3s_extra_config without a cluster-cidr)."""
    default = collection.role_defaults("k3s")["k3s_pod_network"]
    return JINJA.from_string(str(default)).render(k3s_extra_config={})


def rendered(template: str, **variables: str) -> str:
    return JINJA.from_string((ROLE / "templates" / template).read_text()).render(**variables)


def tasks(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((ROLE / "tasks" / name).read_text()) or []


def conditions_to(src: str, steps: list[dict[str, Any]], above: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The `when` conditions the role puts on the way to the task that templates ``src`` (blocks and included task
    files followed); None when no task among ``steps`` templates it."""
    for step in steps:
        when = step.get("when", [])
        here = above + tuple(when if isinstance(when, list) else [when])
        found = None
        if "block" in step:
            found = conditions_to(src, step["block"], here)
        elif "ansible.builtin.include_tasks" in step:
            found = conditions_to(src, tasks(step["ansible.builtin.include_tasks"]), here)
        elif (step.get("ansible.builtin.template") or {}).get("src") == src:
            found = here
        if found is not None:
            return found
    return None


def role_loads_the_filter(**facts: object) -> bool:
    """Whether role k3s writes (and so loads) the pods' filter on a rig with these variables and results."""
    conditions = conditions_to("m2p-pods.nft.j2", tasks("main.yml"))
    assert conditions is not None, "role k3s no longer templates m2p-pods.nft.j2"
    return all(JINJA.compile_expression(str(c), undefined_to_none=False)(**facts) for c in conditions)


class Namespaces:
    """m2p-test-<random>-<name> namespaces and the processes started in them, all ended by ``close``."""

    def __init__(self) -> None:
        self.tag = f"m2p-test-{secrets.token_hex(3)}"
        self.made: list[str] = []
        self.started: list[subprocess.Popen[str]] = []

    def name(self, role: str) -> str:
        return f"{self.tag}-{role}"

    def add(self, role: str) -> None:
        self.host("ip", "netns", "add", self.name(role))
        self.made.append(self.name(role))
        self.run(role, "ip", "link", "set", "lo", "up")

    def host(self, *argv: str, stdin: str | None = None) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, input=stdin, timeout=30)
        assert done.returncode == 0, f"`{' '.join(argv)}` exit {done.returncode}: {done.stderr.strip()}"
        return done.stdout

    def run(self, role: str, *argv: str, stdin: str | None = None) -> str:
        return self.host("ip", "netns", "exec", self.name(role), *argv, stdin=stdin)

    def link(self, a: str, a_addr: str, b: str, b_addr: str) -> None:
        ends = (f"{self.tag[-6:]}{a[:3]}{b[:3]}", f"{self.tag[-6:]}{b[:3]}{a[:3]}")
        self.host("ip", "link", "add", ends[0], "type", "veth", "peer", "name", ends[1])
        for role, end, addr in ((a, ends[0], a_addr), (b, ends[1], b_addr)):
            self.host("ip", "link", "set", end, "netns", self.name(role))
            self.run(role, "ip", "addr", "add", addr, "dev", end)
            self.run(role, "ip", "link", "set", end, "up")

    def listen(self, role: str, *targets: str) -> None:
        proc = subprocess.Popen(["ip", "netns", "exec", self.name(role), sys.executable, "-c", LISTEN, *targets],
                                stdout=subprocess.PIPE, text=True)
        self.started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "listening", f"{role}: no listener"

    def probe(self, role: str, *targets: str, wait: float = 1.5) -> dict[str, str]:
        return json.loads(self.run(role, sys.executable, "-c", PROBE, str(wait), *targets))

    def close(self) -> None:
        for proc in self.started:
            proc.terminate()
            proc.wait(5)
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def can_make_namespaces() -> None:
    if os.geteuid() != 0:
        pytest.fail("the pod filter's test makes network namespaces and must run as root (scripts/test as root)")
    missing = sorted({pkg for tool, pkg in (("ip", "iproute2"), ("nft", "nftables")) if shutil.which(tool) is None})
    if missing:  # never a skip: a machine that cannot run it must go red
        pytest.fail(f"the pod filter's test needs {', '.join(missing)}: run scripts/install "
                    f"(apt-get install {' '.join(missing)})")


def standins(ns: Namespaces, api_endpoint: str) -> None:
    """STAND-INS on the node: flannel's masquerade for pods leaving the pod network (flannel-io/flannel
    pkg/trafficmngr), and kube-proxy's DNAT for the API's Service (10.43.0.1:443 -> the server's node IP)."""
    ns.run("node", "nft", "-f", "-", stdin=(
        "table ip standin {\n"
        " chain postrouting {\n  type nat hook postrouting priority srcnat;\n"
        "  ip saddr 10.42.0.0/16 ip daddr != 10.42.0.0/16 masquerade\n }\n"
        " chain prerouting {\n  type nat hook prerouting priority dstnat;\n"
        f"  ip daddr {API_SERVICE} tcp dport 443 dnat to {api_endpoint}\n }}\n}}\n"))


def a_node_with_a_pod(beyond: str) -> Namespaces:
    """The pod, the node (forwarding as k3s turns it on for every interface) and the namespace ``beyond`` it."""
    can_make_namespaces()
    ns = Namespaces()
    try:
        for role in ("pod", "node", beyond):
            ns.add(role)
        ns.link("pod", f"{POD}/24", "node", f"{NODE_POD_SIDE}/24")
        ns.run("pod", "ip", "route", "add", "default", "via", NODE_POD_SIDE)
        ns.run("node", "sysctl", "-qw", "net.ipv4.conf.all.forwarding=1")
    except BaseException:
        ns.close()
        raise
    return ns


@pytest.fixture
def farm() -> Iterator[Namespaces]:
    ns = a_node_with_a_pod("tailnet")
    try:
        ns.link("node", f"{NODE_TAILNET}/10", "tailnet", f"{PEER}/10")
        for address in (QUAD100, METADATA, PUBLIC):
            ns.run("tailnet", "ip", "addr", "add", f"{address}/32", "dev", "lo")
            ns.run("node", "ip", "route", "add", f"{address}/32", "via", PEER)
        # Tailscale's subnet routes, as k3s advertises each node's pod CIDR on the tailnet.
        ns.run("tailnet", "ip", "route", "add", "10.42.0.0/16", "via", NODE_TAILNET)
        standins(ns, f"{PEER}:6443")  # the server's node IP: here its tailnet address
        ns.listen("tailnet", f"{PEER}:8080", f"{PEER}:6443", f"{QUAD100}:53", f"{QUAD100}:80", f"{METADATA}:80",
                  f"{PUBLIC}:8080")
        ns.listen("node", f"{NODE_TAILNET}:22")
        ns.listen("pod", f"{POD}:8080")
        yield ns
    finally:
        ns.close()


@pytest.fixture
def lan_farm() -> Iterator[Namespaces]:
    """A farm on one LAN: no tunnel, no Tailscale.  The node (a k3s server) reaches the LAN's router, its resolver,
    and through it a metadata service (as a VPS's gateway leads there) and the internet; it has a link-local address
    of its own (a link-local service, or a VPS's) and answers the API's Service on its LAN address."""
    ns = a_node_with_a_pod("lan")
    try:
        ns.link("node", f"{NODE_LAN}/24", "lan", f"{ROUTER}/24")
        ns.run("node", "ip", "route", "add", "default", "via", ROUTER)
        ns.run("node", "ip", "addr", "add", f"{NODE_LINK_LOCAL}/32", "dev", "lo")
        for address in (METADATA, PUBLIC, CGNAT):
            ns.run("lan", "ip", "addr", "add", f"{address}/32", "dev", "lo")
        standins(ns, f"{NODE_LAN}:6443")  # the server's node IP: its LAN address, so the Service ends on the node
        ns.listen("lan", f"{ROUTER}:53", f"{METADATA}:80", f"{PUBLIC}:8080", f"{CGNAT}:53", f"{CGNAT}:22")
        ns.listen("node", f"{NODE_LAN}:6443", f"{NODE_LINK_LOCAL}:80")
        yield ns
    finally:
        ns.close()


def test_a_lease_pod_on_a_farm_on_one_lan_reaches_no_metadata_service_while_the_cluster_works(lan_farm):
    """The attack, on a farm with neither m2p's tunnel nor Tailscale (the role's LAN mode, nft installed): from a
    lease's pod, the metadata service (169.254.169.254, a VPS's credentials), a link-local service of the node's
    own and a host in 100.64.0.0/10 (a tailnet the owner runs by hand, another customer of the ISP's carrier-grade
    NAT).  With the table the role loads in this mode they get no answer, while the pod still reaches a public
    address, the API through its Service (DNAT to the node's own address) and a resolver, on the LAN or the ISP's in
    100.64.0.0/10 (CoreDNS's upstream: k3s takes no link-local nameserver, k3s-io/k3s pkg/agent/config
    isValidResolvConf), and the node's own traffic to the metadata service is untouched."""
    lan = {"k3s_vpn_auth_file": "", "ansible_check_mode": False,
           "k3s_nft_found": {"rc": 0, "stdout": shutil.which("nft") or "nft"}}
    if role_loads_the_filter(**lan):
        lan_farm.run("node", "nft", "-f", "-", stdin=rendered("m2p-pods.nft.j2", k3s_pod_network=pod_network(), **lan))

    said = lan_farm.probe("pod", f"{PUBLIC}:8080", f"{API_SERVICE}:443", f"{ROUTER}:53", f"{CGNAT}:53", f"{METADATA}:80",
                          f"{NODE_LINK_LOCAL}:80", f"{CGNAT}:22")
    assert said == {**dict.fromkeys([f"{PUBLIC}:8080", f"{API_SERVICE}:443", f"{ROUTER}:53", f"{CGNAT}:53"], "open"),
                    **dict.fromkeys([f"{METADATA}:80", f"{NODE_LINK_LOCAL}:80", f"{CGNAT}:22"], "no answer")}, said
    assert lan_farm.probe("node", f"{METADATA}:80") == {f"{METADATA}:80": "open"}


def test_a_lease_pod_reaches_neither_the_tailnet_nor_metadata_while_the_cluster_works(farm, tmp_path):
    """The attack: from a lease's pod, a tailnet peer's service, Tailscale's resolver on any port but DNS, a
    metadata service, the API directly at its tailnet address and the node's own tailnet address (its SSH).  With the
    role's filter loaded (twice: the file replaces its table) they get no answer, while the pod still reaches a
    public address, the API through its Service (DNAT) and Tailscale's DNS (CoreDNS's upstream when Tailscale runs
    the node's DNS), a tailnet peer's connection into the pod gets its replies, and the node's own traffic to the
    tailnet is untouched.  Without the table every one of the attacks is open (checked once, with the load skipped).
    The unit's stop deletes the table whole."""
    network = pod_network()
    assert network == "10.42.0.0/16"  # k3s's default cluster-cidr, which m2p leaves as it is
    tailscale = {"k3s_vpn_auth_file": TAILSCALE, "ansible_check_mode": False,
                 "k3s_nft_found": {"rc": 0, "stdout": shutil.which("nft") or "nft"}}
    assert role_loads_the_filter(**tailscale)
    table = rendered("m2p-pods.nft.j2", k3s_pod_network=network, k3s_vpn_auth_file=TAILSCALE)
    farm.run("node", "nft", "-f", "-", stdin=table)
    farm.run("node", "nft", "-f", "-", stdin=table)
    assert farm.run("node", "nft", "list", "tables").split().count("m2p-pods") == 1

    said = farm.probe("pod", f"{PUBLIC}:8080", f"{API_SERVICE}:443", f"{QUAD100}:53",
                      f"{PEER}:8080", f"{PEER}:6443", f"{QUAD100}:80", f"{METADATA}:80", f"{NODE_TAILNET}:22")
    assert said == {**dict.fromkeys([f"{PUBLIC}:8080", f"{API_SERVICE}:443", f"{QUAD100}:53"], "open"),
                    **dict.fromkeys([f"{PEER}:8080", f"{PEER}:6443", f"{QUAD100}:80", f"{METADATA}:80",
                                     f"{NODE_TAILNET}:22"], "no answer")}, said
    assert farm.probe("tailnet", f"{POD}:8080") == {f"{POD}:8080": "open"}  # into the pod: its replies pass
    assert farm.probe("node", f"{PEER}:8080", f"{METADATA}:80") == dict.fromkeys([f"{PEER}:8080", f"{METADATA}:80"],
                                                                                  "open")

    unit = rendered("m2p-pods.service.j2", ansible_managed="Ansible managed", k3s_nft=shutil.which("nft") or "nft",
                    k3s_pod_filter_file=str(tmp_path / "m2p-pods.nft"))
    stop = next(line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStop="))
    farm.run("node", *stop.lstrip("-").split())
    assert "m2p-pods" not in farm.run("node", "nft", "list", "tables")
    assert farm.probe("pod", f"{PEER}:8080") == {f"{PEER}:8080": "open"}  # and with it the filter


def test_a_dual_stack_pod_network_gets_the_ipv6_rules_and_loads():
    """k3s_pod_network IPv4,IPv6 (a dual-stack cluster-cidr): the IPv6 part's pods are kept off every ULA but their
    own (Tailscale's fd7a:115c:a1e0::/48 among them), in either mode; the tables are ones the kernel's nftables
    takes."""
    table = rendered("m2p-pods.nft.j2", k3s_pod_network="10.42.0.0/16, fd42:42::/56", k3s_vpn_auth_file=TAILSCALE)
    assert "ip6 saddr fd42:42::/56 ip6 daddr != fd42:42::/56 ip6 daddr fc00::/7 drop" in table
    assert table.count("ip saddr 10.42.0.0/16 ip daddr { 100.64.0.0/10, 169.254.0.0/16 } drop") == 2
    lan = rendered("m2p-pods.nft.j2", k3s_pod_network="10.42.0.0/16, fd42:42::/56", k3s_vpn_auth_file="")
    assert "ip6 saddr fd42:42::/56 ip6 daddr != fd42:42::/56 ip6 daddr fc00::/7 drop" in lan  # AWS's fd00:ec2::254
    rules = [line for line in lan.splitlines() if not line.lstrip().startswith("#")]
    assert lan.count("ip saddr 10.42.0.0/16 ip daddr { 100.64.0.0/10, 169.254.0.0/16 } drop") == 2
    assert [line.strip() for line in rules if "100.64" in line and "accept" in line] == [
        "ip saddr 10.42.0.0/16 ip daddr 100.64.0.0/10 meta l4proto { tcp, udp } th dport 53 accept"]
    assert not [line for line in rules if "100.100" in line]
    path = Path(shutil.which("nft") or "nft")
    for each in (table, lan):
        done = subprocess.run([str(path), "-c", "-f", "-"], input=each, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
