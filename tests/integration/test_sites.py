"""A farm across sites on sandbox rigs (issue 37): a hub on the sandbox LAN (its "public" address; a VPS without a
GPU, m2p_control_node: k3s's server and the relay, no GPU stack) and two rigs, a
HiveOS one at home and a plain Debian one away, each behind a home router that masquerades and lets nothing in
(network.behind_nat; both rigs are 192.168.1.2 on their LAN).  The controller cannot reach them, so each joins from
its site: `m2p sites invite` prints a bundle of public facts, `m2p join` runs in the router's namespace (a machine
at the rig's site) over real SSH and Ansible, the owner puts each rig's printed key in the inventory, and `m2p sites
apply` gives the hub its peers; from then on the controller reaches the rigs through the hub (m2p_jump_host) and
`m2p convert` runs k3s over the tunnels (the STAND-IN k3s stops at start when flannel's interface is missing, as
flannel does).  Also: the refusal without WireGuard's tools and nftables, userspace WireGuard under systemd, the hub forwarding
only what arrives on the tunnel, --check changing nothing, status showing each tunnel, the away site's router
going down (the hub names it at once, the home site mines on), `m2p remove` dropping the away rig's peer from the
hub without cutting the home rig's tunnel, `sites remove` refused while k3s runs on a tunnel, and revert and
remove taking everything off, the joined rig's tunnel after the run that removes it.

It is also the jump-host test: m2p's probe (paramiko, direct-tcpip) and Ansible (a ProxyCommand) reach the rigs
only through the hub, both hops' host keys checked against m2p's known_hosts.  The NAT lab
(tests/integration/test_sites_lab.py) proves site-to-site traffic through the hub and the small-MTU path."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

import paramiko
import yaml

from m2p_sandbox import flavours, network
from m2p_sandbox import rig as sandbox
from m2p_sandbox.bundle import build_test_bundle
from m2p_sandbox.kube_api import KubeApiStandin

from .conftest import M2P, m2p, outcomes, point_k3s_kubectl_at, rig_entry, run, ssh

TOOLS = ("/usr/bin/wg", "/usr/bin/wireguard-go")  # Debian's wireguard-tools and wireguard-go (scripts/install)
NFT = "/usr/sbin/nft"  # Debian's nftables (scripts/install)


def install_tools(root: Path) -> None:
    """What the owner installs on a member of a farm across sites: WireGuard's tools and nftables (the tunnel's
    filter).  The sandbox rigs are Debian bookworm like this machine: its binaries, and the libraries nft needs that
    the rig's base lacks."""
    for tool in (*TOOLS, NFT):
        shutil.copy2(tool, root / "usr/local/bin" / Path(tool).name)
    needs = subprocess.run(["ldd", NFT], capture_output=True, text=True, check=True).stdout
    for library in re.findall(r"=> (/\S+)", needs):
        name = Path(library).name
        if not any((root / folder / name).exists() for folder in ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu")):
            shutil.copy2(library, root / "usr/lib/x86_64-linux-gnu" / name)


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


def test_rigs_behind_nat_at_two_sites_join_and_the_farm_runs_over_the_tunnel(boot_rigs, tmp_path):
    # The hub is a VPS: no GPU (no nvidia-smi), a control node that carries k3s's server and the relay.
    hub, home, away = boot_rigs(sandbox.RigSpec("st-hub", "plain", ()),
                                sandbox.RigSpec("st-home", "hiveos", ("rtx3060",)),
                                sandbox.RigSpec("st-away", "plain", ("rtx3070",)))
    # Two homes, each behind its own router, both 192.168.1.2 on their LAN (as two real homes are).
    routers = {home.name: network.behind_nat(home.slot), away.name: network.behind_nat(away.slot)}
    # Until its tunnel is up, the hub's packets for tunnel addresses would go to its default route (the machine
    # running the test): they end in the hub instead, whatever that machine forwards.
    subprocess.run(["ip", "-n", network.namespace_name(hub.slot), "route", "add", "unreachable", "10.237.0.0/24",
                    "metric", "4000"], check=True)
    home_root, away_root = home.path / "merged", away.path / "merged"
    # The controller's own key for the joined rigs: only the join lets it in.
    controller_key = tmp_path / "controller_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "owner@laptop", "-f", str(controller_key)],
                   check=True)
    inv = tmp_path / "rigs.yml"
    tunnel_address = {home.name: "10.237.0.2", away.name: "10.237.0.3"}

    def joined_entry(r: sandbox.Rig, site: str, key: str | None) -> dict[str, str]:
        entry = {"ansible_host": tunnel_address[r.name], "m2p_jump_host": "st-hub", "ansible_user": r.user,
                 "ansible_ssh_private_key_file": str(controller_key), "m2p_site": site}
        return {**entry, "m2p_tunnel_public_key": key} if key else entry

    def write_inventory(keys: dict[str, str], rigs: tuple[sandbox.Rig, ...] = (home, away)) -> None:
        sites = {home.name: "home", away.name: "away"}
        inv.write_text(yaml.safe_dump({"all": {"children": {
            "k3s_server": {"hosts": {"st-hub": rig_entry(hub, m2p_hub_endpoint=f"{hub.address}:51820",
                                                         m2p_control_node=True)}},
            # In this order (home .2, away .3): away is last, so taking it out moves no one's tunnel address.
            "k3s_agent": {"hosts": {r.name: joined_entry(r, sites[r.name], keys.get(r.name)) for r in rigs}}}}},
            sort_keys=False))

    write_inventory({})
    common = ["-i", str(inv), "--accept-new", "--known-hosts", str(tmp_path / "known_hosts"), "--yes", "--json"]
    with ssh(hub) as client:  # the rigs are behind their routers now: the hub cannot reach their old addresses
        rc, out = run(client, f"timeout 3 bash -c 'echo > /dev/tcp/{home.address}/22' 2>&1; echo rc=$?")
        assert "rc=0" not in out, out
    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    convert = ["convert", *common, "--bundle", str(bundle)]
    early = m2p(*convert, "--limit", "st-hub")  # k3s on a tunnel that is not there would never start: refused
    assert early.returncode == 11, early.stderr[-2000:]
    assert outcomes(early)["st-hub"]["message"].endswith(
        "it is in a farm across sites and has no tunnel yet: run `m2p sites apply` first; not touched")

    install_tools(hub.path / "merged")  # the owner installs them on the hub
    first = m2p("sites", "apply", *common)
    said = outcomes(first)
    assert first.returncode == 12 and said["st-hub"]["result"] == "changed", \
        first.stdout[-2000:] + first.stderr[-2000:] + hub_journal(hub)
    assert said["st-home"]["result"] == said["st-away"]["result"] == "unreachable", said  # not joined yet

    printed: dict[str, dict] = {}
    texts = first.stdout + first.stderr
    for r in (home, away):
        invite = m2p("sites", "invite", r.name, "-i", str(inv), "--known-hosts", str(tmp_path / "known_hosts"),
                     "--json")
        assert invite.returncode == 0, invite.stderr[-2000:]
        invited = json.loads(invite.stdout)
        assert invited["inventory"] == {"ansible_host": tunnel_address[r.name], "m2p_jump_host": "st-hub"}
        join = ["join", invited["bundle"], "--host", f"{network.HOME_LAN}.2", "--user", r.user, "--key",
                r.key_file, "--accept-new", "--known-hosts", str(tmp_path / f"{r.name}_known_hosts"), "--yes", "--json"]
        root = r.path / "merged"
        if r is home:  # HiveOS has no WireGuard tools: said, with what to install, nothing made
            bare = at_site(routers[r.name], *join)
            assert bare.returncode == 11, bare.stdout[-2000:] + bare.stderr[-2000:]
            assert ("has no wg (WireGuard's tools) and no nft (nftables: the tunnel's filter keeps other members off "
                    "this one's services and LAN): install wireguard-tools and nftables there (apt-get install "
                    "wireguard-tools nftables)") in json.loads(bare.stdout)["message"], bare.stdout
            assert not (root / "etc/m2p/tunnel").exists()
        install_tools(root)
        joined = at_site(routers[r.name], *join)
        assert joined.returncode == 0, joined.stdout[-2000:] + joined.stderr[-3000:]
        printed[r.name] = json.loads(joined.stdout)
        assert printed[r.name]["result"] == "changed" and len(printed[r.name]["public_key"]) == 44, printed
        assert (root / "etc/m2p/tunnel/private.key").stat().st_mode & 0o777 == 0o600
        texts += invite.stdout + joined.stdout + joined.stderr
    private = {r.name: (r.path / "merged/etc/m2p/tunnel/private.key").read_text().strip() for r in (home, away)}

    keys = {name: p["public_key"] for name, p in printed.items()}
    write_inventory(keys)  # the owner's word
    second = m2p("sites", "apply", *common)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:] + hub_journal(hub)
    said = outcomes(second)
    assert said["st-hub"]["result"] == "changed", said  # the peers
    for name in (home.name, away.name):
        assert said[name] == {**said[name], "result": "converged", "message": "joined: reached through the hub"}
    with through_hub(hub, "10.237.0.2", home.user, str(controller_key)) as client:
        rc, out = run(client, "systemctl is-active m2p-tunnel && ip -o link show m2p0 && "
                              "grep -c m2p-controller ~/.ssh/authorized_keys")
        assert rc == 0 and out.startswith("active") and "mtu 1280" in out and out.rstrip().endswith("1"), out
    with ssh(hub) as client:
        rc, out = run(client, "sudo wg show m2p0 latest-handshakes && cat /proc/sys/net/ipv4/conf/m2p0/forwarding "
                              "/proc/sys/net/ipv4/conf/eth0/forwarding")
        lines = out.split()
        assert rc == 0 and int(lines[1]) > 0 and int(lines[3]) > 0 and lines[4:] == ["1", "0"], out  # relays the tunnel
    # One rig's fall stays that rig's (issue 55): the away rig's root knocks on the home rig's SSH over the tunnel;
    # the hub relays only flannel's VXLAN between rigs (role tunnel's filter), while its own knock still answers.
    with through_hub(hub, "10.237.0.3", away.user, str(controller_key)) as client:
        rc, out = run(client, "sudo nft list table inet m2p | grep -c 'udp dport 8472 accept'; timeout 3 bash -c "
                              "'echo > /dev/tcp/10.237.0.2/22' 2>&1; echo rc=$?")
        assert out.split()[0] == "1" and "rc=124" in out, out  # the SYN was dropped: no answer, not refused
    with ssh(hub) as client:
        rc, out = run(client, "timeout 5 bash -c 'echo > /dev/tcp/10.237.0.2/22' && sudo nft list table inet m2p")
        assert rc == 0 and 'iifname "m2p0" oifname "m2p0" udp dport 8472 accept' in out, out
    texts += second.stdout + second.stderr
    assert not [name for name, key in private.items() if key in texts]  # no key ever left its rig
    check = m2p("sites", "apply", *common, "--check")
    assert check.returncode == 0 and {o["result"] for o in outcomes(check).values()} == {"converged"}, check.stdout

    converted = m2p(*convert)  # over the tunnels, through the hub
    assert converted.returncode == 0, converted.stdout[-2000:] + converted.stderr[-3000:]
    said = outcomes(converted)
    assert {o["result"] for o in said.values()} == {"changed"}, said
    assert "control node: k3s's server without GPUs" in said["st-hub"]["message"], said["st-hub"]
    assert not (hub.path / "merged/etc/cdi").exists() and not (hub.path / "merged/var/lib/m2p/node-labels.json").exists()
    schedule = tmp_path / "schedule.yml"
    schedule.write_text("timezone: UTC\npolicy: lease-first\n")
    left = m2p("schedule", "apply", str(schedule), *common, "--limit", "st-hub")  # no GPUs there to time-share
    assert left.returncode == 0 and outcomes(left)["st-hub"] == {**outcomes(left)["st-hub"], "result": "converged",
                                                                 "message": "control node: no GPUs to time-share; "
                                                                            "not touched"}, left.stdout + left.stderr
    for r in (home, away):
        k3s_config = (r.path / "merged/etc/rancher/k3s/config.yaml").read_text()
        assert 'server: "https://10.237.0.1:6443"' in k3s_config, k3s_config
        assert f'node-ip: "{tunnel_address[r.name]}"' in k3s_config and 'flannel-iface: "m2p0"' in k3s_config
    # Both hops' host keys were recorded by the runs with --accept-new; status, without it, checks them strictly.
    known = (tmp_path / "known_hosts").read_text()
    assert f"{hub.address} " in known and "10.237.0.2 " in known and "10.237.0.3 " in known, known
    status = ["status", "-i", str(inv), "--known-hosts", str(tmp_path / "known_hosts"), "--json"]
    shown = m2p(*status)
    assert shown.returncode == 0, shown.stdout[-2000:] + shown.stderr[-2000:]
    tunnels = {r["rig"]: r["tunnel"] for r in json.loads(shown.stdout)}
    assert all(t["ok"] and t["link"] == "up" and t["mtu"] == 1280 and t["silent"] == [] for t in tunnels.values()), \
        tunnels
    assert [tunnels[n]["peers"] for n in ("st-hub", "st-home", "st-away")] == [2, 1, 1], tunnels
    gpus = {r["rig"]: r["gpus"] for r in json.loads(shown.stdout)}
    assert gpus == {"st-hub": "none (control node)", "st-home": "1 x NVIDIA GeForce RTX 3060",
                    "st-away": "1 x NVIDIA GeForce RTX 3070"}, gpus

    # The away site's router loses its uplink: the hub says so at once (its knock goes unanswered; the handshake is
    # still fresh), the away rig cannot be reached, and the home site goes on mining with its tunnel.
    network.set_router(away.slot, up=False)
    down = m2p(*status)
    rows = {r["rig"]: r for r in json.loads(down.stdout)}
    assert rows["st-away"]["state"] == "failed" and rows["st-away"]["tunnel"] is None, rows["st-away"]
    assert rows["st-hub"]["tunnel"]["ok"] and rows["st-home"]["tunnel"]["ok"], rows
    assert [(p["peer"], p["answers"]) for p in rows["st-hub"]["tunnel"]["silent"]] == [("st-away", False)], rows
    plain = m2p(*status[:-1]).stdout
    assert "silent: st-away (no answer now, last handshake" in plain, plain
    with through_hub(hub, "10.237.0.2", home.user, str(controller_key)) as client:
        assert run(client, f"sudo {flavours.MINING['hiveos'][1]}")[0] == 0  # the home site's miner never noticed

    # The away rig is gone for good: `m2p remove` forgets its node on the server and drops its peer from the hub,
    # while the home rig's tunnel carries on (the hub reconfigures with syncconf: the peers that stay keep their
    # session).
    # STAND-IN: the API the hub's stand-in `k3s kubectl` talks to (kube_api.py), holding st-away's registration.
    api = KubeApiStandin(host=str(network.gateway()), tls=True)
    admin = secrets.token_urlsafe(16)
    api.admin_tokens.add(admin)
    try:
        point_k3s_kubectl_at(hub, api, admin)
        api.join("st-away", secrets.token_urlsafe(8))
        removed = m2p("remove", *common, "--limit", "st-away")
        assert "st-away" not in api.nodes, api.nodes
    finally:
        api.close()
    assert removed.returncode == 0, removed.stdout[-2000:] + removed.stderr[-3000:]
    assert "its peer dropped from the hub st-hub" in outcomes(removed)["st-away"]["message"], removed.stdout
    with ssh(hub) as client:
        rc, peers = run(client, "sudo wg show m2p0 peers")
    assert rc == 0 and peers.split() == [keys["st-home"]], peers
    with through_hub(hub, "10.237.0.2", home.user, str(controller_key)) as client:
        assert run(client, "true")[0] == 0
    write_inventory(keys, rigs=(home,))  # and out of the inventory

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
        rc, out = run(client, "ip link show m2p0; sudo ls /etc/m2p/tunnel /etc/systemd/system/m2p-tunnel.service; "
                              "sudo nft list tables")
        # role k3s's own table (inet m2p-pods) stays with k3s; the tunnel's (inet m2p) is gone
        assert "does not exist" in out and "No such file" in out and "table inet m2p" not in out.splitlines(), out
    inside = subprocess.run(["ip", "netns", "exec", f"m2p{home.slot:05d}", "ip", "link", "show", "m2p0"],
                            capture_output=True, text=True)
    assert "does not exist" in inside.stderr, inside.stdout + inside.stderr
    tables = subprocess.run(["ip", "netns", "exec", f"m2p{home.slot:05d}", "nft", "list", "tables"],
                            capture_output=True, text=True)
    assert tables.returncode == 0 and "table inet m2p" not in tables.stdout.splitlines(), tables.stdout  # filter gone
    assert (away_root / "etc/m2p/tunnel/private.key").exists()  # a rig gone for good is never touched by remove
