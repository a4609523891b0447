"""A farm across sites on sandbox rigs (issue 37): a hub on the sandbox LAN (its "public" address) and a HiveOS rig
behind a home router that masquerades and lets nothing in (network.behind_nat).  The controller cannot reach the
rig, so it joins from its site: `m2p sites invite` prints a bundle of public facts, `m2p join` runs in the router's
namespace (a machine at the rig's site) over real SSH and Ansible, the owner puts the rig's printed key in the
inventory, and `m2p sites apply` gives the hub its peer; from then on the controller reaches the rig through the
hub (m2p_jump_host) and `m2p convert` runs k3s over the tunnel (the STAND-IN k3s stops at start when flannel's
interface is missing, as flannel does).  Also: the refusal without WireGuard's tools, userspace WireGuard under
systemd, the hub forwarding only what arrives on the tunnel, --check changing nothing, status showing each tunnel,
remove refused while k3s runs on it, and revert and remove taking everything off, the joined rig's tunnel after
the run that removes it.  The NAT lab (tests/integration/test_sites_lab.py) proves site-to-site traffic and the
small-MTU path."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import paramiko
import yaml

from m2p_sandbox import network
from m2p_sandbox import rig as sandbox
from m2p_sandbox.bundle import build_test_bundle

from .conftest import M2P, m2p, outcomes, rig_entry, run, ssh

TOOLS = ("/usr/bin/wg", "/usr/bin/wireguard-go")  # Debian's wireguard-tools and wireguard-go (scripts/install)


def at_site(router: str, *args: str) -> subprocess.CompletedProcess[str]:
    """m2p run on a machine at the rig's site (the home router's namespace): it reaches the rig's LAN address."""
    return subprocess.run(["ip", "netns", "exec", router, *M2P, *args], capture_output=True, text=True, timeout=300)


def through_hub(hub: sandbox.Rig, address: str, user: str, key_file: str) -> paramiko.SSHClient:
    """The test's own SSH to a joined rig, through the hub (as m2p_jump_host does)."""
    jump = ssh(hub)
    transport = jump.get_transport()
    assert transport is not None
    channel = transport.open_channel("direct-tcpip", (address, 22), ("127.0.0.1", 0), timeout=10)
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    client.connect(address, username=user, key_filename=key_file, sock=channel, timeout=10, allow_agent=False,
                   look_for_keys=False)
    return client


def hub_journal(hub: sandbox.Rig) -> str:
    """Why the hub's tunnel unit failed, when it did: its journal and status."""
    with ssh(hub) as client:
        return run(client, "sudo journalctl -u m2p-tunnel --no-pager -n 40; systemctl status m2p-tunnel --no-pager")[1]


def test_a_rig_behind_nat_joins_from_its_site_and_the_farm_runs_over_the_tunnel(boot_rigs, tmp_path):
    hub, home = boot_rigs(sandbox.RigSpec("st-hub", "plain", ("rtx3060",)),
                          sandbox.RigSpec("st-home", "hiveos", ("rtx3060",)))
    router = network.behind_nat(home.slot)
    # Until its tunnel is up, the hub's packets for tunnel addresses would go to its default route (the machine
    # running the test): they end in the hub instead, whatever that machine forwards.
    subprocess.run(["ip", "-n", network.namespace_name(hub.slot), "route", "add", "unreachable", "10.237.0.0/24",
                    "metric", "4000"], check=True)
    home_root = home.path / "merged"
    # The controller's own key for the joined rig: only the join lets it in.
    controller_key = tmp_path / "controller_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "owner@laptop", "-f", str(controller_key)],
                   check=True)
    inv = tmp_path / "rigs.yml"
    home_entry = {"ansible_host": "10.237.0.2", "m2p_jump_host": "st-hub", "ansible_user": home.user,
                  "ansible_ssh_private_key_file": str(controller_key), "m2p_site": "home"}

    def write_inventory(**extra: str) -> None:
        inv.write_text(yaml.safe_dump({"all": {"children": {
            "k3s_server": {"hosts": {"st-hub": rig_entry(hub, m2p_hub_endpoint=f"{hub.address}:51820")}},
            "k3s_agent": {"hosts": {"st-home": {**home_entry, **extra}}}}}}))

    write_inventory()
    common = ["-i", str(inv), "--accept-new", "--known-hosts", str(tmp_path / "known_hosts"), "--yes", "--json"]
    with ssh(hub) as client:  # the rig is behind its router now: the hub cannot reach its old address
        rc, out = run(client, f"timeout 3 bash -c 'echo > /dev/tcp/{home.address}/22' 2>&1; echo rc=$?")
        assert "rc=0" not in out, out
    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    convert = ["convert", *common, "--bundle", str(bundle)]
    early = m2p(*convert, "--limit", "st-hub")  # k3s on a tunnel that is not there would never start: refused
    assert early.returncode == 11, early.stderr[-2000:]
    assert outcomes(early)["st-hub"]["message"].endswith(
        "it is in a farm across sites and has no tunnel yet: run `m2p sites apply` first; not touched")

    shutil.copy2(TOOLS[0], hub.path / "merged/usr/local/bin/wg")  # the owner installs them on the hub
    shutil.copy2(TOOLS[1], hub.path / "merged/usr/local/bin/wireguard-go")
    first = m2p("sites", "apply", *common)
    said = outcomes(first)
    assert first.returncode == 11 and said["st-hub"]["result"] == "changed", \
        first.stdout[-2000:] + first.stderr[-2000:] + hub_journal(hub)
    assert said["st-home"]["result"] == "unreachable", said  # not joined yet

    invite = m2p("sites", "invite", "st-home", "-i", str(inv), "--known-hosts", str(tmp_path / "known_hosts"),
                 "--json")
    assert invite.returncode == 0, invite.stderr[-2000:]
    invited = json.loads(invite.stdout)
    assert invited["inventory"] == {"ansible_host": "10.237.0.2", "m2p_jump_host": "st-hub"}
    join = ["join", invited["bundle"], "--host", f"{network.HOME_LAN}.2", "--user", home.user, "--key",
            home.key_file, "--accept-new", "--known-hosts", str(tmp_path / "site_known_hosts"), "--yes", "--json"]
    bare = at_site(router, *join)  # HiveOS has no WireGuard tools: said, with what to install, nothing made
    assert bare.returncode == 11, bare.stdout[-2000:] + bare.stderr[-2000:]
    assert "has no wg (WireGuard's tools): install wireguard-tools" in json.loads(bare.stdout)["message"]
    assert not (home_root / "etc/m2p/tunnel").exists()
    shutil.copy2(TOOLS[0], home_root / "usr/local/bin/wg")
    shutil.copy2(TOOLS[1], home_root / "usr/local/bin/wireguard-go")
    joined = at_site(router, *join)
    assert joined.returncode == 0, joined.stdout[-2000:] + joined.stderr[-3000:]
    printed = json.loads(joined.stdout)
    assert printed["result"] == "changed" and len(printed["public_key"]) == 44, printed
    private = (home_root / "etc/m2p/tunnel/private.key").read_text().strip()
    assert (home_root / "etc/m2p/tunnel/private.key").stat().st_mode & 0o777 == 0o600

    write_inventory(m2p_tunnel_public_key=printed["public_key"])  # the owner's word
    second = m2p("sites", "apply", *common)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:] + hub_journal(hub)
    said = outcomes(second)
    assert said["st-hub"]["result"] == "changed", said  # the peer
    assert said["st-home"] == {**said["st-home"], "result": "converged", "message": "joined: reached through the hub"}
    with through_hub(hub, "10.237.0.2", home.user, str(controller_key)) as client:
        rc, out = run(client, "systemctl is-active m2p-tunnel && ip -o link show m2p0 && "
                              "grep -c m2p-controller ~/.ssh/authorized_keys")
        assert rc == 0 and out.startswith("active") and "mtu 1280" in out and out.rstrip().endswith("1"), out
    with ssh(hub) as client:
        rc, out = run(client, "sudo wg show m2p0 latest-handshakes && cat /proc/sys/net/ipv4/conf/m2p0/forwarding "
                              "/proc/sys/net/ipv4/conf/eth0/forwarding")
        assert rc == 0 and int(out.split()[1]) > 0 and out.split()[2:] == ["1", "0"], out  # relays the tunnel only
    texts = first.stdout + first.stderr + invite.stdout + joined.stdout + joined.stderr + second.stdout + second.stderr
    assert private not in texts  # the key never left the rig
    check = m2p("sites", "apply", *common, "--check")
    assert check.returncode == 0 and {o["result"] for o in outcomes(check).values()} == {"converged"}, check.stdout

    converted = m2p(*convert)  # over the tunnel, through the hub
    assert converted.returncode == 0, converted.stdout[-2000:] + converted.stderr[-3000:]
    assert {o["result"] for o in outcomes(converted).values()} == {"changed"}
    k3s_config = (home_root / "etc/rancher/k3s/config.yaml").read_text()
    assert 'server: "https://10.237.0.1:6443"' in k3s_config and 'node-ip: "10.237.0.2"' in k3s_config
    assert 'flannel-iface: "m2p0"' in k3s_config
    shown = m2p("status", "-i", str(inv), "--known-hosts", str(tmp_path / "known_hosts"), "--json")
    tunnels = {r["rig"]: r["tunnel"] for r in json.loads(shown.stdout)}
    assert all(t["ok"] and t["link"] == "up" and t["mtu"] == 1280 and t["peers"] == 1 for t in tunnels.values()), \
        tunnels
    # k3s runs on the tunnels now: taking them off first would cut both nodes off the cluster. Refused, untouched.
    early_off = m2p("sites", "remove", *common)
    assert early_off.returncode == 12, early_off.stderr[-2000:]
    assert all("runs on its tunnel: `m2p revert` it first" in o["message"] for o in outcomes(early_off).values())
    reverted = m2p("revert", *common)
    assert reverted.returncode == 0, reverted.stdout[-2000:] + reverted.stderr[-3000:]

    off = m2p("sites", "remove", *common)
    assert off.returncode == 0 and {o["result"] for o in outcomes(off).values()} == {"changed"}, off.stderr[-2000:]
    assert "m2p can no longer reach it" in outcomes(off)["st-home"]["message"]
    until = time.monotonic() + 30  # the joined rig's tunnel goes a few seconds after the run that removed it
    while (home_root / "etc/systemd/system/m2p-tunnel.service").exists() and time.monotonic() < until:
        time.sleep(1)
    assert not (home_root / "etc/systemd/system/m2p-tunnel.service").exists()
    assert not (home_root / "etc/m2p/tunnel").exists() and not (home_root / "opt/m2p/m2p-tunnel").exists()
    home_keys = home_root / "home" / home.user / ".ssh/authorized_keys"
    assert "m2p-controller" not in home_keys.read_text()
    with ssh(hub) as client:
        rc, out = run(client, "ip link show m2p0; sudo ls /etc/m2p/tunnel /etc/systemd/system/m2p-tunnel.service")
        assert "does not exist" in out and "No such file" in out, out
    inside = subprocess.run(["ip", "netns", "exec", f"m2p{home.slot:05d}", "ip", "link", "show", "m2p0"],
                            capture_output=True, text=True)
    assert "does not exist" in inside.stderr, inside.stdout + inside.stderr
