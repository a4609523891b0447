"""The time-share agent on a HiveOS-layout sandbox rig: installed by the timeshare_agent role
(playbooks/schedule.yml), run by systemd, talking to the STAND-IN Kubernetes API server
(miner2provider/sandbox/kube_api.py) on the sandbox network's gateway.  The miner is the
HiveOS stand-in's real `screen` session."""

from __future__ import annotations

import json
import secrets
import time

import pytest
import yaml

from miner2provider import inventory, runner
from miner2provider.agent.service import PLACEHOLDER_LABEL
from miner2provider.sandbox import network
from miner2provider.sandbox import rig as sandbox
from miner2provider.sandbox.kube_api import KubeApiStandin

from .conftest import run, ssh

pytestmark = pytest.mark.integration


def wait_for(what, check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def miner_running(r) -> bool:
    with ssh(r) as client:
        return run(client, "sudo screen -ls miner")[0] == 0


def apply(r, tmp_path, api, token, schedule: str) -> runner.RunReport:
    (tmp_path / "schedule.yml").write_text(schedule)
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {r.name: {
        "ansible_host": r.address, "ansible_user": r.user, "ansible_ssh_private_key_file": r.key_file}}}}))
    hosts = list(inventory.load(inv).hosts)
    return runner.run_playbook(runner.ROOT / "playbooks" / "schedule.yml", hosts, extravars={
        "m2p_schedule_file": str(tmp_path / "schedule.yml"), "m2p_agent_api_server": api.url,
        "m2p_agent_token": token})


def test_agent_switches_the_real_miner_survives_hello_and_a_reboot(boot_rigs, tmp_path):
    (r,) = boot_rigs(sandbox.RigSpec("ag-hive", "hiveos", ("rtx3090", "rtx3090")))
    api = KubeApiStandin(host=str(network.gateway()))
    token = secrets.token_urlsafe(24)
    api.add_node(r.name, token)
    try:
        assert wait_for("hive.service to start the miner", lambda: miner_running(r))
        # lease-first: idle mining behind the placeholder.
        report = apply(r, tmp_path, api, token, "timezone: UTC\npolicy: lease-first\nmin_switch_interval: 0s\n")
        assert report.rc == 0, report
        assert apply(r, tmp_path, api, token, "timezone: UTC\npolicy: lease-first\nmin_switch_interval: 0s\n").changed == 0
        wait_for("idle mining", lambda: api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode") == "idle-mining")
        assert api.nodes[r.name]["metadata"]["labels"][PLACEHOLDER_LABEL] == "2" and api.placeholder(r.name)
        assert miner_running(r)

        # A lease preempts the placeholder; its preStop hook writes the signal (hostPath) and waits.
        api.mark_terminating(f"m2p-placeholder-{r.name}", "m2p-system")
        with ssh(r) as client:
            assert run(client, "sudo touch /var/lib/m2p/agent/signal/lease-waiting")[0] == 0
        wait_for("the GPUs handed over", lambda: PLACEHOLDER_LABEL not in api.nodes[r.name]["metadata"]["labels"])
        assert not miner_running(r)
        with ssh(r) as client:  # the hook may return: the agent saw NVML free first
            assert run(client, "test -e /var/lib/m2p/agent/signal/released")[0] == 0
            # nvidia-smi (the stand-in lists stand-in miner processes) shows no process on the GPUs.
            assert run(client, "nvidia-smi --query-compute-apps=pid --format=csv,noheader")[1].strip() == ""
        api.add_pod("lease-1", r.name, 2)  # the lease starts on free GPUs
        assert wait_for("leasing", lambda: api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode") == "leasing")

        # HiveOS fights back: `hello` (a dashboard push) restarts the miner; the agent stops it again.
        with ssh(r) as client:
            run(client, "sudo /hive/bin/hello")
        wait_for("the agent to stop the miner hello started", lambda: not miner_running(r), timeout=20)

        # A reboot: hive.service starts the miner at boot; the agent resumes leasing from its state.
        with ssh(r) as client:
            client.exec_command("sudo systemctl reboot")
        time.sleep(1)
        sandbox.wait_ssh(r, timeout=60)
        with ssh(r) as client:
            assert run(client, "systemctl is-system-running --wait")[1].strip() in {"running", "degraded"}
            state = json.loads(run(client, "cat /var/lib/m2p/agent/state.json")[1])
        assert state["state"]["mode"] == "leasing"
        wait_for("the miner stopped after the reboot", lambda: not miner_running(r), timeout=30)
        status = json.loads(api.nodes[r.name]["metadata"]["annotations"]["m2p.io/status"])
        assert status["mode"] == "leasing" and status["schedule"] == "schedule"

        # The lease ends: the placeholder holds the GPUs again and idle mining resumes.
        api.delete_pod("lease-1")
        wait_for("idle mining again", lambda: api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode") == "idle-mining")
        assert wait_for("the miner started again", lambda: miner_running(r))
    except AssertionError as exc:
        with ssh(r) as client:
            journal = run(client, "sudo journalctl -u m2p-agent --no-pager -n 40; sudo cat /var/lib/m2p/agent/status.json")[1]
        raise AssertionError(f"{exc}\nnode: {api.nodes[r.name]}\nagent:\n{journal}") from None
    finally:
        api.close()
