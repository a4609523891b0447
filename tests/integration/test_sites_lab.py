"""A farm across sites, the network half (issue 37): m2p's tunnel plan (fleet/tunnel.py) configures real WireGuard
(wireguard-go, wg) in a NAT lab of network namespaces (sandbox/m2p_sandbox/sites.py): a public hub, two homes
behind masquerading routers that both use 192.168.1.0/24, one of them on a 1400-byte path.

What it proves: the hub reaches a listener on a rig behind NAT at its tunnel address; a rig at one home reaches
one at the other through the hub (WireGuard's routing alone); with role tunnel's filter (issue 55) a fallen rig
reaches no other rig's SSH or services, no LAN behind another router, nothing on the hub's links, and a pod reaches
neither the tunnel nor a tailnet nor a metadata service, while the API, the jump and pod-to-pod VXLAN pass; dialing a home rig at its router's public address (what a mesh or
--node-external-ip does) gets no handshake; a 2 MB upload over the small-MTU home passes at the plan's MTU.
No sandbox rig boots here (k3s and the rig-side role come with `m2p join`, still to build): seconds, not minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import jinja2
import pytest

from m2p_sandbox import sites
from miner2provider.core import inventory
from miner2provider.fleet import tunnel

INVENTORY = f"""all:
  children:
    k3s_server:
      hosts:
        vps: {{ansible_host: {sites.HUB_PUBLIC}, m2p_hub_endpoint: "{sites.HUB_PUBLIC}:51820"}}
    k3s_agent:
      hosts:
        home-rig: {{ansible_host: 10.237.0.2, m2p_site: home}}
        uncle-rig: {{ansible_host: 10.237.0.3, m2p_site: uncle}}
"""
ROLE = {"vps": "hub", "home-rig": "a1", "uncle-rig": "b1"}  # inventory name -> the lab's namespace

# A listener on the tunnel address (port 8080 unless a third argument says): GET answers "rig NAME"; POST counts the bytes it received.
SERVER = textwrap.dedent("""
    import http.server, socketserver, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = ("rig " + sys.argv[2]).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def do_POST(self):
            n = int(self.headers["Content-Length"]); got = 0
            while got < n:
                chunk = self.rfile.read(min(65536, n - got))
                if not chunk: break
                got += len(chunk)
            body = str(got).encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a): pass
    class S(http.server.HTTPServer):
        def server_bind(self):  # without HTTPServer's reverse lookup of the address (no resolver in the lab)
            socketserver.TCPServer.server_bind(self)
            self.server_name, self.server_port = "lab", self.server_address[1]
    S((sys.argv[1], int(sys.argv[3]) if len(sys.argv) > 3 else 8080), H).serve_forever()
""")
CLIENT = textwrap.dedent("""
    import sys, urllib.request
    data = b"x" * int(sys.argv[2]) if len(sys.argv) > 2 else None
    print(urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=data), timeout=float(sys.argv[3]) if
          len(sys.argv) > 3 else 10).read().decode())
""")


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[sites.Lab, tunnel.TunnelPlan]]:
    if os.geteuid() != 0:
        pytest.fail("the NAT lab makes network namespaces and must run as root (scripts/test as root)")
    missing = sites.missing_tools()
    if missing:  # never a skip: a machine that cannot run it must go red
        pytest.fail(f"the NAT lab needs {', '.join(missing)}: run scripts/install (apt-get install {' '.join(missing)})")
    (tmp_path / "rigs.yml").write_text(INVENTORY)
    plan = tunnel.plan(list(inventory.load(tmp_path / "rigs.yml").hosts))
    assert plan is not None
    state = tmp_path / "lab"
    state.mkdir(mode=0o700)
    the_lab = sites.Lab(f"{os.getpid() % 100000:05d}", state)
    servers: list[subprocess.Popen[bytes]] = []
    try:
        the_lab.build()
        names = {member: f"wg{the_lab.tag}{ROLE[member][0]}" for member in ROLE}
        keys = {member: the_lab.wireguard(ROLE[member], names[member]) for member in ROLE}
        for member, role in ROLE.items():
            the_lab.configure(role, names[member], tunnel.wg_config(plan, member, keys),
                              f"{plan.member(member).address}/{plan.network.prefixlen}", plan.mtu)
        # The hub forwards between sites, as role tunnel sets it: on the tunnel's interface only.
        the_lab.run("hub", "sysctl", "-qw", f"net.ipv4.conf.{names['vps']}.forwarding=1")
        for member, role in ROLE.items():
            servers.append(subprocess.Popen(["ip", "netns", "exec", the_lab.ns(role), sys.executable, "-c", SERVER,
                                             str(plan.member(member).address), member]))
        yield the_lab, plan
    finally:
        for server in servers:
            server.terminate()
            server.wait(5)
        the_lab.close()


def fetch(the_lab: sites.Lab, role: str, url: str, upload: int = 0, timeout: float = 10) -> str:
    argv = [sys.executable, "-c", CLIENT, url, *([str(upload), str(timeout)] if upload else [])]
    deadline = time.monotonic() + 30  # the first packet waits for the handshake (and the server to listen)
    while True:
        done = the_lab.run(role, *argv, check=False, timeout=timeout + 10)
        if done.returncode == 0 or time.monotonic() > deadline:
            return done.stdout.strip() or done.stderr.strip()[-300:]
        time.sleep(0.5)


def test_the_hub_reaches_rigs_behind_nat_and_rigs_reach_each_other_through_it(lab):
    the_lab, plan = lab
    home, uncle = plan.member("home-rig").address, plan.member("uncle-rig").address
    assert fetch(the_lab, "hub", f"http://{home}:8080/") == "rig home-rig"
    assert fetch(the_lab, "hub", f"http://{uncle}:8080/") == "rig uncle-rig"
    assert fetch(the_lab, "a1", f"http://{uncle}:8080/") == "rig uncle-rig"  # home -> hub -> uncle
    assert fetch(the_lab, "b1", f"http://{home}:8080/") == "rig home-rig"
    shown = the_lab.run("hub", "wg", "show", f"wg{the_lab.tag}h", "latest-handshakes").stdout.split()
    assert len(shown) == 4 and all(int(t) > 0 for t in shown[1::2]), shown  # both rigs shook hands, dialing out


def test_a_rig_dialed_at_its_routers_public_address_never_answers(lab):
    """What a WireGuard mesh (flannel wireguard-native) or --node-external-ip does: the home router has no
    forward for it, so no handshake ever completes (k3s-io/k3s#2689)."""
    the_lab, plan = lab
    mesh = f"wg{the_lab.tag}m"
    key = the_lab.run("a1", "wg", "genkey").stdout.strip()
    (the_lab.state / "mesh.key").write_text(key)
    (the_lab.state / "mesh.key").chmod(0o600)
    the_lab.daemons.append(subprocess.Popen(["ip", "netns", "exec", the_lab.ns("a1"), "wireguard-go", "-f", mesh]))
    deadline = time.monotonic() + 10
    while the_lab.run("a1", "ip", "link", "show", mesh, check=False).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    uncle_key = the_lab.run("b1", "wg", "show", f"wg{the_lab.tag}b", "public-key").stdout.strip()
    the_lab.run("a1", "wg", "set", mesh, "private-key", str(the_lab.state / "mesh.key"), "peer", uncle_key,
                "endpoint", "198.51.100.6:51820", "allowed-ips", "10.99.0.2/32", "persistent-keepalive", "1")
    the_lab.run("a1", "ip", "addr", "add", "10.99.0.1/24", "dev", mesh)
    the_lab.run("a1", "ip", "link", "set", mesh, "up")
    the_lab.run("a1", "ping", "-c3", "-W1", "10.99.0.2", check=False)
    handshakes = the_lab.run("a1", "wg", "show", mesh, "latest-handshakes").stdout.split()
    assert handshakes[1:] == ["0"], handshakes


def test_a_2mb_upload_passes_over_the_small_mtu_site_at_the_plans_mtu(lab):
    the_lab, plan = lab
    assert plan.mtu == 1280
    hub = plan.hub.address
    assert fetch(the_lab, "b1", f"http://{hub}:8080/", upload=2 * 1024 * 1024, timeout=20) == str(2 * 1024 * 1024)


def test_the_same_upload_stalls_at_wireguards_default_mtu_on_that_path(lab):
    """The lab is no kinder than the path: at 1420 (wg-quick's default) the tunnel's packets outgrow home B's
    1400 bytes and vanish without an ICMP reply, so TCP never learns to send smaller ones."""
    the_lab, plan = lab
    for role, name in (("hub", f"wg{the_lab.tag}h"), ("b1", f"wg{the_lab.tag}b")):
        the_lab.run(role, "ip", "link", "set", name, "mtu", "1420")
    hub = plan.hub.address
    assert fetch(the_lab, "b1", f"http://{hub}:8080/") == "rig vps"  # small packets still pass: the tunnel is up
    done = the_lab.run("b1", sys.executable, "-c", CLIENT, f"http://{hub}:8080/", str(2 * 1024 * 1024), "8",
                       check=False, timeout=30)
    assert done.returncode != 0 and "timed out" in done.stderr, done.stdout + done.stderr[-500:]


FILTER = Path(tunnel.__file__).parents[2] / "ansible_collections/m2p/rigs/roles/tunnel/templates/m2p-tunnel.nft.j2"
PROBE = textwrap.dedent("""
    import socket, sys
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
        print("open")
    except OSError as exc:
        print(type(exc).__name__)
""")


def load_filter(the_lab: sites.Lab, plan: tunnel.TunnelPlan, member: str) -> None:
    """Role tunnel's own filter (its template, rendered with the variables m2p gives the role), in the member's
    namespace, as the role's script loads it."""
    text = jinja2.Template(FILTER.read_text(), undefined=jinja2.StrictUndefined).render(
        tunnel_interface=f"wg{the_lab.tag}{ROLE[member][0]}", tunnel_forward=member == plan.hub.name,
        tunnel_network=str(plan.network), tunnel_hub_address=str(plan.hub.address),
        tunnel_pod_network=sites.POD_NETWORK)
    the_lab.run(ROLE[member], "nft", "-f", "-", stdin=text)
    the_lab.run(ROLE[member], "nft", "-f", "-", stdin=text)  # a second load replaces the table: idempotent


def reachable(the_lab: sites.Lab, probes: dict[str, tuple[str, str, int]], timeout: float = 2) -> dict[str, str]:
    """name -> "open" or why not, for (role, host, port) probes run side by side (a dropped SYN waits out the
    timeout: one wait for all)."""
    running = {name: subprocess.Popen(["ip", "netns", "exec", the_lab.ns(role), sys.executable, "-c", PROBE, host,
                                       str(port), str(timeout)], stdout=subprocess.PIPE, text=True)
               for name, (role, host, port) in probes.items()}
    return {name: (proc.communicate(timeout=timeout + 10)[0].strip()) for name, proc in running.items()}


def test_a_fallen_rig_reaches_nothing_of_another_site_and_its_pods_reach_no_tunnel_tailnet_or_metadata(lab):
    """Issue 55 points 1 and 2.  k3s turns forwarding on for every interface and flannel's VXLAN (UDP 8472) takes
    any sender's word; with role tunnel's filter on each member, a rig whose root fell (home-rig: it rewrites its
    own WireGuard peer and routes, it speaks VXLAN as it likes) still reaches no other rig's SSH or services, no
    host on the other site's LAN (through that rig's flannel.1) and nothing on the hub's links; a pod on a rig
    (a lease's tenant) reaches neither the tunnel's members nor a tailnet (100.64.0.0/10) nor a metadata service
    (169.254.169.254).  What the cluster needs still flows: the hub's SSH to a rig (the controller's jump), the
    API on the hub, pod to pod across sites over VXLAN through the hub, and a pod's Service DNAT'd to the API."""
    the_lab, plan = lab
    hub, home, uncle = (str(plan.member(n).address) for n in ("vps", "home-rig", "uncle-rig"))
    wg = {member: f"wg{the_lab.tag}{ROLE[member][0]}" for member in ROLE}
    # k3s on every member: forwarding everywhere, flannel's VXLAN over the tunnel (home 10.42.1.0/24, uncle .2).
    the_lab.run("hub", "sysctl", "-qw", "net.ipv4.conf.all.forwarding=1")
    macs = {m: the_lab.flannel(ROLE[m], wg[m], str(plan.member(m).address), n, plan.mtu)
            for m, n in (("home-rig", 1), ("uncle-rig", 2))}
    the_lab.flannel_peer("a1", 2, macs["uncle-rig"], uncle)
    the_lab.flannel_peer("b1", 1, macs["home-rig"], home)
    pod = the_lab.pod("b1", 2)  # a lease's pod on uncle-rig
    # kube-proxy's DNAT for the API's Service (10.43.0.1:443 -> the server's node IP, the hub's tunnel address).
    the_lab.run("b1", "nft", "-f", "-", stdin=(
        "table ip kubeproxy {\n chain prerouting {\n  type nat hook prerouting priority dstnat;\n"
        f"  ip daddr 10.43.0.1 tcp dport 443 dnat to {hub}:6443\n }}\n}}\n"))
    # What the tenant and the fallen rig are after: a NAS on the uncle's LAN, a tailnet node and a metadata service
    # (both on the uncle's router, as a VPS's gateway answers 169.254.169.254), the hub's upstream (its LAN; it
    # routes the tunnel back through the hub, as hosts behind a hub that is their gateway do).
    the_lab.run("rb", "ip", "addr", "add", f"{sites.LAN}.7/24", "dev", f"l{the_lab.tag}rbb1")
    the_lab.run("rb", "ip", "addr", "add", "100.100.1.1/32", "dev", "lo")
    the_lab.run("rb", "ip", "addr", "add", "169.254.169.254/32", "dev", "lo")
    the_lab.run("inet", "ip", "route", "add", str(plan.network), "via", sites.HUB_PUBLIC)
    listeners = [("rb", f"{sites.LAN}.7", "8080"), ("rb", "100.100.1.1", "8080"), ("rb", "169.254.169.254", "8080"),
                 ("inet", "203.0.113.1", "8080"), (pod, "10.42.2.2", "8080"), ("b1", uncle, "22"),
                 ("hub", hub, "6443")]
    for role, address, port in listeners:
        the_lab.daemons.append(subprocess.Popen(["ip", "netns", "exec", the_lab.ns(role), sys.executable, "-c",
                                                 SERVER, address, role, port]))
    deadline = time.monotonic() + 10
    while set(reachable(the_lab, {a: (r, a, int(p)) for r, a, p in listeners}, 1).values()) != {"open"}:
        assert time.monotonic() < deadline, "the lab's listeners did not start"
        time.sleep(0.1)
    # The fallen rig: its peer (the hub) now carries everything, and the other site's LAN goes over VXLAN.
    hub_key = the_lab.run("a1", "wg", "show", wg["home-rig"], "peers").stdout.strip()
    the_lab.run("a1", "wg", "set", wg["home-rig"], "peer", hub_key, "allowed-ips", "0.0.0.0/0")
    the_lab.run("a1", "ip", "route", "add", "203.0.113.1/32", "dev", wg["home-rig"])
    the_lab.run("a1", "ip", "route", "add", f"{sites.LAN}.7/32", "via", "10.42.2.0", "dev", "flannel.1", "onlink")
    for member in ROLE:
        load_filter(the_lab, plan, member)

    assert fetch(the_lab, "hub", f"http://{uncle}:22/") == "rig b1"  # the jump's SSH port; handshakes done
    said = reachable(the_lab, {
        "api on the hub": ("a1", hub, 6443), "pod across sites": ("a1", "10.42.2.2", 8080),
        "pod to the API's Service": (pod, "10.43.0.1", 443),
        "other rig's ssh": ("a1", uncle, 22), "other rig's service": ("a1", uncle, 8080),
        "other site's LAN": ("a1", f"{sites.LAN}.7", 8080), "hub's LAN": ("a1", "203.0.113.1", 8080),
        "pod to the tunnel": (pod, hub, 8080), "pod to another rig": (pod, home, 8080),
        "pod to the tailnet": (pod, "100.100.1.1", 8080), "pod to metadata": (pod, "169.254.169.254", 8080)})
    assert said == {**{name: "open" for name in list(said)[:3]}, **{name: "TimeoutError" for name in list(said)[3:]}}, \
        said
