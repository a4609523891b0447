"""ansible-runner wrapper against sandbox rigs: report from stats, failures per rig,
idempotence, and no secret in the runner's artifacts, events or inventory."""

from __future__ import annotations

from pathlib import Path

import pytest

from m2p_sandbox import network
from m2p_sandbox import rig as sandbox
from miner2provider.core.inventory import Host, Secret
from miner2provider.fleet.runner import run_playbook

from .conftest import run, ssh

pytestmark = pytest.mark.integration
PLAYBOOK = Path(__file__).parent / "playbooks" / "runner_check.yml"
SECRET = "s3cr3t-become-Pa55"


def host_for(r: sandbox.Rig, **kw) -> Host:
    return Host(r.name, kw.get("address", r.address), 22, r.user, r.key_file, None, Secret(SECRET),
                ("all", "farm"), {})


def test_runner_applies_reports_and_keeps_secrets_out(sandbox_rigs, tmp_path):
    rigs = [sandbox_rigs["plain1"], sandbox_rigs["hive1"]]
    ghost = Host("ghost1", str(network.address_for(251)), 22, "rigadmin", rigs[0].key_file, None, None,
                 ("all",), {})
    events = []
    artifacts = tmp_path / "artifacts"
    report = run_playbook(PLAYBOOK, [*(host_for(r) for r in rigs), ghost], {"runner_check_label": "one"},
                          on_event=events.append, keep_artifacts=artifacts)
    assert report.status == "failed"  # ghost1 is unreachable ...
    assert report.hosts["ghost1"].unreachable == 1 and "ghost1" in report.failures
    for r in rigs:  # ... and the others were handled anyway
        assert report.hosts[r.name].changed == 2 and report.hosts[r.name].failures == 0
        client = ssh(r)
        try:
            assert run(client, "cat /etc/m2p-runner-check") == (0, f"rig={r.name} run=one\n")
            assert run(client, "sudo cat /root/m2p-runner-secret") == (0, SECRET + "\n")
        finally:
            client.close()
    assert {e.kind for e in events} >= {"task", "changed", "unreachable"}

    # Nothing the runner left behind, nor any event, holds the secret.
    assert artifacts.exists()
    for path in artifacts.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    assert all(SECRET not in repr(e) for e in events)

    again = run_playbook(PLAYBOOK, [host_for(r) for r in rigs], {"runner_check_label": "one"})
    assert again.status == "successful" and again.changed == 0  # idempotent
