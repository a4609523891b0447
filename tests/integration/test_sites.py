"""A farm across sites on sandbox rigs (issue 37): `m2p sites apply` sets up each member's WireGuard tunnel with
the role `tunnel` over real SSH and Ansible, keys made on each member, then `m2p convert` runs k3s on it.  The rigs
share one LAN here (the NAT lab, tests/integration/test_sites_lab.py, proves the same plan behind masquerading
routers); what this proves is the rig side: the refusal without WireGuard's tools, the two runs (keys, then
configurations), userspace WireGuard under systemd, the hub forwarding only what arrives on the tunnel, a second
run and --check changing nothing, convert refused until the tunnel is up and then configuring k3s on it (the
STAND-IN k3s stops at start when flannel's interface is missing, as flannel does), status showing each tunnel,
remove refused while k3s runs on the tunnel, and revert and remove taking everything off."""

from __future__ import annotations

import json
import shutil

import yaml

from m2p_sandbox import rig as sandbox
from m2p_sandbox.bundle import build_test_bundle

from .conftest import m2p, outcomes, rig_entry, run, ssh

TOOLS = ("/usr/bin/wg", "/usr/bin/wireguard-go")  # Debian's wireguard-tools and wireguard-go (scripts/install)


def test_sites_apply_runs_each_members_tunnel_and_remove_takes_it_off(boot_rigs, tmp_path):
    hub, home = boot_rigs(sandbox.RigSpec("st-hub", "plain", ("rtx3060",)),
                          sandbox.RigSpec("st-home", "hiveos", ("rtx3060",)))
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"children": {
        "k3s_server": {"hosts": {"st-hub": rig_entry(hub, m2p_hub_endpoint=f"{hub.address}:51820")}},
        "k3s_agent": {"hosts": {"st-home": rig_entry(home, m2p_site="home")}}}}}))
    common = ["-i", str(inv), "--accept-new", "--known-hosts", str(tmp_path / "known_hosts"), "--yes", "--json"]

    # A HiveOS rig has no WireGuard tools: refused, with what to install, and nothing made.
    bare = m2p("sites", "apply", *common)
    assert bare.returncode == 12, bare.stderr[-2000:]
    said = outcomes(bare)
    assert "has no wg (WireGuard's tools): install wireguard-tools" in said["st-home"]["message"], said
    with ssh(home) as client:
        assert run(client, "sudo test -e /etc/m2p/tunnel")[0] == 1
    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    convert = ["convert", *common, "--bundle", str(bundle)]
    early = m2p(*convert)  # k3s on a tunnel that is not there would never start: refused, rigs untouched
    assert early.returncode == 12, early.stderr[-2000:]
    assert {o["message"].split(": ", 1)[1] for o in outcomes(early).values()} == {
        "it is in a farm across sites and has no tunnel yet: run `m2p sites apply` first; not touched"}

    for r in (hub, home):  # the owner installs them (apt-get install wireguard-tools wireguard-go)
        for tool in TOOLS:
            shutil.copy2(tool, r.path / "merged" / "usr/local/bin" / tool.rsplit("/", 1)[1])

    first = m2p("sites", "apply", *common)
    if first.returncode != 0:  # say why the unit failed, from the hub's journal
        with ssh(hub) as client:
            journal = run(client, "sudo journalctl -u m2p-tunnel --no-pager -n 30")[1]
        raise AssertionError(first.stdout[-2000:] + first.stderr[-3000:] + journal)
    assert {n: o["result"] for n, o in outcomes(first).items()} == {"st-hub": "changed", "st-home": "changed"}
    with ssh(home) as client:
        # The hub's sshd answers at its tunnel address: traffic crosses the tunnel (the rig has no ping).
        rc, out = run(client, "python3 -c \"import socket; print(socket.create_connection(('10.237.0.1', 22), 10)"
                              ".recv(4).decode())\" && sudo stat -c '%a %U' /etc/m2p/tunnel /etc/m2p/tunnel/private.key"
                              " && systemctl is-active m2p-tunnel && ip -o link show m2p0")
        assert rc == 0 and "SSH-\n755 root\n600 root\nactive" in out and "mtu 1280" in out, out
        private = run(client, "sudo cat /etc/m2p/tunnel/private.key")[1].strip()
    with ssh(hub) as client:
        rc, out = run(client, "sudo wg show m2p0 latest-handshakes && cat /proc/sys/net/ipv4/conf/m2p0/forwarding "
                              "/proc/sys/net/ipv4/conf/eth0/forwarding")
        assert rc == 0, out
        handshake, forwarding = out.split()[1], out.split()[2:]
        assert int(handshake) > 0 and forwarding == ["1", "0"], out  # relays the tunnel only
    assert private and private not in first.stdout + first.stderr  # the key never left the rig

    again = m2p("sites", "apply", *common)
    assert {n: o["result"] for n, o in outcomes(again).items()} == {"st-hub": "converged", "st-home": "converged"}
    check = m2p("sites", "apply", *common, "--check")
    assert check.returncode == 0 and {o["result"] for o in outcomes(check).values()} == {"converged"}, check.stdout

    converted = m2p(*convert)
    assert converted.returncode == 0, converted.stdout[-2000:] + converted.stderr[-3000:]
    assert {o["result"] for o in outcomes(converted).values()} == {"changed"}
    with ssh(home) as client:
        rc, out = run(client, "sudo cat /etc/rancher/k3s/config.yaml; systemctl is-active k3s-agent")
        assert 'server: "https://10.237.0.1:6443"' in out and 'node-ip: "10.237.0.2"' in out, out
        assert 'flannel-iface: "m2p0"' in out and out.rstrip().endswith("active"), out
    with ssh(hub) as client:
        rc, out = run(client, "sudo cat /etc/rancher/k3s/config.yaml")
        assert 'node-ip: "10.237.0.1"' in out and 'tls-san:\n  - "10.237.0.1"' in out, out
    shown = m2p("status", "-i", str(inv), "--known-hosts", str(tmp_path / "known_hosts"), "--json")
    tunnels = {r["rig"]: r["tunnel"] for r in json.loads(shown.stdout)}
    assert all(t["ok"] and t["link"] == "up" and t["mtu"] == 1280 and t["peers"] == 1 for t in tunnels.values()), \
        tunnels
    # k3s runs on the tunnels now: taking them off first would cut both nodes off the cluster. Refused, untouched.
    early_off = m2p("sites", "remove", *common)
    assert early_off.returncode == 12, early_off.stderr[-2000:]
    assert all("runs on its tunnel: `m2p revert` it first" in o["message"] for o in outcomes(early_off).values())
    with ssh(home) as client:
        assert run(client, "systemctl is-active m2p-tunnel k3s-agent")[1].split() == ["active", "active"]
    reverted = m2p("revert", *common)
    assert reverted.returncode == 0, reverted.stdout[-2000:] + reverted.stderr[-3000:]

    off = m2p("sites", "remove", *common)
    assert off.returncode == 0 and {o["result"] for o in outcomes(off).values()} == {"changed"}, off.stderr[-2000:]
    for r in (hub, home):
        with ssh(r) as client:
            rc, out = run(client, "ip link show m2p0; sudo ls /etc/m2p/tunnel /etc/systemd/system/m2p-tunnel.service")
            assert "does not exist" in out and "No such file" in out, out
    off_again = m2p("sites", "remove", *common)
    assert {o["result"] for o in outcomes(off_again).values()} == {"converged"}, off_again.stdout
