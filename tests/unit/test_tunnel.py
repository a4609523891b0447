"""A farm across sites (fleet/tunnel.py): the hub-and-spoke plan from an inventory, its mistakes named at their
line, and the WireGuard configs it writes (wg(8) reads them in tests/integration/test_sites_lab.py)."""

from __future__ import annotations

import ipaddress
import re

import click
import pytest

from miner2provider.cli import main
from miner2provider.core import inventory
from miner2provider.core.errors import InventoryError
from miner2provider.fleet import tunnel
from miner2provider.fleet.pipeline import fleet_role_vars

# Public keys made by `wg genkey | wg pubkey` (their private halves were thrown away).
KEYS = {"vps": "/kahMTZJg3d6mRB0D1jH9vKqU12sjcS8qGHhO0VgaRE=", "rig-a1": "QhTzrh4j2kSO7hGTqsdnQCA9Z2HVPGclxeW5YHLh3Rc=",
        "rig-b1": "XwYPCnYlV8BY329FONMT+OXqX3JcLiW9LBpQhIY9iXs="}

FARM = """all:
  children:
    k3s_server:
      hosts:
        vps: {ansible_host: 203.0.113.10, m2p_hub_endpoint: "vps.example.net:51820"%s}
    k3s_agent:
      hosts:
        rig-a1: {ansible_host: 10.237.0.2, m2p_site: home}
        rig-a2: {ansible_host: 10.237.0.3, m2p_site: home}
        rig-b1: {ansible_host: 10.237.0.4, m2p_site: uncle%s}
"""


def hosts(tmp_path, hub_extra: str = "", rig_extra: str = "") -> list[inventory.Host]:
    path = tmp_path / "rigs.yml"
    path.write_text(FARM % (hub_extra, rig_extra))
    return list(inventory.load(path).hosts)


def test_a_farm_without_sites_has_no_tunnel(tmp_path):
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  hosts:\n    rig01: {ansible_host: 10.0.0.1}\n")
    assert tunnel.plan(list(inventory.load(path).hosts)) is None


def test_the_server_is_the_hub_and_rigs_get_addresses_in_inventory_order(tmp_path):
    found = tunnel.plan(hosts(tmp_path))
    assert found is not None
    assert (found.hub.name, str(found.hub.address), found.endpoint, found.port, found.mtu) == (
        "vps", "10.237.0.1", "vps.example.net:51820", 51820, 1280)
    assert [(m.name, m.site, str(m.address)) for m in found.rigs] == [
        ("rig-a1", "home", "10.237.0.2"), ("rig-a2", "home", "10.237.0.3"), ("rig-b1", "uncle", "10.237.0.4")]
    assert found.sites == {"home": ("rig-a1", "rig-a2"), "uncle": ("rig-b1",)}
    assert tunnel.member_names(hosts(tmp_path)) == {"10.237.0.1": "vps", "10.237.0.2": "rig-a1",
                                                    "10.237.0.3": "rig-a2", "10.237.0.4": "rig-b1"}
    assert tunnel.site_needs(found) == [
        "hub vps (10.237.0.1): UDP 51820 reachable from every site at vps.example.net:51820; it forwards between sites",
        "site home: 2 rigs (rig-a1, rig-a2) dial out to vps.example.net:51820; no port to forward there; tunnel MTU "
        "1280",
        "site uncle: 1 rig (rig-b1) dial out to vps.example.net:51820; no port to forward there; tunnel MTU 1280"]


def test_the_hub_allows_each_rig_only_its_own_address_and_rigs_reach_everyone_through_the_hub(tmp_path):
    found = tunnel.plan(hosts(tmp_path))
    assert found is not None
    hub = tunnel.wg_config(found, "vps", KEYS)
    assert hub.splitlines() == [
        "[Interface]", "ListenPort = 51820", "", "# rig-a1 (site home)", "[Peer]", f"PublicKey = {KEYS['rig-a1']}",
        "AllowedIPs = 10.237.0.2/32", "", "# rig-b1 (site uncle)", "[Peer]", f"PublicKey = {KEYS['rig-b1']}",
        "AllowedIPs = 10.237.0.4/32"]  # rig-a2 has not joined: no key, no peer
    rig = tunnel.wg_config(found, "rig-b1", KEYS)
    assert "PrivateKey" not in hub + rig  # each rig's own file gives it
    assert rig.splitlines()[3:] == ["[Peer]", f"PublicKey = {KEYS['vps']}", "Endpoint = vps.example.net:51820",
                                    "AllowedIPs = 10.237.0.0/24", "PersistentKeepalive = 25"]
    with pytest.raises(ValueError, match="rig-a1's WireGuard public key is not 32 bytes"):
        tunnel.wg_config(found, "vps", {**KEYS, "rig-a1": "not-a-key\n[Peer]"})


@pytest.mark.parametrize(("hub_extra", "rig_extra", "said"), [
    (", m2p_tunnel_network: 10.42.8.0/24", "", "m2p_tunnel_network 10.42.8.0/24 overlaps k3s's 10.42.0.0/16"),
    (", m2p_tunnel_network: 8.8.8.0/24", "", "m2p_tunnel_network 8.8.8.0/24 is not inside 10.0.0.0/8, "),
    # Python's is_private passes these, and Akash's lease NetworkPolicy leaves them open to tenants' pods (issue 55).
    (", m2p_tunnel_network: 198.18.0.0/24", "", r"m2p_tunnel_network 198.18.0.0/24 is not inside .* \(RFC 1918\)"),
    (", m2p_tunnel_network: 100.64.0.0/24", "", r"m2p_tunnel_network 100.64.0.0/24 is not inside .* \(RFC 1918\)"),
    (", m2p_tunnel_network: 169.254.0.0/24", "", r"m2p_tunnel_network 169.254.0.0/24 is not inside "),
    (", m2p_tunnel_network: 10.237.0.0/30", "", "holds 2 addresses; the farm has 4 members"),
    (", m2p_tunnel_mtu: 1500", "", "m2p_tunnel_mtu 1500 is not a whole number from 1280"),
    (', m2p_hub_endpoint: "vps.example.net"', "", "m2p_hub_endpoint 'vps.example.net' is not HOST:PORT"),
    # The owner's tailnet (k3s's --vpn-auth) and m2p's tunnel would route the same nodes two ways.
    (", m2p_vpn_auth_file: /root/tailnet.auth", "", "vps has m2p_vpn_auth_file .* in a farm with m2p_site .*: choose"),
])
def test_a_tunnel_mistake_names_the_hubs_line(tmp_path, hub_extra, rig_extra, said):
    text = FARM % (hub_extra, rig_extra)
    if "m2p_hub_endpoint: \"vps.example.net\"" in hub_extra:
        text = text.replace('m2p_hub_endpoint: "vps.example.net:51820", ', "")
    path = tmp_path / "rigs.yml"
    path.write_text(text)
    with pytest.raises(InventoryError, match=said) as caught:
        tunnel.plan(list(inventory.load(path).hosts))
    assert str(caught.value).startswith(f"{path}:5: ")


def test_a_site_without_a_hub_endpoint_or_a_rig_without_a_site_is_refused(tmp_path):
    path = tmp_path / "rigs.yml"
    path.write_text((FARM % ("", "")).replace(', m2p_hub_endpoint: "vps.example.net:51820"', ""))
    with pytest.raises(InventoryError, match=r"rigs.yml:5: vps is the hub of a farm across sites: set "
                                             r"m2p_hub_endpoint"):
        tunnel.plan(list(inventory.load(path).hosts))
    path.write_text((FARM % ("", "")).replace("m2p_site: home}", "}", 1))
    with pytest.raises(InventoryError, match=r"rigs.yml:8: rig-a1 has no m2p_site while others do"):
        tunnel.plan(list(inventory.load(path).hosts))


def test_inventory_check_says_what_each_site_needs(tmp_path, capsys):
    path = tmp_path / "rigs.yml"
    path.write_text(FARM % ("", ""))
    assert main(["inventory", "check", str(path)]) == 0
    out = capsys.readouterr()
    assert "site uncle: 1 rig (rig-b1) dial out to vps.example.net:51820; no port to forward there" in out.out + out.err
    path.write_text((FARM % ("", "")).replace("m2p_site: home", "m2p_sitee: home", 1))
    assert main(["inventory", "check", str(path)]) == 3
    assert "did you mean m2p_site" in capsys.readouterr().err


def test_addresses_never_move_when_a_rig_is_added_at_the_end(tmp_path):
    before = tunnel.plan(hosts(tmp_path))
    path = tmp_path / "rigs.yml"
    path.write_text(FARM % ("", "}\n        rig-b2: {ansible_host: 10.237.0.5, m2p_site: uncle"))
    after = tunnel.plan(list(inventory.load(path).hosts))
    assert before is not None and after is not None
    assert [m.address for m in after.rigs][:3] == [m.address for m in before.rigs]
    assert after.member("rig-b2").address == ipaddress.IPv4Address("10.237.0.5")


def test_a_pinned_address_stays_when_a_rig_before_it_leaves(tmp_path):
    """rig-a2 leaves the middle of the inventory: without a pin rig-b1 would move from .4 to .3 (and its k3s
    node IP with it); pinned, it keeps .4, and a rig added later skips it."""
    path = tmp_path / "rigs.yml"
    path.write_text(FARM.replace("        rig-a2: {ansible_host: 10.237.0.3, m2p_site: home}\n", "")
                    % ("", ", m2p_tunnel_address: 10.237.0.4}\n        rig-c1: {ansible_host: 10.237.0.3, "
                           "m2p_site: cousin"))
    found = tunnel.plan(list(inventory.load(path).hosts))
    assert found is not None
    assert {m.name: str(m.address) for m in found.rigs} == {"rig-a1": "10.237.0.2", "rig-b1": "10.237.0.4",
                                                            "rig-c1": "10.237.0.3"}


@pytest.mark.parametrize(("pin", "said"), [
    ("10.237.0.1", "is not a rig's address in 10.237.0.0/24 (the hub has 10.237.0.1)"),
    ("10.99.0.4", "is not a rig's address in 10.237.0.0/24"),
    ("not-an-ip", "is not a rig's address"),
    ("10.237.0.2", None),  # rig-a1's by order: rig-a1 moves on to the next free one
])
def test_a_pin_must_be_a_rigs_address_in_the_network(tmp_path, pin, said):
    if said is None:
        found = tunnel.plan(hosts(tmp_path, rig_extra=f", m2p_tunnel_address: {pin}"))
        assert found is not None and {m.name: str(m.address) for m in found.rigs} == {
            "rig-a1": "10.237.0.3", "rig-a2": "10.237.0.4", "rig-b1": "10.237.0.2"}
        return
    with pytest.raises(InventoryError, match=re.escape(f"rig-b1's m2p_tunnel_address '{pin}' {said}")):
        tunnel.plan(hosts(tmp_path, rig_extra=f", m2p_tunnel_address: '{pin}'"))


def test_k3s_runs_on_the_tunnel_in_a_farm_across_sites(tmp_path):
    """Every address a member dials is a tunnel address: the agents' server URL and the time-share agents' API;
    each node's IP is its own, flannel rides the tunnel, and the server's certificate names its address."""
    derived = fleet_role_vars(hosts(tmp_path))
    assert {k: derived["rig-b1"][k] for k in ("k3s_node_ip", "k3s_flannel_iface", "k3s_agent_server_url",
                                             "timeshare_agent_api_server")} == {
        "k3s_node_ip": "10.237.0.4", "k3s_flannel_iface": "m2p0", "k3s_agent_server_url": "https://10.237.0.1:6443",
        "timeshare_agent_api_server": "https://10.237.0.1:6443"}
    assert {k: derived["vps"][k] for k in ("k3s_node_ip", "k3s_flannel_iface", "k3s_tls_san")} == {
        "k3s_node_ip": "10.237.0.1", "k3s_flannel_iface": "m2p0", "k3s_tls_san": ["10.237.0.1"]}
    assert "k3s_tls_san" not in derived["rig-b1"]
    path = tmp_path / "lan.yml"
    path.write_text("all:\n  children:\n    k3s_server:\n      hosts:\n        s: {ansible_host: 10.0.0.1}\n"
                    "    k3s_agent:\n      hosts:\n        a: {ansible_host: 10.0.0.2}\n")
    lan = fleet_role_vars(list(inventory.load(path).hosts))
    assert "k3s_node_ip" not in lan["a"] and lan["a"]["k3s_agent_server_url"] == "https://10.0.0.1:6443"


@pytest.mark.parametrize(("case", "said"), [
    ("absent", "has no tunnel yet: run `m2p sites apply` first"),
    ("rig-down", "not carrying traffic (down, last handshake 1 s ago)"),
    ("no-sudo", "not carrying traffic (up, no handshake seen)"),
    ("rig-up", None),
])
def test_convert_waits_for_a_sited_members_tunnel(case, said):
    """guards.tunnel_refusal on the tunnel fact's golden outputs (tests/unit/facts/tunnel/)."""
    import dataclasses
    import json
    from pathlib import Path

    from test_readiness import facts

    from miner2provider.detect.facts.base import Output
    from miner2provider.detect.facts.tunnel import TunnelFact
    from miner2provider.detect.report import RigReport
    from miner2provider.fleet import guards

    golden = json.loads((Path(__file__).parent / "facts" / "tunnel" / f"{case}.json").read_text())
    report = RigReport("rig-b1", "10.237.0.4", dataclasses.replace(
        facts(), tunnel=TunnelFact.parse(Output(golden["output"], 0))), None)
    found = guards.tunnel_refusal(report, {"k3s_flannel_iface": "m2p0"})
    assert (found is None) if said is None else (found is not None and said in found)
    assert guards.tunnel_refusal(report, {}) is None  # one LAN: no tunnel asked for


def test_status_says_each_tunnel_and_marks_one_that_carries_nothing(capsys):
    from miner2provider.cli import render
    from miner2provider.detect.facts.tunnel import Handshake, Tunnel
    from miner2provider.detect.report import tunnel_row

    fresh = Tunnel(True, KEYS["rig-a1"], "up", 1280, (Handshake(KEYS["vps"], 1_000),), 1_012)
    stale = Tunnel(True, KEYS["rig-a1"], "up", 1280, (Handshake(KEYS["vps"], 1_000),), 1_181)
    assert tunnel_row(Tunnel(False)) is None
    assert tunnel_row(fresh) == {"ok": True, "link": "up", "mtu": 1280, "handshake_age_s": 12, "peers": 1,
                                 "silent": []}
    assert tunnel_row(stale)["ok"] is False  # older than TUNNEL_STALE_S (180 s)
    assert render.tunnel_line(tunnel_row(fresh)) == "tunnel: up, MTU 1280, last handshake 12 s ago (1 peer)"
    assert "not carrying traffic" in render.tunnel_line(tunnel_row(stale))
    same_moment = Tunnel(True, KEYS["rig-a1"], "up", 1280, (Handshake(KEYS["vps"], 1_003),), 1_000)
    assert tunnel_row(same_moment)["handshake_age_s"] == 0  # two clocks' reading of one moment: fresh
    # The rig's clock stepped back 2 h after the handshake: its age is unknown, never fresh (it may be hours old).
    clock_back = Tunnel(True, KEYS["rig-a1"], "up", 1280, (Handshake(KEYS["vps"], 8_200, "10.237.0.1"),), 1_000)
    row = tunnel_row(clock_back)
    assert row["ok"] is False and row["handshake_age_s"] == -7_200 and row["silent"][0]["peer"] == "10.237.0.1"
    assert "last handshake dated after the rig's clock (it stepped back): its age is unknown" in click.unstyle(
        render.tunnel_line(row))


def test_the_hub_names_the_rigs_whose_site_went_silent(capsys):
    """A site's router goes down: its rigs cannot be reached, but the hub still answers and says which of its peers
    carry nothing, by the plan's names (tunnel address -> rig); a peer the plan does not know is said by address."""
    from miner2provider.cli import render
    from miner2provider.detect.facts.tunnel import Handshake, Tunnel
    from miner2provider.detect.report import tunnel_row

    hub = Tunnel(True, KEYS["vps"], "up", 1280, (Handshake(KEYS["rig-a1"], 1_000, "10.237.0.2", True),
                                                 Handshake(KEYS["rig-b1"], 500, "10.237.0.4"),
                                                 Handshake("QhTz" + KEYS["rig-b1"][4:], 0, "10.237.0.9")), 1_010)
    row = tunnel_row(hub, {"10.237.0.2": "rig-a1", "10.237.0.4": "rig-b1"})
    assert row is not None and row["ok"] is True  # the hub itself carries traffic (rig-a1's)
    assert row["silent"] == [{"peer": "rig-b1", "handshake_age_s": 510, "answers": None},
                             {"peer": "10.237.0.9", "handshake_age_s": None, "answers": None}]
    line = click.unstyle(render.tunnel_line(row))
    assert line == ("tunnel: up, MTU 1280, last handshake 10 s ago (3 peers); silent: rig-b1 (last handshake 510 s "
                    "ago), 10.237.0.9 (no handshake seen)")
    # A site that went down a moment ago: its handshake is still fresh (WireGuard shakes hands every 2 minutes), but
    # the hub's knock on its SSH port goes unanswered, so it is said now, not 3 minutes later.
    just_gone = Tunnel(True, KEYS["vps"], "up", 1280, (Handshake(KEYS["rig-a1"], 1_000, "10.237.0.2", True),
                                                       Handshake(KEYS["rig-b1"], 1_005, "10.237.0.4", False)), 1_010)
    row = tunnel_row(just_gone, {"10.237.0.2": "rig-a1", "10.237.0.4": "rig-b1"})
    assert row is not None and row["ok"] is True
    assert row["silent"] == [{"peer": "rig-b1", "handshake_age_s": 5, "answers": False}]
    assert click.unstyle(render.tunnel_line(row)).endswith("; silent: rig-b1 (no answer now, last handshake 5 s ago)")


def test_without_a_terminal_a_confirmation_says_to_pass_yes_even_in_json(tmp_path, capsys):
    """A prompt that reads end-of-file (cron, a pipe, CI) must not look like Ctrl-C: exit 2 with the fix, and
    with --json the error is the JSON object README promises.  Nothing is asked of any rig before it."""
    import json

    path = tmp_path / "rigs.yml"
    path.write_text(FARM % ("", ""))
    assert main(["sites", "apply", "-i", str(path), "--json"]) == 2
    out = capsys.readouterr()
    said = json.loads(out.out)
    assert "set up the tunnels of 4 members? needs a yes, and there is no terminal to ask: pass --yes" in said["error"]
    assert main(["convert", "-i", str(path)]) == 2
    assert "convert 4 rigs (vps, rig-a1, rig-a2, rig-b1)? needs a yes" in capsys.readouterr().err


def test_remove_drops_only_the_gone_rigs_peer_and_keeps_what_the_hub_has(tmp_path, monkeypatch):
    """m2p remove in a farm across sites (fleet/sites.py drop_peers): the hub's configuration is written from the
    peers it has now, less the gone rig's; a hub that does not answer leaves the peer (said, failed); a hub that
    lists no peers is said as such (its login user may not read them)."""
    from miner2provider.detect.ssh import Result, SshOptions
    from miner2provider.fleet import sites
    from miner2provider.fleet.runner import HostStats, RunReport

    farm = hosts(tmp_path)
    by_name = {h.name: h for h in farm}
    listed = "".join(f"peer {KEYS[n]}\t1000\nallowed {KEYS[n]}\t10.237.0.{a}/32\n"
                     for n, a in (("rig-a1", 2), ("rig-b1", 4)))
    answers = [Result(by_name["vps"], stdout=f"key {KEYS['vps']}\nlink 0x1091 1280\n{listed}now 1010\n", rc=0)]
    written: dict[str, str] = {}

    def configure(found, members, peers, base, opts, check, on_event, keep_artifacts):
        written[members[0].name] = tunnel.wg_config(found, members[0].name, peers)
        return RunReport("successful", 0, {"vps": HostStats(ok=5, changed=1)})

    monkeypatch.setattr(sites, "fan_out", lambda hosts, command, opts: [answers.pop(0)])
    monkeypatch.setattr(sites, "_configure", configure)
    opts = SshOptions(known_hosts=tmp_path / "known_hosts")
    said = sites.drop_peers(farm, [by_name["rig-b1"]], opts)
    assert said["rig-b1"].result == "changed" and said["rig-b1"].message == "its peer dropped from the hub vps"
    assert KEYS["rig-a1"] in written["vps"] and KEYS["rig-b1"] not in written["vps"]
    assert sites.drop_peers(farm, [by_name["vps"]], opts) == {}  # the hub is no peer (remove refuses a server)

    answers.append(Result(by_name["vps"], failure="timeout", error="timed out"))
    down = sites.drop_peers(farm, [by_name["rig-a1"]], opts)["rig-a1"]
    assert down.result == "failed" and "its peer is still on the hub vps, which did not answer" in down.message
    answers.append(Result(by_name["vps"], stdout=f"key {KEYS['vps']}\nlink 0x1091 1280\nnow 1010\n", rc=0))
    blind = sites.drop_peers(farm, [by_name["rig-a1"]], opts)["rig-a1"]
    assert blind.result == "converged" and "lists no peers (or its login user may not run `sudo -n wg`)" in blind.message
    garbled = listed.replace(KEYS["rig-a1"], "not-a-key", 2)  # the hub answers with a garbled key for a peer that stays
    answers.append(Result(by_name["vps"], stdout=f"key {KEYS['vps']}\nlink 0x1091 1280\n{garbled}now 1010\n", rc=0))
    written.clear()
    refused = sites.drop_peers(farm, [by_name["rig-b1"]], opts)["rig-b1"]
    assert refused.result == "failed" and "the hub lists rig-a1 with a key that is not a WireGuard public key" in \
        refused.message and written == {}, refused
