"""A farm at another site, reached through its jump host: a sandbox rig whose only route leads
to another sandbox rig (network.only_via), so m2p reaches it through that rig or not at all.
Detect (paramiko through a direct-tcpip channel), convert and revert (Ansible through a
ProxyCommand) on it; both hops' host keys checked against m2p's known_hosts."""

from __future__ import annotations

import json

import pytest
import yaml

from m2p_sandbox import network
from m2p_sandbox import rig as sandbox
from m2p_sandbox.bundle import build_test_bundle

from .conftest import m2p, outcomes

pytestmark = pytest.mark.integration


def test_detect_convert_and_revert_through_a_jump_host(boot_rigs, tmp_path):
    gate, far = boot_rigs(sandbox.RigSpec("jh-gate", "plain", ("rtx3060",)),
                          sandbox.RigSpec("jh-far", "hiveos", ("rtx3060",)))
    network.only_via(far.slot, gate.address)
    inv = tmp_path / "rigs.yml"
    entry = {"ansible_host": far.address, "ansible_user": far.user, "ansible_ssh_private_key_file": far.key_file}
    inv.write_text(yaml.safe_dump({"all": {"children": {
        "gates": {"hosts": {"jh-gate": {"ansible_host": gate.address, "ansible_user": gate.user,
                                        "ansible_ssh_private_key_file": gate.key_file}}},
        "site2": {"hosts": {"jh-far": {**entry, "m2p_jump_host": "jh-gate"}}}}}}))
    direct = tmp_path / "direct.yml"
    direct.write_text(yaml.safe_dump({"all": {"hosts": {"jh-far": entry}}}))
    common = ["--known-hosts", str(tmp_path / "known_hosts")]

    alone = m2p("detect", "-i", str(direct), *common, "--accept-new", "--connect-timeout", "3", "--json")
    (report,) = json.loads(alone.stdout)
    assert report["failure"] in {"timeout", "unreachable"}, report  # no way there but through jh-gate

    # --accept-new records both hops' keys; the second run checks them strictly.
    for extra in (["--accept-new"], []):
        found = m2p("detect", "-i", str(inv), *common, *extra, "--limit", "jh-far", "--json")
        assert found.returncode in (0, 10), found.stdout[-2000:] + found.stderr[-2000:]
        (report,) = json.loads(found.stdout)
        assert report["failure"] is None and report["facts"]["mining_os"]["kind"] == "hiveos", report
    known = (tmp_path / "known_hosts").read_text()
    assert f"{gate.address} " in known and f"{far.address} " in known

    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    args = ["-i", str(inv), *common, "--limit", "jh-far", "--yes", "--json"]
    converted = outcomes(m2p("convert", *args, "--bundle", str(bundle)))
    assert converted["jh-far"]["result"] == "changed", converted
    reverted = outcomes(m2p("revert", *args))
    assert reverted["jh-far"]["result"] == "changed", reverted
    again = m2p("detect", "-i", str(inv), *common, "--limit", "jh-far", "--json")
    (report,) = json.loads(again.stdout)
    assert report["facts"]["miner"]["running"], report["facts"]["miner"]  # a mining rig again
