"""A rig behind NAT joins from its site (fleet/join.py): the bundle `m2p sites invite` prints holds public facts
only, `m2p join` reads back exactly what was written and refuses anything else, and the inventory's declared key
(m2p_tunnel_public_key) is checked where it is written.  The runs themselves: tests/integration/test_sites.py."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import socket
import subprocess

import pytest
from test_tunnel import KEYS, hosts  # the same farm and keys (tests/unit is on sys.path)

from miner2provider.cli import main
from miner2provider.core.errors import InventoryError, UsageError
from miner2provider.fleet import join, sites, tunnel

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHd5b5GQ6uV2mJm0Zl4QyYtJvQ8l0Q5o3b6yq3Yk3o9X owner@laptop"


def bundle_for(tmp_path, rig: str = "rig-b1") -> join.JoinBundle:
    farm = hosts(tmp_path)
    found = tunnel.plan(farm)
    assert found is not None
    member = next(h for h in farm if h.name == rig)
    return join.invite(found, dataclasses.replace(member, user="user"), KEYS["vps"], join.ssh_public_key(SSH_KEY))


def test_the_bundle_carries_public_facts_only_and_reads_back_as_written(tmp_path):
    bundle = bundle_for(tmp_path)
    assert (bundle.rig, bundle.site, bundle.address, bundle.hub, bundle.hub_address, bundle.endpoint, bundle.mtu) == (
        "rig-b1", "uncle", "10.237.0.4/24", "vps", "10.237.0.1", "vps.example.net:51820", 1280)
    # The controller's key loses its comment (an address book of the owner's laptop) and gets m2p's mark.
    assert bundle.authorize == SSH_KEY.rsplit(" ", 1)[0] + " m2p-controller"
    text = join.encode(bundle)
    assert text.startswith("m2p-join-1:") and " " not in text
    assert join.decode(text) == bundle
    assert join.decode("  " + text + "\n") == bundle  # pasted with the line's whitespace
    decoded = json.loads(base64.urlsafe_b64decode(text.split(":", 1)[1] + "=="))
    assert "token" not in json.dumps(decoded).lower() and "private" not in json.dumps(decoded).lower()


def test_the_joining_rigs_configuration_is_the_one_sites_apply_writes(tmp_path):
    bundle = bundle_for(tmp_path)
    found = tunnel.plan(hosts(tmp_path))
    assert found is not None
    assert bundle.config() == tunnel.wg_config(found, "rig-b1", {"vps": KEYS["vps"]})
    variables = join.rig_vars(bundle)
    assert variables["tunnel_address"] == "10.237.0.4/24" and variables["tunnel_forward"] is False
    assert variables["tunnel_login_user"] == "user" and variables["tunnel_authorized_key"].endswith(" m2p-controller")


def _tampered(text: str, **change: object) -> str:
    body = text.split(":", 1)[1]
    fields = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    fields.update(change)
    return join.PREFIX + base64.urlsafe_b64encode(json.dumps(fields).encode()).decode()


@pytest.mark.parametrize(("change", "said"), [
    ({"hub_key": "not-a-key"}, "the hub's key"),
    ({"hub_key": KEYS["vps"] + "\n[Peer]"}, "the hub's key"),
    ({"address": "10.237.0.4/24\nPostUp = id"}, "the addresses"),
    ({"hub_address": "192.0.2.1"}, "the addresses"),  # the hub outside the rig's tunnel network
    ({"address": "8.8.8.8/24", "hub_address": "8.8.8.1"}, "the addresses"),  # not a private range
    ({"mtu": 9000}, "the MTU"),
    ({"endpoint": "vps.example.net"}, "the hub's endpoint"),
    ({"rig": "../etc"}, "a rig name"),
    ({"login_user": "root;id"}, "the login user"),
    ({"authorize": 'command="id" ' + SSH_KEY}, "the controller's SSH key"),
    ({"authorize": SSH_KEY.rsplit(" ", 1)[0] + " m2p-controller\nssh-rsa AAAA x"}, "the controller's SSH key"),
    ({"site": "home\x1b[2J"}, "the site"),
])
def test_a_bundle_changed_on_the_way_is_refused_with_what_is_wrong(tmp_path, change, said):
    text = _tampered(join.encode(bundle_for(tmp_path)), **change)
    with pytest.raises(UsageError, match=f"not valid \\(.*{said}"):
        join.decode(text)


@pytest.mark.parametrize(("text", "said"), [
    ("m2p-join-2:abc", "must start with m2p-join-1:"),
    ("m2p-join-1:%%%", "damaged"),
    ("m2p-join-1:" + base64.urlsafe_b64encode(b'{"rig": "x"}').decode(), "not one this m2p reads"),
    ("m2p-join-1:" + base64.urlsafe_b64encode(b"[1, 2]").decode(), "not one this m2p reads"),
])
def test_something_that_is_not_a_bundle_is_said_plainly(text, said):
    with pytest.raises(UsageError, match=said):
        join.decode(text)


def test_a_field_of_the_wrong_type_is_refused(tmp_path):
    with pytest.raises(UsageError, match="mtu is not a int"):
        join.decode(_tampered(join.encode(bundle_for(tmp_path)), mtu="1280"))


def test_the_hub_gets_no_bundle_and_the_owner_is_told_how_to_reach_the_rig(tmp_path):
    farm = hosts(tmp_path)
    found = tunnel.plan(farm)
    assert found is not None
    with pytest.raises(UsageError, match="vps is the hub"):
        join.invite(found, farm[0], KEYS["vps"], "")
    # rig-b1 is at 10.237.0.4 already (its tunnel address), but not through the hub yet.
    assert join.reach_lines(found, farm[3]) == [("ansible_host", "10.237.0.4", True), ("m2p_jump_host", "vps", False)]


@pytest.mark.parametrize("text", ["", "ssh-dss AAAAB3NzaC1kc3MAAACBAP1/U4Ei", "from=\"x\" " + SSH_KEY,
                                  SSH_KEY + "\n" + SSH_KEY])
def test_only_one_plain_ssh_public_key_is_authorized(text):
    with pytest.raises(ValueError, match="not one OpenSSH public key"):
        join.ssh_public_key(text)


def test_a_declared_key_must_be_a_wireguard_key_and_is_named_at_its_line(tmp_path):
    farm = hosts(tmp_path, rig_extra=f', m2p_tunnel_public_key: "{KEYS["rig-b1"]}"')
    assert tunnel.declared_keys(farm) == {"rig-b1": KEYS["rig-b1"]}
    with pytest.raises(InventoryError, match=r"rigs.yml:\d+: rig-b1's m2p_tunnel_public_key is not a WireGuard"):
        tunnel.plan(hosts(tmp_path, rig_extra=', m2p_tunnel_public_key: "ssh-ed25519 AAAA"'))


def test_join_refuses_a_password_variable_that_is_not_set_before_touching_anything(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("M2P_TEST_UNSET_PW", raising=False)
    code = main(["join", join.encode(bundle_for(tmp_path)), "--host", "192.0.2.7", "--user", "user",
                 "--password-env", "M2P_TEST_UNSET_PW", "--yes"])
    assert code == 2
    assert "M2P_TEST_UNSET_PW is not set" in capsys.readouterr().err


# --- A bundle edited on its way (issue 55): it decodes cleanly, so what it lets in is checked and shown first ---


@pytest.fixture()
def listener():
    """A loopback port that counts who connects to it: `m2p join` must not reach the rig before its checks."""
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)

    def connections() -> int:
        count = 0
        while True:
            try:
                conn, _ = server.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1

    yield server.getsockname()[1], connections
    server.close()


def _attacker_key(tmp_path) -> str:
    """A real key pair made by ssh-keygen: the attacker's, whose public half replaces the controller's."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mallory", "-f", str(tmp_path / "evil")],
                   check=True)
    return (tmp_path / "evil.pub").read_text().strip()


def _fingerprint_by_ssh_keygen(path) -> str:
    return subprocess.run(["ssh-keygen", "-lf", str(path)], check=True, capture_output=True,
                          text=True).stdout.split()[1]


def test_the_fingerprint_shown_is_the_one_ssh_keygen_prints(tmp_path):
    evil = _attacker_key(tmp_path)
    assert join.key_fingerprint(join.ssh_public_key(evil)) == _fingerprint_by_ssh_keygen(tmp_path / "evil.pub")


def test_the_digest_is_short_stable_and_changes_with_any_field(tmp_path):
    bundle = bundle_for(tmp_path)
    said = join.digest(bundle)
    assert re.fullmatch(r"[0-9a-f]{4}(-[0-9a-f]{4}){4}", said)
    # Re-encoded on its way (other key order, padding) but saying the same: the same digest.
    assert join.digest(join.decode(_tampered(join.encode(bundle)))) == said
    assert join.same_digest(said.upper().replace("-", " "), bundle)
    for field, value in [("login_user", "root"), ("endpoint", "evil.example.net:51820"), ("mtu", 1281),
                         ("hub_key", KEYS["rig-a1"])]:
        assert join.digest(dataclasses.replace(bundle, **{field: value})) != said, field


def test_an_edited_bundle_that_lets_an_attacker_in_as_root_is_refused_before_the_rig_is_reached(
        tmp_path, capsys, listener):
    port, connections = listener
    invited = bundle_for(tmp_path)
    evil = join.ssh_public_key(_attacker_key(tmp_path))
    edited = _tampered(join.encode(invited), authorize=evil, login_user="root")
    assert join.decode(edited).authorize == evil  # well formed: decoding alone lets it through
    code = main(["join", edited, "--host", "127.0.0.1", "--port", str(port), "--user", "user", "--yes"])
    err = capsys.readouterr().err
    assert code == 2 and "log in as root, but --user is user" in err
    # With the user it names, the digest heard by phone refuses it.
    code = main(["join", edited, "--host", "127.0.0.1", "--port", str(port), "--user", "root", "--digest",
                 join.digest(invited), "--yes"])
    err = capsys.readouterr().err
    assert code == 2 and f"digest is {join.digest(join.decode(edited))}, not the --digest given" in err
    assert connections() == 0


def test_without_a_digest_an_edited_bundle_shows_the_changed_key_and_digest_before_anything_is_done(
        tmp_path, capsys, monkeypatch):
    seen_before_ssh: list[str] = []
    first_look = sites.public_keys

    def looking(*args, **kwargs):  # what was on the screen when m2p first reached for the rig
        seen_before_ssh.append(capsys.readouterr().err)
        return first_look(*args, **kwargs)

    monkeypatch.setattr(sites, "public_keys", looking)
    invited = bundle_for(tmp_path)
    evil = _attacker_key(tmp_path)
    edited = _tampered(join.encode(invited), authorize=join.ssh_public_key(evil), login_user="root")
    free = socket.create_server(("127.0.0.1", 0))  # a port nobody listens on: refused at once
    port = free.getsockname()[1]
    free.close()
    code = main(["join", edited, "--host", "127.0.0.1", "--port", str(port), "--user", "root", "--yes",
                 "--connect-timeout", "2"])
    assert code != 0 and f"connection refused on 127.0.0.1:{port}" in capsys.readouterr().out  # it was tried
    shown = seen_before_ssh[0]
    assert join.digest(join.decode(edited)) != join.digest(invited)
    assert f"bundle digest {join.digest(join.decode(edited))}" in shown
    assert (f"{_fingerprint_by_ssh_keygen(tmp_path / 'evil.pub')} (ssh-ed25519) may then log in to rig-b1 as root"
            in shown)
    assert join.key_fingerprint(invited.authorize) not in shown


def test_a_bundle_that_authorizes_a_key_for_nobody_is_refused(tmp_path):
    with pytest.raises(UsageError, match=r"not valid \(the login user"):
        join.decode(_tampered(join.encode(bundle_for(tmp_path)), login_user=""))


def test_two_members_may_not_declare_one_tunnel_key(tmp_path):
    with pytest.raises(InventoryError, match=r"rigs.yml:\d+: rig-b1's m2p_tunnel_public_key is vps's too "
                                             r"\(.*rigs.yml:\d+\): each member has a key of its own"):
        tunnel.plan(hosts(tmp_path, hub_extra=f', m2p_tunnel_public_key: "{KEYS["rig-b1"]}"',
                          rig_extra=f', m2p_tunnel_public_key: "{KEYS["rig-b1"]}"'))


def test_a_rig_that_copies_another_members_key_takes_only_itself_off_the_farm(tmp_path):
    farm = hosts(tmp_path, rig_extra=f', m2p_tunnel_public_key: "{KEYS["rig-b1"]}"')
    found = tunnel.plan(farm)
    assert found is not None
    declared = tunnel.declared_keys(farm)
    # rig-a2's root wrote the joined rig-b1's key into its own file: rig-b1 keeps it (the owner's word).
    keys = {"vps": KEYS["vps"], "rig-a1": KEYS["rig-a1"], "rig-a2": KEYS["rig-b1"], "rig-b1": KEYS["rig-b1"]}
    refused = sites.shared_keys(found, keys, declared, {})
    assert list(refused) == ["rig-a2"] and "is rig-b1's, whose key it stays" in refused["rig-a2"]
    # It copied the hub's key: the hub keeps it.
    assert list(sites.shared_keys(found, {**keys, "rig-a2": KEYS["vps"]}, declared, {})) == ["rig-a2"]
    # It copied rig-a1's (reached directly, declared nowhere): rig-a1 keeps it where the hub has it now.
    copied = {**keys, "rig-a2": KEYS["rig-a1"]}
    assert list(sites.shared_keys(found, copied, declared, {"10.237.0.2": KEYS["rig-a1"]})) == ["rig-a2"]
    # No one has a claim (the first apply): neither gets a tunnel, and neither had one.
    assert sorted(sites.shared_keys(found, copied, declared, {})) == ["rig-a1", "rig-a2"]
    # The hub's configuration then has one peer per key.
    peers = {n: k for n, k in keys.items() if n not in sites.shared_keys(found, keys, declared, {})}
    assert tunnel.wg_config(found, "vps", peers).count(KEYS["rig-b1"]) == 1
