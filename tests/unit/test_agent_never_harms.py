"""The time-share never harms the rig (issue 33): a stepped clock, a full or read-only disk, GPU containers
that are no lease, and an agent that stops.  The agent against the STAND-IN Kubernetes API (loopback) and
a miner driven by real shell commands (a file stands for the miner process), as in test_agent_service.py."""

from __future__ import annotations

import errno
import json

import pytest
from test_agent_service import (
    LEASE_FIRST,
    NODE,
    api,
    at_the_gate,
    container,
    cordoned,
    idle_mining,
    make_agent,
    wait_waiting,
)

from miner2provider.agent import service
from miner2provider.market import AKASH
from miner2provider.rigside import disk

__all__ = ["api"]  # the fixture, imported for the tests below

T0 = 1_800_000_000.0
EVERY_5_MIN = "timezone: UTC\npolicy: lease-first\nmin_switch_interval: 5m\n"


def clocks(agent, wall: float, mono: float) -> list[float]:
    """The agent on two clocks the test moves apart: [wall, monotonic]."""
    now = [wall, mono]
    agent.clock, agent.monotonic = (lambda: now[0]), (lambda: now[1])
    return now


def test_a_clock_stepped_back_two_hours_during_a_switch_leaves_the_rig_mining_within_min_switch_interval(
        api, tmp_path):
    agent = make_agent(api, tmp_path, EVERY_5_MIN)
    now = clocks(agent, T0, 1000.0)
    agent.tick()
    assert agent.tick() == ["start-miner"] and agent.state.mode == "idle-mining"
    api.add_pod("job", NODE, 2)
    now[0] += 400
    now[1] += 400
    assert agent.tick() == ["stop-miner"] and agent.state.mode == "leasing"
    api.delete_pod("job")
    now[0] -= 7200  # NTP steps the wall clock back two hours while the lease ends
    now[1] += 2
    assert "start-miner" not in agent.tick()  # the interval holds...
    now[0] += 300
    now[1] += 300
    assert agent.tick() == ["start-miner"] and agent.state.mode == "idle-mining"  # ...and no longer than it
    # The mode's start is said on the wall clock, as it reads now.
    assert agent.state.since == now[0]


def test_a_state_saved_in_another_boot_does_not_hold_the_miner_back(api, tmp_path):
    agent = make_agent(api, tmp_path, EVERY_5_MIN)
    clocks(agent, T0, 50_000.0)
    agent.tick()
    agent.tick()
    assert json.loads((tmp_path / "state/state.json").read_text())["boot"] == "boot-1"
    rebooted = make_agent(api, tmp_path, EVERY_5_MIN)
    rebooted.boot = "boot-2"
    rebooted.__post_init__()  # read the saved state as a new boot does
    assert rebooted.state.last_switch == float("-inf")  # a monotonic reading of another boot means nothing


@pytest.fixture
def full_disk(monkeypatch):
    """The USB stick full (ENOSPC) or read-only (EROFS) for every file the agent writes: its state and status
    (publish.write_json), its ledger and the gate's answers (Path.write_text, os.replace)."""
    broken = {"errno": None}

    def check():
        if broken["errno"] is not None:
            raise OSError(broken["errno"], "No space left on device" if broken["errno"] == errno.ENOSPC
                          else "Read-only file system")
    real_write_json = disk.write_json

    def write_json(path, data):
        check()
        real_write_json(path, data)
    monkeypatch.setattr(disk, "write_json", write_json)
    real_append = service.ledger.append

    def append(*args, **kwargs):
        check()
        real_append(*args, **kwargs)
    monkeypatch.setattr(service.ledger, "append", append)
    return broken


@pytest.mark.parametrize("failure", [errno.ENOSPC, errno.EROFS])
def test_a_full_or_read_only_disk_keeps_the_rig_mining_off_the_market_and_says_why(api, tmp_path, full_disk,
                                                                                    failure):
    agent = make_agent(api, tmp_path, LEASE_FIRST)
    assert agent.tick() == ["offer"]
    assert agent.tick() == ["start-miner"] and agent.state.mode == "idle-mining" and not cordoned(api)
    full_disk["errno"] = failure
    api.add_pod("job", NODE, 2)  # a lease lands while nothing can be written
    for _ in range(3):
        actions = agent.tick()  # never raises
        assert "stop-miner" not in actions
    assert (tmp_path / "miner.running").exists() and agent.state.mode == "idle-mining"
    assert cordoned(api)  # it could not hand its GPUs over: off the market
    status = json.loads(api.nodes[NODE]["metadata"]["annotations"]["m2p.io/status"])
    assert "not switching" in status["last_error"] and "off the market" in status["last_error"]
    full_disk["errno"] = None  # room again: the switch is made, recorded
    assert agent.tick() == ["stop-miner"] and agent.state.mode == "leasing"
    assert json.loads((tmp_path / "state/state.json").read_text())["state"]["mode"] == "leasing"


def test_a_full_disk_in_a_mining_window_changes_nothing_and_the_agent_stays_up(api, tmp_path, full_disk):
    agent = make_agent(api, tmp_path, "timezone: UTC\npolicy: fixed\ndefault: mine\nmin_switch_interval: 0s\n")
    full_disk["errno"] = errno.ENOSPC
    assert agent.tick() == ["start-miner"]  # toward mining goes on, unrecorded
    for _ in range(3):
        assert agent.tick() == []
    assert (tmp_path / "miner.running").exists() and cordoned(api)


def akash_agent(api, tmp_path):
    """Idle mining on the Akash marketplace: only its labelled lease pods are leases."""
    return idle_mining(api, tmp_path, lease_label=AKASH.lease_label, system_namespaces=AKASH.system_namespaces)


def test_a_kube_system_gpu_container_is_refused_while_mining_and_never_counts_as_a_lease(api, tmp_path):
    agent = akash_agent(api, tmp_path)
    api.add_pod("dcgm-exporter", NODE, 1, namespace="kube-system", labels={"app": "dcgm-exporter"})
    proc, state = container(tmp_path, "dcgm", ("kube-system", "dcgm-exporter"))
    try:
        thread, result = at_the_gate(tmp_path, state)
        wait_waiting(agent, thread)
        assert agent.tick() == []
        thread.join(5)
        ok, why = result["answer"]
        assert not ok and "only to the marketplace's leases" in why, why
        assert (tmp_path / "miner.running").exists() and agent.state.mode == "idle-mining"
        assert agent.status(T0)["leases"] == []  # the lease guard lets convert and revert through
    finally:
        proc.kill()
        proc.wait()


def test_an_akash_lease_is_granted_and_a_non_lease_container_never_keeps_the_miner_stopped(api, tmp_path):
    agent = akash_agent(api, tmp_path)
    api.add_pod("web-0", NODE, 1, namespace="4ml5k0vq9o",
                labels={"akash.network": "true", AKASH.lease_label: "web"})
    lease, lease_state = container(tmp_path, "lease", ("4ml5k0vq9o", "web-0"))
    other, other_state = container(tmp_path, "dcgm", ("kube-system", "dcgm-exporter"))
    api.add_pod("dcgm-exporter", NODE, 1, namespace="kube-system")
    try:
        thread, result = at_the_gate(tmp_path, lease_state)
        wait_waiting(agent, thread)
        assert agent.tick() == ["stop-miner"]
        assert agent.tick() == ["grant"]
        thread.join(5)
        assert result["answer"] == (True, "") and agent.state.mode == "leasing"
        # With the miner stopped, the owner's monitoring container gets the cards too.
        thread, result = at_the_gate(tmp_path, other_state)
        wait_waiting(agent, thread)
        agent.tick()
        thread.join(5)
        assert result["answer"] == (True, "")
        assert [lease["pod"] for lease in agent.status(T0)["leases"]] == ["4ml5k0vq9o/web-0"]
        api.delete_pod("web-0", namespace="4ml5k0vq9o")
        lease.kill()
        lease.wait()
        # The lease ended; the monitoring container still runs: mining resumes beside it.
        assert agent.tick() == ["start-miner"] and agent.state.mode == "idle-mining"
    finally:
        for proc in (lease, other):
            proc.kill()
            proc.wait()


def test_a_stopping_agent_takes_its_node_off_the_market_and_the_next_one_offers_it_again(api, tmp_path):
    agent = idle_mining(api, tmp_path)
    assert agent.state.mode == "idle-mining" and not cordoned(api)
    assert agent.leave_market() and cordoned(api)  # m2p-agent stopped: the unit's ExecStopPost
    assert not agent.leave_market()  # once
    again = make_agent(api, tmp_path, LEASE_FIRST)
    assert again.tick() == ["offer"] and not cordoned(api)
