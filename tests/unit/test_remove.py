"""`m2p remove` without a playbook run: a server is refused, a rig with no server only loses its
host key (through OpenSSH's own ssh-keygen, on a real known_hosts file)."""

import pytest

from miner2provider.core import inventory
from miner2provider.detect.ssh import SshOptions
from miner2provider.fleet.remove import forget_host_key, remove_rigs

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


@pytest.fixture
def fleet(tmp_path):
    inv = tmp_path / "rigs.yml"
    inv.write_text("all:\n  children:\n    k3s_server:\n      hosts:\n        s1: {ansible_host: 10.0.0.1}\n"
                   "  hosts:\n    lone: {ansible_host: 10.0.0.9, ansible_port: 2222}\n")
    return {h.name: h for h in inventory.load(inv).hosts}


def test_a_server_is_refused_and_a_lone_rig_only_loses_its_host_key(fleet, tmp_path):
    known = tmp_path / "known_hosts"
    known.write_text(f"10.0.0.1 {KEY}\n[10.0.0.9]:2222 {KEY}\n10.0.0.7 {KEY}\n")
    out = {o.name: o for o in remove_rigs([fleet["s1"], fleet["lone"]], list(fleet.values()),
                                          SshOptions(known_hosts=known))}
    assert out["s1"].result == "failed" and "is a k3s server" in out["s1"].message
    assert out["lone"].result == "changed" and out["lone"].changed == 1
    assert out["lone"].message == f"it has no k3s server; host key of [10.0.0.9]:2222 dropped from {known}"
    assert known.read_text().split("\n")[:2] == [f"10.0.0.1 {KEY}", f"10.0.0.7 {KEY}"]  # the server keeps its key
    assert forget_host_key(fleet["lone"], known) == ""  # nothing left to drop


def test_provider_remove_says_what_it_leaves_on_the_server_and_why(fleet, monkeypatch):
    """`m2p provider remove` (fleet/provider.py) takes the provider off and names what stays: the certificate (a
    re-install reuses it), the home volume whose keyring holds the wallet's key, namespaces and CRDs; where to
    read how to wipe each."""
    from miner2provider.fleet import provider
    from miner2provider.fleet.runner import HostStats, RunReport
    from miner2provider.market.akash.stack import PARTS

    runs = []

    def ran(playbook, hosts, **kwargs):
        runs.append(kwargs)
        return RunReport("successful", 0, {"s1": HostStats(ok=9, changed=3)})
    monkeypatch.setattr(provider, "run_playbook", ran)
    outcome = provider.remove(fleet["s1"], list(fleet.values()), PARTS, SshOptions())
    assert outcome.result == "changed" and outcome.message.startswith("provider taken off; left on the server: ")
    for said in ("certificate (a re-install reuses", "home volume", "keyring holds the wallet's key",
                 "namespaces and CRDs", "docs/security.md"):
        assert said in outcome.message, said
    assert runs[0]["role_vars"]["s1"]["market_provider_state"] == "absent" and runs[0]["limit"] == ["s1"]
    checked = provider.remove(fleet["s1"], list(fleet.values()), PARTS, SshOptions(), check=True)
    assert checked.result == "pending" and checked.message.startswith("the provider would be taken off; ")
