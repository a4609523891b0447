"""The shell gate (roles/timeshare_agent templates/gate.sh.j2): the hook the container runtime runs, a static
handshake with no interpreter start-up, against the real agent (test_agent_service.py's STAND-IN API and
file-backed miner).  Run as runc runs a hook: an empty environment, the container's state on stdin."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import jinja2
from test_agent_service import NODE, api, container, idle_mining

__all__ = ["api"]  # the fixture, imported for the tests below

TEMPLATE = Path(__file__).parents[2] / "ansible_collections/m2p/rigs/roles/timeshare_agent/templates/gate.sh.j2"


def shell_gate(tmp_path: Path) -> Path:
    gate = tmp_path / "gate.sh"
    gate.write_text(jinja2.Template(TEMPLATE.read_text()).render(
        ansible_managed="test", timeshare_agent_state_dir=str(tmp_path / "state")))
    gate.chmod(0o755)
    return gate


def hook(tmp_path: Path, state: dict, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(shell_gate(tmp_path)), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={})
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(state))
    proc.stdin.close()
    return proc


def ticks_until_done(agent, proc: subprocess.Popen[str], most: int = 20) -> list[str]:
    actions: list[str] = []
    for _ in range(most):
        time.sleep(0.15)
        actions += agent.tick()
        if proc.poll() is not None:
            break
    proc.wait(5)
    return actions


def test_the_shell_gate_hands_over_once_the_miner_stopped(api, tmp_path):
    agent = idle_mining(api, tmp_path)
    lease, state = container(tmp_path)
    try:
        proc = hook(tmp_path, state)
        actions = ticks_until_done(agent, proc)
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
        assert actions[:2] == ["stop-miner", "grant"] and not (tmp_path / "miner.running").exists()
        # The agent read the runtime's state into the usual record: the lease names its pod, and its
        # container is the rig's own record of a lease while it runs.
        assert [lease_["pod"] for lease_ in agent.status(0)["leases"]] == ["lease/job"]
        assert agent.seen.gated[0]["pid"] == lease.pid
    finally:
        lease.kill()
        lease.wait()


def test_the_shell_gate_says_the_agents_refusal_and_gives_up_on_its_own(api, tmp_path):
    agent = idle_mining(api, tmp_path)
    lease, state = container(tmp_path)
    try:
        proc = hook(tmp_path, {**state, "annotations": {
            "io.kubernetes.cri.sandbox-namespace": "kube-system", "io.kubernetes.cri.sandbox-name": "dcgm"}})
        api.add_pod("dcgm", NODE, 1, namespace="kube-system")
        ticks_until_done(agent, proc)
        assert proc.returncode == 1 and proc.stderr is not None
        assert "m2p gate: GPUs not handed over: this rig is mining" in proc.stderr.read()
        silent = hook(tmp_path, state, "--timeout", "1")  # no agent answers
        silent.wait(10)
        assert silent.returncode == 1 and silent.stderr is not None
        assert "no hand-over from m2p-agent within 1 s" in silent.stderr.read()
        assert not list((tmp_path / "state/gate").glob("*.request"))  # it took its request with it
    finally:
        lease.kill()
        lease.wait()
