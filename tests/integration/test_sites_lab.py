"""A farm across sites, the network half (issue 37): m2p's tunnel plan (fleet/tunnel.py) configures real WireGuard
(wireguard-go, wg) in a NAT lab of network namespaces (sandbox/m2p_sandbox/sites.py): a public hub, two homes
behind masquerading routers that both use 192.168.1.0/24, one of them on a 1400-byte path.

What it proves: the hub reaches a listener on a rig behind NAT at its tunnel address; a rig at one home reaches
one at the other through the hub; dialing a home rig at its router's public address (what a mesh or
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

# A listener on the tunnel address: GET answers "rig NAME"; POST counts the bytes it received.
SERVER = textwrap.dedent("""
    import http.server, sys
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
    http.server.HTTPServer((sys.argv[1], 8080), H).serve_forever()
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
