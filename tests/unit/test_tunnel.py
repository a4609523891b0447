"""A farm across sites (fleet/tunnel.py): the hub-and-spoke plan from an inventory, its mistakes named at their
line, and the WireGuard configs it writes (wg(8) reads them in tests/integration/test_sites_lab.py)."""

from __future__ import annotations

import ipaddress

import pytest

from miner2provider.cli import main
from miner2provider.core import inventory
from miner2provider.core.errors import InventoryError
from miner2provider.fleet import tunnel

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
    assert tunnel.site_needs(found) == [
        "hub vps (10.237.0.1): UDP 51820 reachable from every site at vps.example.net:51820; it forwards between sites",
        "site home: 2 rigs (rig-a1, rig-a2) dial out to vps.example.net:51820; no port to forward there; tunnel MTU "
        "1280",
        "site uncle: 1 rigs (rig-b1) dial out to vps.example.net:51820; no port to forward there; tunnel MTU 1280"]


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
    (", m2p_tunnel_network: 8.8.8.0/24", "", "m2p_tunnel_network 8.8.8.0/24 is not a private range"),
    (", m2p_tunnel_network: 10.237.0.0/30", "", "holds 2 addresses; the farm has 4 members"),
    (", m2p_tunnel_mtu: 1500", "", "m2p_tunnel_mtu 1500 is not a whole number from 1280"),
    (', m2p_hub_endpoint: "vps.example.net"', "", "m2p_hub_endpoint 'vps.example.net' is not HOST:PORT"),
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
    assert "site uncle: 1 rigs (rig-b1) dial out to vps.example.net:51820; no port to forward there" in out.out + out.err
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


def test_convert_refuses_a_farm_across_sites_until_m2p_builds_its_tunnel(tmp_path, capsys):
    """The plan exists, the rig side does not: k3s over a missing tunnel would strand every sited rig, so convert
    stops before it connects to any rig (the addresses here answer nothing)."""
    path = tmp_path / "rigs.yml"
    path.write_text(FARM % ("", ""))
    assert main(["convert", "-i", str(path), "--yes"]) == 3
    err = capsys.readouterr().err
    assert f"{path}:8: m2p_site makes this a farm across sites" in err and "docs/sites.md" in err
