"""A farm across sites on sandbox rigs (issue 37): `m2p sites apply` sets up each member's WireGuard tunnel with
the role `tunnel` over real SSH and Ansible, keys made on each member.  The rigs share one LAN here (the NAT lab,
tests/integration/test_sites_lab.py, proves the same plan behind masquerading routers); what this proves is the
rig side: the refusal without WireGuard's tools, the two runs (keys, then configurations), userspace WireGuard
under systemd, the hub forwarding only what arrives on the tunnel, a second run and --check changing nothing,
and remove taking everything off."""

from __future__ import annotations

import shutil

import yaml

from m2p_sandbox import rig as sandbox

from .conftest import m2p, outcomes, rig_entry, run, ssh

TOOLS = ("/usr/bin/wg", "/usr/bin/wireguard-go")  # Debian's wireguard-tools and wireguard-go (scripts/install)


def test_sites_apply_runs_each_members_tunnel_and_remove_takes_it_off(boot_rigs, tmp_path):
    hub, home = boot_rigs(sandbox.RigSpec("st-hub", "plain"), sandbox.RigSpec("st-home", "hiveos"))
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

    off = m2p("sites", "remove", *common)
    assert off.returncode == 0 and {o["result"] for o in outcomes(off).values()} == {"changed"}, off.stderr[-2000:]
    for r in (hub, home):
        with ssh(r) as client:
            rc, out = run(client, "ip link show m2p0; sudo ls /etc/m2p/tunnel /etc/systemd/system/m2p-tunnel.service")
            assert "does not exist" in out and "No such file" in out, out
    off_again = m2p("sites", "remove", *common)
    assert {o["result"] for o in outcomes(off_again).values()} == {"converged"}, off_again.stdout
