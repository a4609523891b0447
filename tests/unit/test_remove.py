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
