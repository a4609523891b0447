"""The agent's service against the STAND-IN Kubernetes API (loopback) and a miner driven by
real shell commands (a file stands for the miner process).  GPU truth is a stand-in of
NVML that reports the miner's PID while the miner runs (no GPU here)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import threading
from datetime import UTC
from pathlib import Path

import pytest

from m2p_sandbox import gpu_standin
from m2p_sandbox.kube_api import KubeApiStandin
from miner2provider.agent import gate, nvml, rig
from miner2provider.agent.clocks import Clocks
from miner2provider.agent.service import OLD_PLACEHOLDER_LABEL, Agent, Config
from miner2provider.cli import render
from miner2provider.rigside import kube as kube_api
from miner2provider.rigside.status import agent_status_from
from miner2provider.timeshare import model

NODE = "rig01"


@pytest.fixture
def api():
    server = KubeApiStandin()
    server.add_node(NODE, "rig01-token", {"kubernetes.io/hostname": NODE}, gpus=2)
    server.add_node("rig02", "rig02-token")
    yield server
    server.close()


def client(api, tmp_path, token="rig01-token"):
    """The agent's client as a token user's agent runs it: the token, and the cluster's CA (the stand-in's)."""
    (tmp_path / "token").write_text(token + "\n")
    (tmp_path / "ca.crt").write_bytes(api.authority.pem)
    return kube_api.KubeClient(api.url, str(tmp_path / "token"), str(tmp_path / "ca.crt"))


class LoggedClocks(Clocks):
    """The cards' clocks, seen from the test: reset() writes to the same log the miner's stand-in
    commands write to (the real reset talks to NVML or nvidia-smi, tested in test_agent_rig.py)."""

    def reset(self, nvml=None, run=None, cards=None) -> list[str]:
        events = Path(self.apply_cmd.rsplit(" ", 1)[-1])
        if (events.parent / "clocks.broken").exists():
            raise RuntimeError("nvidia-smi -rgc exited 15: GPU is lost")
        with events.open("a") as f:
            f.write("reset\n" if cards is None else f"reset:{','.join(sorted(cards))}\n")
        return ["GPU 0: nvmlDeviceSetGpcClkVfOffset"] if (events.parent / "clocks.old").exists() else []

    def tuned(self, cards=None, nvml=None, run=None) -> frozenset[str]:
        """The cards named in ``retuned`` (a test's dashboard OC push), among ``cards``; each reading counted."""
        events = Path(self.apply_cmd.rsplit(" ", 1)[-1])
        with (events.parent / "clock-reads").open("a") as f:
            f.write(f"{','.join(sorted(cards)) if cards is not None else 'all'}\n")
        named = (events.parent / "retuned").read_text().split() if (events.parent / "retuned").exists() else []
        return frozenset(card for card in named if cards is None or card in cards)


NO_SUCH_PID = 4_194_304 + 4242  # above the kernel's PID_MAX_LIMIT (2^22): kill() answers ESRCH, never ends a process


def make_agent(api, tmp_path, schedule: str, clock=lambda: 1_800_000_000.0, economics: str = "",
               hashrate_file: str = "", trex_api: str = "", system_namespaces: tuple[str, ...] = (),
               lease_label: str = "") -> Agent:
    (tmp_path / "schedule.yml").write_text(schedule)
    (tmp_path / "labels.json").write_text(json.dumps({"nvidia.com/gpu.count": "2"}))
    running = tmp_path / "miner.running"
    watchdog = tmp_path / "wd.running"
    wd_log = tmp_path / "wd.log"  # the watchdog's hold and release, in order
    events = tmp_path / "events"
    miner = rig.Miner(f"test -e {running}", f"touch {running}; echo start >> {events}", f"rm -f {running}",
                      watchdog_running_cmd=f"test -e {watchdog}", watchdog_stop_cmd=f"rm -f {watchdog}; echo held >> {wd_log}",
                      watchdog_release_cmd=f"echo released >> {wd_log}", watchdog_start_cmd=f"touch {watchdog}")
    config = Config(node=NODE, schedule=str(tmp_path / "schedule.yml"), api_server=api.url,
                    token_file=str(tmp_path / "token"), ca_file=str(tmp_path / "ca.crt"), miner=miner, gpu_count=2,
                    state_dir=str(tmp_path / "state"), labels_file=str(tmp_path / "labels.json"),
                    clocks=LoggedClocks(apply_cmd=f"echo reapply >> {events}"), economics=economics,
                    hashrate_file=hashrate_file, trex_api=trex_api, system_namespaces=system_namespaces,
                    lease_label=lease_label, cdi_spec=str(tmp_path / "etc-cdi" / "nvidia.yaml"),
                    cdi_dirs=(str(tmp_path / "etc-cdi"), str(tmp_path / "run-cdi")))  # never this machine's specs
    # One clock for the wall and the intervals here (a stepped wall clock has a test of its own); one boot.
    # The stand-in miner's GPU process is a pid no process can have: the agent ends what still holds a GPU after
    # a failed stop (TERM, then KILL, by pid), and a real pid here (it was 4242) ended whatever process of this
    # machine had it (a sandbox rig's supervisor, mid-boot, in a CI run).
    return Agent(config, client(api, tmp_path), gpu_processes=lambda: [NO_SUCH_PID] if running.exists() else [],
                 clock=clock, monotonic=clock, boot="boot-1")


def idle_mining(api, tmp_path, **kwargs) -> Agent:
    """An agent (make_agent, lease-first) two ticks in: the node offered, the miner started."""
    agent = make_agent(api, tmp_path, LEASE_FIRST, **kwargs)
    agent.tick()
    agent.tick()
    assert agent.state.mode == "idle-mining"
    return agent


FIXED_LEASE = "timezone: UTC\npolicy: fixed\ndefault: lease\nmin_switch_interval: 0s\n"
FIXED_MINE = "timezone: UTC\npolicy: fixed\ndefault: mine\nmin_switch_interval: 0s\n"
LEASE_FIRST = "timezone: UTC\npolicy: lease-first\nmin_switch_interval: 0s\n"


def test_client_reads_pods_of_its_node_only_and_may_patch_only_its_node(api, tmp_path):
    api.add_pod("job", NODE, 1)
    api.add_pod("elsewhere", "rig02", 1)
    kube = client(api, tmp_path)
    assert [p["metadata"]["name"] for p in kube.pods_on_node(NODE)] == ["job"]
    patched = kube.patch_node(NODE, {"metadata": {"labels": {"m2p.io/mode": "mining"}}})
    assert patched["metadata"]["labels"] == {"kubernetes.io/hostname": NODE, "m2p.io/mode": "mining"}
    with pytest.raises(kube_api.ApiError, match="HTTP 403"):
        kube.patch_node("rig02", {"metadata": {"labels": {"x": "y"}}})
    with pytest.raises(kube_api.ApiError, match="HTTP 401"):
        client(api, tmp_path, token="wrong").node(NODE)


def test_a_missing_ca_file_is_an_api_error_not_a_crash(tmp_path):
    """k3s writes its CA when it first starts: an agent started before that must keep running."""
    (tmp_path / "token").write_text("t\n")
    kube = kube_api.KubeClient("https://127.0.0.1:9", str(tmp_path / "token"), str(tmp_path / "absent-ca.crt"))
    with pytest.raises(kube_api.ApiError, match="GET /api/v1/nodes/rig01: .*No such file"):
        kube.node("rig01")


def test_the_old_mining_taint_goes_other_taints_stay_and_a_race_is_lost_not_overwritten(api, tmp_path):
    kube = client(api, tmp_path)
    old = {"key": kube_api.OLD_MINING_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
    kube.patch_node(NODE, {"spec": {"taints": [{"key": "other", "effect": "NoExecute"}, old]}})
    node = kube.node(NODE)
    assert kube_api.has_old_taint(node)
    kube.patch_node(NODE, {"metadata": {"labels": {"x": "y"}}})  # someone else wrote meanwhile
    with pytest.raises(kube_api.ApiError, match="HTTP 409"):  # computed from the older version
        kube.patch_node(NODE, kube_api.without_old_taint(node))
    clean = kube.patch_node(NODE, kube_api.without_old_taint(kube.node(NODE)))
    assert clean["spec"]["taints"] == [{"key": "other", "effect": "NoExecute"}] and not kube_api.has_old_taint(clean)


def cordoned(api) -> bool:
    return bool(api.nodes[NODE]["spec"].get("unschedulable"))


def container(tmp_path, name="c1", pod=("lease", "job")):
    """A process standing for a lease's container (runc would have created it)."""
    proc = subprocess.Popen(["sleep", "60"])
    return proc, {"id": name, "pid": proc.pid, "annotations": {
        gate.POD_NAMESPACE: pod[0], gate.POD_NAME: pod[1], gate.CONTAINER_NAME: "main"}}


def at_the_gate(tmp_path, state, timeout=10.0):
    """The hook's side, in a thread as the runtime would run it beside the agent."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(
        answer=gate.wait_for_hand_over(tmp_path / "state/gate", state, timeout)))
    thread.start()
    return thread, result


def handed_over(agent, tmp_path, state, ticks=(["stop-miner"], ["grant"])) -> tuple[bool, str]:
    """The container at the gate while the agent ticks ``ticks`` (each tick's actions as expected); the gate's
    answer."""
    thread, result = at_the_gate(tmp_path, state)
    wait_waiting(agent, thread)
    for expected in ticks:
        assert agent.tick() == expected
    thread.join(5)
    return result["answer"]


def wait_waiting(agent, thread):
    for _ in range(200):
        if agent.gates.any_waiting() or not thread.is_alive():
            return
        threading.Event().wait(0.01)


def test_lease_window_stops_the_miner_and_publishes_mode_and_labels(api, tmp_path):
    agent = make_agent(api, tmp_path, FIXED_LEASE)
    (tmp_path / "miner.running").touch()
    assert agent.tick() == ["stop-miner"]
    assert not (tmp_path / "miner.running").exists()
    agent.tick()
    node = api.nodes[NODE]
    assert agent.state.mode == "leasing" and not cordoned(api)
    assert node["metadata"]["labels"]["m2p.io/mode"] == "leasing"
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "2"
    status = json.loads(node["metadata"]["annotations"]["m2p.io/status"])
    assert status["mode"] == "leasing" and status["last_error"] == "" and status["schedule"] == "schedule"
    assert json.loads((tmp_path / "state/status.json").read_text())["mode"] == "leasing"
    # The rig's copy is always schedule.yml: the status says the owner's name for it, which the role hands on.
    agent.config = Config(**{**agent.config.__dict__, "schedule_name": "night-lease"})
    agent.tick()
    assert json.loads(api.nodes[NODE]["metadata"]["annotations"]["m2p.io/status"])["schedule"] == "night-lease"


def test_a_hung_mining_os_command_is_a_miner_error():
    """A miner command that hangs fails like one that exits non-zero (the agent reports it)."""
    miner = rig.Miner("true", "sleep 5", "true", timeout_s=0.2)
    with pytest.raises(RuntimeError, match=r"sleep 5 did not finish within 0.2 s"):
        miner.start()


def test_the_watchdog_is_kept_stopped_while_leasing_only(api, tmp_path):
    """HiveOS starts wd with the miner, at boot, on a push; leased GPUs have no hashrate, so wd
    would reboot the rig under the lease.  Mining keeps the owner's watchdog."""
    now = [1_800_000_000.0]
    watchdog = tmp_path / "wd.running"
    agent = make_agent(api, tmp_path, FIXED_LEASE, clock=lambda: now[0])
    watchdog.touch()
    agent.tick()  # mining -> stops the miner (leasing only once the GPUs are free)
    agent.tick()
    assert agent.state.mode == "leasing" and not watchdog.exists()
    watchdog.touch()  # a dashboard push starts it again
    now[0] += 3
    agent.tick()
    assert watchdog.exists()  # not looked at on every tick: it acts in minutes
    now[0] += 10
    agent.tick()
    assert not watchdog.exists()
    assert (tmp_path / "wd.log").read_text().split() == ["held", "held"]
    assert json.loads((tmp_path / "state/status.json").read_text())["watchdog"] == "held while leased (it ran before)"
    # A new agent (a restart, a new schedule: mining) knows it held the watchdog, and gives it back as it was:
    # released and running again, once the rig mines.
    agent = make_agent(api, tmp_path, FIXED_MINE, clock=lambda: now[0])
    for _ in range(3):
        agent.tick()
    assert agent.state.mode == "mining" and watchdog.exists()
    assert (tmp_path / "wd.log").read_text().split() == ["held", "held", "released"]
    assert json.loads((tmp_path / "state/status.json").read_text())["watchdog"] == ""
    (tmp_path / "m").mkdir()
    mining = make_agent(api, tmp_path / "m", FIXED_MINE)
    (tmp_path / "m" / "wd.running").touch()
    for _ in range(3):
        mining.tick()
    assert mining.state.mode == "mining" and (tmp_path / "m" / "wd.running").exists()


def test_mining_window_cordons_the_node_and_starts_the_miner(api, tmp_path):
    agent = make_agent(api, tmp_path, FIXED_MINE)
    assert agent.tick() == ["start-miner"]
    assert (tmp_path / "miner.running").exists() and cordoned(api)
    assert api.akash_view(NODE)["excluded"] == "unschedulable"
    assert agent.tick() == []  # steady


def test_an_owners_cordon_stays_and_the_old_design_is_cleaned_up(api, tmp_path):
    api.nodes[NODE]["spec"]["unschedulable"] = True  # the owner's own cordon
    api.nodes[NODE]["spec"]["taints"] = [{"key": kube_api.OLD_MINING_TAINT_KEY, "effect": "NoSchedule"}]
    api.nodes[NODE]["metadata"]["labels"][OLD_PLACEHOLDER_LABEL] = "2"
    agent = make_agent(api, tmp_path, LEASE_FIRST)
    for _ in range(3):
        agent.tick()
    assert agent.state.mode == "idle-mining" and cordoned(api)  # not the agent's to lift
    node = api.nodes[NODE]
    assert not node["spec"].get("taints") and OLD_PLACEHOLDER_LABEL not in node["metadata"]["labels"]


def test_idle_mining_gpus_look_free_to_akash_and_the_gate_hands_over_after_the_miner_let_go(api, tmp_path):
    agent = make_agent(api, tmp_path, LEASE_FIRST)
    assert agent.tick() == ["offer"]
    assert agent.tick() == ["start-miner"] and agent.state.mode == "idle-mining"
    assert api.akash_view(NODE) == {"excluded": None, "gpus_allocatable": 2, "gpus_allocated": 0,
                                    "gpus_available": 2}
    # Akash bids, wins; the lease's pod binds and its container reaches the gate.
    api.add_pod("job", NODE, 2, phase="Pending")
    proc, state = container(tmp_path)
    try:
        thread, result = at_the_gate(tmp_path, state)
        wait_waiting(agent, thread)
        assert agent.tick() == ["stop-miner"] and thread.is_alive()  # not before NVML shows the GPUs free
        assert agent.tick() == ["grant"]
        thread.join(5)
        assert result["answer"] == (True, "") and agent.state.mode == "leasing"
        assert not (tmp_path / "miner.running").exists()
        # The API goes away; the rig's own record of the running container keeps the miner off.
        api.down = True
        api.delete_pod("job")
        for _ in range(3):
            assert "start-miner" not in agent.tick()
    finally:
        proc.kill()
        proc.wait()
    api.down = False
    assert agent.tick() == ["start-miner"] and agent.state.mode == "idle-mining"
    # The cards: the OS's clocks re-applied before the miner first started, reset to their defaults
    # before the lease's container ran, the OS's own settings back before the miner started again.
    assert (tmp_path / "events").read_text().split() == ["reapply", "start", "reset", "reapply", "start"]


def break_the_miner(agent, tmp_path) -> None:
    stuck = rig.Miner(agent.config.miner.running_cmd, agent.config.miner.start_cmd, "echo busy >&2; exit 3",
                      grace_s=0.2)
    agent.config = Config(**{**agent.config.__dict__, "miner": stuck})


def break_the_clocks(agent, tmp_path) -> None:
    (tmp_path / "clocks.broken").touch()


@pytest.mark.parametrize("fault, ticks, said, failed_action", [
    (break_the_miner, 1, ["the miner could not be stopped", "exited 3: busy"], "stop-miner"),
    (break_the_clocks, 2, ["the GPUs' clocks could not be reset to their defaults", "GPU is lost"], "grant"),
])
def test_a_hand_over_that_fails_keeps_the_container_from_starting(api, tmp_path, fault, ticks, said, failed_action):
    """Fail closed, saying why: a miner that will not stop; clocks that cannot be reset (a lease on
    mining clocks may compute wrong)."""
    agent = idle_mining(api, tmp_path)
    fault(agent, tmp_path)
    proc, state = container(tmp_path)
    try:
        thread, result = at_the_gate(tmp_path, state)
        wait_waiting(agent, thread)
        for _ in range(ticks):
            agent.tick()
        thread.join(5)
        ok, why = result["answer"]
        assert not ok and all(part in why for part in said), why
        assert failed_action in agent.last_error
    finally:
        proc.kill()
        proc.wait()


def test_a_cdi_spec_without_the_gate_keeps_an_idle_mining_rig_off_the_market(api, tmp_path):
    """nvidia-cdi-refresh regenerating the spec after a driver update drops m2p's hook: idle
    mining would then let a lease start beside the miner, so the node stays cordoned."""
    agent = make_agent(api, tmp_path, LEASE_FIRST)
    spec = tmp_path / "nvidia.yaml"
    agent.config = Config(**{**agent.config.__dict__, "cdi_spec": str(spec)})
    spec.write_text("kind: nvidia.com/gpu\ncontainerEdits:\n  hooks:\n  - {path: /usr/bin/nvidia-cdi-hook}\n")
    agent.tick()
    agent.tick()
    assert agent.state.mode == "idle-mining" and cordoned(api) and "lacks m2p's gate" in agent.last_error
    spec.write_text("containerEdits:\n  hooks:\n  - {path: /bin/sh, args: [sh, -c, 'exec /opt/m2p/gate']}\n")
    agent.tick()
    assert not cordoned(api)


@pytest.mark.parametrize(("name", "spec"), [
    # Toolkit 1.18+'s nvidia-cdi-refresh: /var/run/cdi/nvidia.yaml, which CDI ranks above /etc/cdi's (the role masks
    # the refresher; an owner who unmasks it meets this)
    ("nvidia.yaml", "kind: nvidia.com/gpu\ncontainerEdits:\n  hooks:\n  - {path: /usr/bin/nvidia-cdi-hook}\n"),
    # a management spec nvidia-ctk wrote, in JSON, under another name: a runtime reads every .json and .yaml there
    ("management.json", '{"cdiVersion": "0.5.0", "kind": "management.nvidia.com/gpu", "devices": []}'),
])
def test_any_spec_naming_nvidia_devices_in_the_runtimes_cdi_dirs_must_carry_the_gate(api, tmp_path, name, spec):
    """With m2p's spec intact, another spec of NVIDIA's devices without the gate still lets a lease start beside the
    miner: the rig goes off the market while it is there.  Another vendor's spec, or a file the runtime does not
    read, changes nothing."""
    agent = make_agent(api, tmp_path, LEASE_FIRST)
    ours, run_dir = Path(agent.config.cdi_spec), Path(agent.config.cdi_dirs[1])
    ours.parent.mkdir()
    ours.write_text("containerEdits:\n  hooks:\n  - {path: /bin/sh, args: [sh, -c, 'exec /opt/m2p/gate']}\n")
    run_dir.mkdir()
    (run_dir / "amd.yaml").write_text("cdiVersion: 0.5.0\nkind: amd.com/gpu\ndevices: []\n")
    (run_dir / "nvidia.yaml.bak").write_text("kind: nvidia.com/gpu\n")
    agent.tick()
    agent.tick()
    assert agent.state.mode == "idle-mining" and not cordoned(api)
    theirs = run_dir / name
    theirs.write_text(spec)
    agent.tick()
    assert cordoned(api) and f"{theirs} lacks m2p's gate" in agent.last_error
    theirs.unlink()
    agent.tick()
    assert not cordoned(api)


def test_the_gate_gives_up_when_no_agent_answers(tmp_path):
    proc, state = container(tmp_path)
    try:
        assert gate.wait_for_hand_over(tmp_path / "gate", state, timeout_s=0.3) == (
            False, "no hand-over from m2p-agent within 0.3 s (is m2p-agent.service running?)")
        assert not list((tmp_path / "gate").iterdir())  # no request left behind
    finally:
        proc.kill()
        proc.wait()


def test_gpu_processes_inside_a_pod_are_not_the_miner(tmp_path):
    for pid, cgroup in ((10, "0::/kubepods.slice/kubepods-besteffort.slice/cri-containerd-ab.scope\n"),
                        (11, "4:memory:/kubepods/besteffort/pod1/ab\n"), (12, "0::/system.slice/hive.service\n"),
                        # a user's own cgroup named like kubelet's (cgroup delegation lets a user make one)
                        (14, "0::/user.slice/user-1000.slice/user@1000.service/kubepods/x.scope\n"),
                        (15, "0::/system.slice/mykubepods-miner.service\n")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(cgroup)
    assert nvml.outside_containers([10, 11, 12, 13, 14, 15], proc=str(tmp_path)) == [12, 13, 14, 15]


def test_state_survives_a_restart_and_the_api_going_away(api, tmp_path):
    agent = make_agent(api, tmp_path, FIXED_LEASE)
    (tmp_path / "miner.running").touch()
    agent.tick()
    agent.tick()
    api.add_pod("lease-1", NODE, 2)
    api.down = True
    again = make_agent(api, tmp_path, FIXED_MINE)  # rebooted into a mining window, API unreachable
    assert again.state.mode == "leasing"
    (tmp_path / "miner.running").touch()  # the mining OS started the miner at boot
    assert again.tick() == ["stop-miner"]  # re-asserted from the state on disk, without the API
    assert again.tick() == [] and not (tmp_path / "miner.running").exists()
    assert again.last_error.startswith("API: GET /api/v1/pods")
    assert json.loads((tmp_path / "state/status.json").read_text())["last_error"].startswith("API:")


def test_next_change_is_scanned_again_only_once_it_has_passed(api, tmp_path, monkeypatch):
    from datetime import datetime

    from miner2provider.agent import service
    from miner2provider.timeshare import policy

    now = [1_800_000_000.0]  # 2027-01-15 08:00 UTC
    agent = make_agent(api, tmp_path, "timezone: UTC\npolicy: fixed\ndefault: mine\nmin_switch_interval: 0s\n"
                       "windows:\n  - {days: daily, from: '09:00', to: '17:00', mode: lease}\n", clock=lambda: now[0])
    scans, scan = [], policy.next_change
    monkeypatch.setattr(service.policy, "next_change", lambda *a, **k: scans.append(a) or scan(*a, **k))
    first = agent.next_change(now[0])
    assert first == scan(agent.schedule, datetime.fromtimestamp(now[0], UTC))
    now[0] += 1800
    assert agent.next_change(now[0]) == first and len(scans) == 1
    now[0] = first.timestamp()
    assert agent.next_change(now[0]) > first and len(scans) == 2


def test_labels_of_a_swapped_card_replace_the_old_ones_on_the_live_node(api, tmp_path):
    agent = make_agent(api, tmp_path, FIXED_LEASE)
    (tmp_path / "labels.json").write_text(json.dumps({"akash.network/x.model.rtx3090": "2"}))
    agent.tick()
    (tmp_path / "labels.json").write_text(json.dumps({"akash.network/x.model.rtx3080": "2"}))
    agent.tick()
    labels = api.nodes[NODE]["metadata"]["labels"]
    assert "akash.network/x.model.rtx3090" not in labels and labels["akash.network/x.model.rtx3080"] == "2"
    assert labels["kubernetes.io/hostname"] == NODE  # not m2p's: kept


def test_gpu_processes_through_nvml_and_nvidia_smi_all_of_them_and_card_by_card():
    class Proc:
        def __init__(self, pid):
            self.pid = pid

    class Nvml:  # STAND-IN for pynvml: the calls and shapes of nvidia-ml-py
        def nvmlInit(self):
            pass

        def nvmlShutdown(self):
            pass

        def nvmlDeviceGetCount(self):
            return 2

        def nvmlDeviceGetHandleByIndex(self, i):
            return i

        def nvmlDeviceGetUUID(self, handle):
            return (b"GPU-aaa", "GPU-bbb")[handle]  # older pynvml answers bytes

        def nvmlDeviceGetComputeRunningProcesses(self, handle):
            return [Proc(78 + handle), Proc(77)]

    assert nvml.gpu_processes(Nvml()) == [77, 78, 79]
    assert nvml.gpu_processes_by_card(Nvml()) == {"GPU-aaa": [77, 78], "GPU-bbb": [77, 79]}

    class NoDriver(Nvml):
        def nvmlInit(self):
            raise OSError("NVML Shared Library Not Found")

    class Done:
        def __init__(self, argv):
            self.returncode = 0
            self.stdout = ("123, GPU-aaa\n123, GPU-bbb\n456, GPU-bbb\nNo running processes found\n"
                           if "gpu_uuid" in argv[1] else "123\n456\n")

    calls = []
    assert nvml.gpu_processes(NoDriver(), run=lambda argv, **kw: calls.append(argv) or Done(argv)) == [123, 456]
    assert nvml.gpu_processes_by_card(NoDriver(), run=lambda argv, **kw: calls.append(argv) or Done(argv)) == {
        "GPU-aaa": [123], "GPU-bbb": [123, 456]}
    assert calls == [["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                     ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"]]


def test_agent_zipapp_is_self_contained_and_byte_identical_on_every_build():
    import io
    import zipfile

    from miner2provider.fleet import agent_zipapp as package

    data = package.build()
    assert data == package.build()  # a re-run of the role copies nothing
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert {"__main__.py", "miner2provider/agent/service.py", "miner2provider/timeshare/model.py",
            "yaml/__init__.py", "pynvml.py"} <= set(names)
    assert not [n for n in names if n.endswith(".so")]  # pure Python: any rig's python3


def test_the_marketplaces_own_services_are_not_leases_when_the_config_names_their_namespace(api, tmp_path):
    """The agent knows no marketplace by name: its configuration (role_vars, from market/) names the
    marketplace's own namespaces; without it, a pod there counts as a lease (fail safe)."""
    api.add_pod("akash-provider-0", NODE, 0, namespace="akash-services")
    api.add_pod("job", NODE, 1, namespace="tenant-ns")

    def leases(namespaces: tuple[str, ...]) -> list[str]:
        agent = make_agent(api, tmp_path, LEASE_FIRST, system_namespaces=namespaces)
        agent.tick()
        return [lease["pod"] for lease in json.loads((tmp_path / "state" / "status.json").read_text())["leases"]]

    assert leases(("akash-services",)) == ["tenant-ns/job"]
    assert leases(()) == ["akash-services/akash-provider-0", "tenant-ns/job"]


def test_status_lists_tenant_pods_and_drain_cordons_then_uncordons(api, tmp_path):
    """The lease guard's eyes (fleet/guards.py): every tenant pod on the node (GPU or not, not the
    placeholder, not a system or DaemonSet pod); --drain's request cordons the node while it
    exists, and the agent lifts only its own cordon."""
    api.add_pod("gpu-job", NODE, 1, namespace="akash-abc")
    api.add_pod("cpu-job", NODE, 0, namespace="akash-def")
    api.add_pod("done", NODE, 1, namespace="akash-ghi", phase="Succeeded")
    api.add_pod("coredns", NODE, 0, namespace="kube-system")
    api.add_pod("m2p-placeholder-x", NODE, 2, namespace="m2p-system",
                labels={"app.kubernetes.io/name": "m2p-placeholder"})
    api.add_pod("exporter", NODE, 0, namespace="monitoring")
    api.pods[("monitoring", "exporter")]["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "x"}]
    agent = make_agent(api, tmp_path, LEASE_FIRST)
    agent.tick()
    agent.tick()  # mining (cordoned) -> leasing -> offered
    status = json.loads((tmp_path / "state" / "status.json").read_text())
    assert [lease["pod"] for lease in status["leases"]] == ["akash-abc/gpu-job", "akash-def/cpu-job"]
    assert all(lease["since"].endswith("Z") for lease in status["leases"]) and status["drain"] is False
    assert not api.nodes[NODE].get("spec", {}).get("unschedulable")

    (tmp_path / "state" / "drain").write_text("")
    agent.tick()
    assert api.nodes[NODE]["spec"]["unschedulable"] is True
    assert json.loads((tmp_path / "state" / "status.json").read_text())["drain"] is True
    (tmp_path / "state" / "drain").unlink()
    agent.tick()
    assert "unschedulable" not in api.nodes[NODE]["spec"]

    # An owner's own cordon stays: the agent never cordoned it.
    client(api, tmp_path).patch_node(NODE, {"spec": {"unschedulable": True}})
    agent.tick()
    assert api.nodes[NODE]["spec"]["unschedulable"] is True


def test_the_ledger_gets_one_line_per_change_never_per_tick_across_restarts(api, tmp_path):
    from miner2provider.rigside import ledger

    agent = make_agent(api, tmp_path, LEASE_FIRST)
    for _ in range(5):
        agent.tick()
    entries, bad = ledger.read(tmp_path / "state")
    assert bad == 0 and [e.mode for e in entries] == ["idle-mining"]
    api.add_pod("job", NODE, 2)
    for _ in range(4):
        agent.tick()
    api.down = True  # blind: one line, and the lease it last saw stays named
    agent.tick()
    agent.tick()
    api.down = False
    restarted = make_agent(api, tmp_path, LEASE_FIRST)  # the agent restarts: no line for the same state
    restarted.tick()
    modes = [(e.mode, e.blind, e.leases) for e in ledger.read(tmp_path / "state")[0]]
    assert modes == [("idle-mining", False, ()), ("leasing", False, ("lease/job",)),
                     ("leasing", True, ("lease/job",)), ("leasing", False, ("lease/job",))], modes


PROFIT = "timezone: UTC\npolicy: profit\nmin_switch_interval: 0s\nhysteresis: 0.1\n"
RTX3090_LABELS = {"m2p.io/gpu.model.rtx3090": "2", "nvidia.com/gpu.count": "2"}


def economics_file(path, lease: float) -> None:
    """rtx3090: mining 2.40 a day = 0.10/h, power 250 W x 0.20 = 0.05/h; floor 0.05 + 1.0 x 0.05 = 0.10/h."""
    path.write_text(f"lease_price_per_gpu_hour: {{rtx3090: {lease}}}\nmining_revenue_per_gpu_day: {{rtx3090: 2.40}}\n"
                    "gpu_power_watts: {default: 250}\npower_price_per_kwh: 0.20\n")


def test_profit_offers_while_a_lease_pays_and_follows_the_economics_file_as_it_changes(api, tmp_path):
    now = [1_800_000_000.0]
    figures = tmp_path / "economics.yml"
    economics_file(figures, 0.08)  # below the floor: mine
    agent = make_agent(api, tmp_path, PROFIT, clock=lambda: now[0], economics=str(figures))
    (tmp_path / "labels.json").write_text(json.dumps(RTX3090_LABELS))
    (tmp_path / "miner.running").touch()
    agent.tick()
    assert agent.state.mode == "mining" and cordoned(api)
    status = json.loads(api.nodes[NODE]["metadata"]["annotations"]["m2p.io/status"])
    assert status["profit"] == {"lease_pays": False, "lease_per_hour": 0.16, "floor_per_hour": 0.2,
                                "source": "economics file"}

    def rewrite(lease: float) -> None:
        economics_file(figures, lease)
        now[0] += 60
        os.utime(figures, (now[0], now[0]))  # a new mtime even within the file system's granularity

    rewrite(0.105)  # above the floor, inside the 10 % band: still mining
    agent.tick()
    assert agent.state.mode == "mining"
    rewrite(0.12)  # 0.24 >= 0.20 x 1.1: offered, idle mining until a lease comes
    agent.tick()
    assert agent.state.mode == "idle-mining" and not cordoned(api) and (tmp_path / "miner.running").exists()
    api.add_pod("lease-1", NODE, 2)
    agent.tick()
    assert agent.state.mode == "leasing" and not (tmp_path / "miner.running").exists()
    rewrite(0.05)  # mining pays more again: no new lease, the running one is not cut
    agent.tick()
    assert agent.state.mode == "draining" and cordoned(api) and not (tmp_path / "miner.running").exists()
    api.delete_pod("lease-1")
    agent.tick()
    assert agent.state.mode == "mining" and (tmp_path / "miner.running").exists()
    restarted = make_agent(api, tmp_path, PROFIT, clock=lambda: now[0], economics=str(figures))
    assert restarted.offer == agent.offer  # the offer survives a restart with the state


def test_a_one_gpu_lease_on_the_two_gpu_rig_is_priced_as_one_gpu_against_the_whole_rigs_floor(api, tmp_path):
    """Whole-rig hand-over: the lease of 1 of the 2 GPUs stops the miner on both; the quote says it pays 0.12/h
    (not the rig's 0.24/h) against the whole rig's floor of 0.20/h, and the status's readers say the same.  The
    offer stays: withdrawing would cut no lease, only keep the idle card from a second one."""
    figures = tmp_path / "economics.yml"
    economics_file(figures, 0.12)
    agent = make_agent(api, tmp_path, PROFIT, economics=str(figures))
    (tmp_path / "labels.json").write_text(json.dumps(RTX3090_LABELS))
    (tmp_path / "miner.running").touch()
    agent.tick()
    status = json.loads((tmp_path / "state/status.json").read_text())
    assert agent.state.mode == "idle-mining" and "leased" not in status["profit"], status["profit"]
    assert agent_status_from(status).leased_gpus == 0
    api.add_pod("lease-1", NODE, 1)
    agent.tick()
    status = json.loads((tmp_path / "state/status.json").read_text())
    assert agent.state.mode == "leasing" and not (tmp_path / "miner.running").exists()  # both cards stopped
    assert status["hand_over"] == "whole rig" and status["profit"]["lease_pays"] is True
    assert status["profit"]["leased"] == {"gpus": 1, "of": 2, "per_hour": 0.12}, status["profit"]
    read = agent_status_from(status)
    assert (read.leased_gpus, read.leased_of, read.leased_per_hour, read.floor_per_hour) == (1, 2, 0.12, 0.2)
    line = render.agent_line({"service": "active", **dataclasses.asdict(read)})
    assert "; leased 1 of 2 GPUs for 0.12/h (the miner stops on every card)" in line, line
    api.add_pod("lease-2", NODE, 1)  # the idle card leased too
    agent.tick()
    assert json.loads((tmp_path / "state/status.json").read_text())["profit"]["leased"]["per_hour"] == 0.24


@pytest.mark.parametrize("leased", [{"gpus": 3, "of": 2, "per_hour": 0.1}, {"gpus": 0, "of": 2, "per_hour": 0.1},
                                    {"gpus": True, "of": 2, "per_hour": 0.1}, {"gpus": 1, "of": 2, "per_hour": -1},
                                    {"gpus": 1, "of": 999, "per_hour": 0.1}, "1 of 2"])
def test_a_rigs_odd_leased_figures_read_as_none(leased):
    read = agent_status_from({"mode": "leasing", "profit": {"lease_pays": True, "leased": leased}})
    assert (read.leased_gpus, read.leased_of, read.leased_per_hour) == (0, 0, None)


def test_a_reclamation_window_is_priced_into_the_offer(api, tmp_path):
    """W = 2 h: a withdrawal takes effect 2 h late, at least floor x h an hour below mining; spread over the
    offer it ends (at least W long): 0.20 x 0.1 x 2 h / 2 h = 0.02/h more before the rig is offered."""
    now = [1_800_000_000.0]
    figures = tmp_path / "economics.yml"
    economics_file(figures, 0.115)  # 0.23/h: above 0.20 x 1.1 (offered without a window), below 0.22 + 0.02
    agent = make_agent(api, tmp_path, PROFIT + "reclamation_window: 2h\n", clock=lambda: now[0],
                       economics=str(figures))
    (tmp_path / "labels.json").write_text(json.dumps(RTX3090_LABELS))
    (tmp_path / "miner.running").touch()
    agent.tick()
    status = json.loads((tmp_path / "state/status.json").read_text())
    assert agent.state.mode == "mining" and status["profit"]["reclaim_per_hour"] == 0.02
    assert agent_status_from(status).reclaim_per_hour == 0.02
    economics_file(figures, 0.125)  # 0.25/h >= 0.24: offered
    now[0] += 60
    os.utime(figures, (now[0], now[0]))
    agent.tick()
    assert agent.state.mode == "idle-mining" and not cordoned(api)


@pytest.mark.parametrize(("content", "said"), [
    (None, "economics.yml: No such file or directory"),
    ("lease_price_per_gpu_hour: {rtx3090: 0.3}\n", "mining_revenue_per_gpu_day for rtx3090"),
    ("lease_price_per_gpu_hour: {rtx3090: -1}\n", "economics.yml:1: lease_price_per_gpu_hour.rtx3090 is -1"),
])
def test_a_missing_or_broken_economics_file_is_reported_and_changes_nothing(api, tmp_path, content, said):
    figures = tmp_path / "economics.yml"
    if content is not None:
        figures.write_text(content)
    agent = make_agent(api, tmp_path, PROFIT, economics=str(figures))
    (tmp_path / "labels.json").write_text(json.dumps(RTX3090_LABELS))
    (tmp_path / "miner.running").touch()
    agent.tick()
    status = json.loads((tmp_path / "state/status.json").read_text())
    assert agent.state.mode == "mining" and status["profit"]["lease_pays"] is False
    assert said in status["profit"]["missing"] and status["profit"]["floor_per_hour"] is None


def test_the_miners_own_stats_are_averaged_shown_every_ten_minutes_and_price_the_rig(api, tmp_path):
    now = [1_800_000_000.0]
    figures, stats = tmp_path / "economics.yml", tmp_path / "last_stat.json"
    economics_file(figures, 0.12)
    with figures.open("a") as f:
        f.write("mining_revenue_per_mhs_day: {kawpow: 0.05}\n")

    def hiveos_writes(mhs: float) -> None:  # as HiveOS's agent loop does (measure.py)
        stats.write_text(json.dumps({"params": {"passwd": "secret-pw", "power": [240, 240], "miner_stats": {
            "hs": [mhs * 1e6, mhs * 1e6], "hs_units": "hs", "algo": "kawpow"}}}))
        os.utime(stats, (now[0], now[0]))

    agent = make_agent(api, tmp_path, PROFIT, clock=lambda: now[0], economics=str(figures),
                       hashrate_file=str(stats))
    (tmp_path / "labels.json").write_text(json.dumps(RTX3090_LABELS))
    (tmp_path / "miner.running").touch()
    hiveos_writes(58.0)
    agent.tick()
    status = json.loads((tmp_path / "state/status.json").read_text())
    assert status["measured"]["mhs"] == [58.0, 58.0] and status["measured"]["watts"] == [240.0, 240.0]
    # 58 MH/s x 0.05 = 2.90 a day = 0.1208/h per GPU (power 0.048/h is below it): 0.24 < 0.2417 x 1.1
    assert status["profit"]["source"] == "measured kawpow hashrate of 2 GPUs"
    assert status["profit"]["floor_per_hour"] == 0.2417 and agent.state.mode == "mining"
    for _ in range(5):  # the miner slows down: the average follows, the status keeps its figure a while
        now[0] += 60
        hiveos_writes(30.0)
        agent.tick()
    assert agent.measured.mhs[0] < 50 and json.loads((tmp_path / "state/status.json").read_text())["measured"] == \
        status["measured"]
    assert agent.state.mode == "idle-mining"  # the slower miner earns less than the lease pays
    from miner2provider.rigside import ledger
    lines, _ = ledger.read(tmp_path / "state")
    assert [(e.mode, e.algo) for e in lines] == [("mining", "kawpow"), ("idle-mining", "kawpow")]
    assert lines[0].mhs == (58.0, 58.0) and lines[1].mhs[0] < 58  # the average when the rig switched
    now[0] += 600
    hiveos_writes(30.0)
    agent.tick()
    shown = json.loads((tmp_path / "state/status.json").read_text())["measured"]["mhs"]
    assert shown[0] < 50 and "secret-pw" not in (tmp_path / "state/status.json").read_text()
    saved = json.loads((tmp_path / "state/state.json").read_text())["measured"]
    assert saved["mhs"][0] == pytest.approx(shown[0], abs=0.001)  # kept for a restart (a leased rig mines no samples)


def test_the_agent_zipapp_starts_on_the_oldest_python_it_supports(tmp_path):
    """Every module the agent imports is evaluated on python3 3.8 (HiveOS 0.6-227): an annotation or alias
    that only newer Pythons evaluate fails here, not on a rig (vermin does not see them all)."""
    from m2p_sandbox import pythons
    from miner2provider.fleet import agent_zipapp as package

    python = pythons.build_of("3.8") / "bin" / "python3.8"
    agent = package.write(str(tmp_path))
    proc = subprocess.run([str(python), str(agent), "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--config" in proc.stdout, proc.stderr


def test_t_rex_api_is_asked_every_ten_seconds_while_the_miner_runs(api, tmp_path, trex_api):
    """A STAND-IN T-Rex API on loopback (the /summary fields measure.py reads); the agent asks it only
    while the miner runs and at most every STATS_EVERY_S."""
    port, asked = trex_api(lambda: json.dumps({"algorithm": "etchash", "gpus": [{"hashrate": 60e6, "power": 120},
                                                                               {"hashrate": 62e6, "power": 125}]}))
    now = [1_800_000_000.0]
    agent = make_agent(api, tmp_path, LEASE_FIRST, clock=lambda: now[0], trex_api=f"http://127.0.0.1:{port}/summary")
    (tmp_path / "miner.running").touch()
    for _ in range(6):  # 2 s ticks: asked at 0 s and 10 s
        agent.tick()
        now[0] += 2
    assert asked == ["/summary", "/summary"]
    assert agent.measured.algo == "etchash" and agent.measured.mhs == (60.0, 62.0)
    assert json.loads((tmp_path / "state/status.json").read_text())["measured"]["watts"] == [120.0, 125.0]
    now[0] += 60
    agent.sample_miner(now[0], miner_running=False)
    assert len(asked) == 2  # a stopped miner is not asked


def test_a_container_through_the_gate_is_a_lease_in_the_status_before_the_api_lists_its_pod(api, tmp_path):
    """m2p's lease guard reads the status: in the tick between the gate's grant and the agent reading the
    lease's pod (or with the API unreachable), a convert would otherwise restart k3s under the lease."""
    agent = idle_mining(api, tmp_path)
    proc, state = container(tmp_path)
    try:
        assert handed_over(agent, tmp_path, state) == (True, "")
        leases = json.loads((tmp_path / "state/status.json").read_text())["leases"]
        assert [lease["pod"] for lease in leases] == ["lease/job"] and leases[0]["since"].startswith("20")
        api.add_pod("job", NODE, 2, namespace="lease")  # the API lists it now: named once
        agent.tick()
        assert [lease["pod"] for lease in json.loads((tmp_path / "state/status.json").read_text())["leases"]] == [
            "lease/job"]
    finally:
        proc.kill()
        proc.wait()
    agent.tick()  # the container ended; the pod still listed: the API's word alone
    (listed,) = json.loads((tmp_path / "state/status.json").read_text())["leases"]
    assert listed["pod"] == "lease/job" and listed["since"] == api.pods[("lease", "job")]["metadata"]["creationTimestamp"]


def test_with_a_reclamation_window_the_agent_says_when_it_must_mine_and_leaves_the_market_in_time(api, tmp_path):
    """Issue 36: the status names the minute mining must start ("mine_at", read by the farm's reclaimer), and
    the node is cordoned W plus the lead before it, while a lease still runs on it (it is reclaimed, not cut)."""
    from datetime import datetime

    now = [datetime(2026, 11, 23, 16, 50, tzinfo=UTC).timestamp()]  # 18:00 - 1 h - 10 min
    schedule = ("timezone: UTC\npolicy: fixed\ndefault: lease\nmin_switch_interval: 0s\nreclamation_window: 1h\n"
                "windows:\n  - {days: daily, from: '18:00', to: '20:00', mode: mine}\n")
    agent = make_agent(api, tmp_path, schedule, clock=lambda: now[0])
    api.add_pod("job", NODE, 2)
    agent.tick()
    agent.tick()
    status = json.loads((tmp_path / "state" / "status.json").read_text())
    assert status["mine_at"] == "2026-11-23T18:00:00+00:00" and status["mode"] == "leasing" and not cordoned(api)
    now[0] += 9 * 60  # 16:59: within W + 120 s of mining
    agent.tick()
    status = json.loads((tmp_path / "state" / "status.json").read_text())
    assert status["mode"] == "draining" and cordoned(api) and status["mine_at"] == "2026-11-23T18:00:00+00:00"
    now[0] += 3600 + 120  # 18:01, in the mining window: mining is due since 18:00, the lease still drains
    agent.tick()
    status = json.loads((tmp_path / "state" / "status.json").read_text())
    assert status["mine_at"] == "2026-11-23T18:00:00+00:00" and status["mode"] == "draining"
    api.delete_pod("job")
    agent.tick()
    assert json.loads((tmp_path / "state" / "status.json").read_text())["mode"] == "mining"


def test_a_miner_that_keeps_coming_back_during_leases_takes_the_rig_off_the_market(api, tmp_path):
    """Issue 38: something the agent does not know (an owner's wrapper, a cloud agent) starts the miner again while
    the GPUs are the leases'.  Each time it is ended and counted; at the third, the rig leaves the market and a
    lease's container at the gate is refused with the sentence, rather than fighting that supervisor for ever."""
    agent = make_agent(api, tmp_path, FIXED_LEASE)
    running = tmp_path / "miner.running"
    running.touch()
    assert agent.tick() == ["stop-miner"] and agent.state.mode == "leasing" and agent.respawns == 0
    for strike in (1, 2, 3):
        running.touch()  # the other supervisor's restart
        assert "stop-miner" in agent.tick() and agent.respawns == strike
        assert not running.exists()  # ended each time: a lease may be using the GPUs
    for _ in range(2):
        agent.tick()
    assert cordoned(api) and not agent.state.offered
    status = json.loads(api.nodes[NODE]["metadata"]["annotations"]["m2p.io/status"])
    assert "another supervisor restarts the miner (3 times during leases)" in status["last_error"]
    proc, state = container(tmp_path)
    try:
        thread, result = at_the_gate(tmp_path, state)
        wait_waiting(agent, thread)
        assert "grant" not in agent.tick()
        thread.join(5)
        assert result["answer"] == (False, "another supervisor restarts the miner: this rig takes no lease now")
    finally:
        proc.kill()
        proc.wait()


def test_the_agents_own_stop_and_start_are_no_strike(api, tmp_path):
    """Windows that switch lease, mine, lease: every stop follows the agent's own start, so nothing counts."""
    agent = make_agent(api, tmp_path, FIXED_LEASE)
    (tmp_path / "miner.running").touch()
    for schedule, action in ((FIXED_LEASE, "stop-miner"), (FIXED_MINE, "start-miner"), (FIXED_LEASE, "stop-miner"),
                             (FIXED_MINE, "start-miner"), (FIXED_LEASE, "stop-miner")):
        (tmp_path / "schedule.yml").write_text(schedule)
        agent.schedule = model.load(str(tmp_path / "schedule.yml"))
        assert any(action in agent.tick() for _ in range(3))  # leaving the market first takes a tick
    assert agent.respawns == 0


CARD_UUIDS = ("GPU-0b6d7c2e-1111-2222-3333-444444444444", "GPU-9f3a1e55-5555-6666-7777-888888888888")


def driver_cards(folder: Path) -> str:
    """The driver's cards (the sandbox's STAND-IN of /proc/driver/nvidia/gpus), minors in reverse PCI order: the
    driver numbers cards as it probes them, and rigs have been seen where nvidia-smi's index 3 is /dev/nvidia0."""
    cards = [{"name": "NVIDIA GeForce RTX 3090", "uuid": CARD_UUIDS[1], "pci.bus_id": "00000000:02:00.0"},
             {"name": "NVIDIA GeForce RTX 3090", "uuid": CARD_UUIDS[0], "pci.bus_id": "00000000:01:00.0"}]
    return str(gpu_standin.driver_info({"gpus": cards}, folder))


def per_card_agent(api, tmp_path, clock=lambda: 1_800_000_000.0) -> Agent:
    """make_agent on a rig whose OS can start the miner on some cards: the stand-in miner (a file) records
    the CUDA_VISIBLE_DEVICES it was started with, and the stand-in NVML shows it on those cards only (as CUDA
    makes no context on a card it does not see)."""
    agent = make_agent(api, tmp_path, LEASE_FIRST, clock=clock)
    running, events = tmp_path / "miner.running", tmp_path / "events"
    miner = dataclasses.replace(agent.config.miner, per_card=True,
                                start_cmd=f'echo "${{CUDA_VISIBLE_DEVICES-all}}" > {running}; echo start >> {events}')
    agent.config = dataclasses.replace(agent.config, miner=miner, gpu_info_dir=driver_cards(tmp_path / "gpus"))

    def by_card():
        if not running.exists():
            return {}
        seen = running.read_text().strip()
        return {uuid: [NO_SUCH_PID] for uuid in CARD_UUIDS if seen == "all" or uuid in seen.split(",")}
    agent.gpu_processes_by_card = by_card
    return agent


def per_card_lease(api, tmp_path, clock=lambda: 1_800_000_000.0):
    """per_card_agent idle mining, then a 1-GPU lease whose container (given /dev/nvidia1) is handed over: the
    miner mines on the other card.  Returns the agent and the container's process."""
    agent = per_card_agent(api, tmp_path, clock)
    agent.tick()
    agent.tick()
    api.add_pod("job", NODE, 1, phase="Pending")
    proc, state = container(tmp_path)
    state["bundle"] = bundle_with(tmp_path, 1)
    try:
        assert handed_over(agent, tmp_path, state, (["stop-miner"], ["grant", "start-miner"])) == (True, "")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return agent, proc


def bundle_with(tmp_path, *minors) -> str:
    """The container's OCI bundle as the runtime leaves it: config.json's linux.devices with the card nodes
    CDI's device edits added (and the control nodes every GPU container gets)."""
    bundle = tmp_path / f"bundle-{'-'.join(map(str, minors))}"
    bundle.mkdir()
    devices = gpu_standin.card_nodes(minors)
    devices += [{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
                {"path": "/dev/nvidia-uvm", "type": "c", "major": 508, "minor": 0}]
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "linux": {"devices": devices}}))
    return str(bundle)


def test_per_card_a_one_gpu_lease_stops_mining_on_its_card_only_and_a_restart_on_every_card_is_caught(
        api, tmp_path):
    now = [1_800_000_000.0]
    agent = per_card_agent(api, tmp_path, clock=lambda: now[0])
    running = tmp_path / "miner.running"
    assert agent.tick() == ["offer"]
    assert agent.tick() == ["start-miner"] and running.read_text().strip() == "all"
    api.add_pod("job", NODE, 1, phase="Pending")
    proc, state = container(tmp_path)
    state["bundle"] = bundle_with(tmp_path, 1)  # /dev/nvidia1: the card at 0000:01:00.0, CARD_UUIDS[0]
    try:
        assert handed_over(agent, tmp_path, state, (["stop-miner"], ["grant", "start-miner"])) == (True, "")
        assert agent.state.mode == "leasing"
        assert running.read_text().strip() == CARD_UUIDS[1]  # mining on the card no lease holds
        status = json.loads((tmp_path / "state/status.json").read_text())
        assert status["hand_over"] == "per card" and status["mode"] == "leasing"
        read = agent_status_from(status)
        assert read.hand_over == "per card"
        # The ledger counts the lease's card leased and the other mined.
        last = json.loads((tmp_path / "state/ledger.jsonl").read_text().splitlines()[-1])
        assert (last["mode"], last.get("leased"), last.get("mining")) == ("leasing", 1, 1), last
        assert agent.tick() == []  # settled: the miner on one card, the lease on the other
        # The mining OS restarts the miner on every card (HiveOS hello, a dashboard push): stopped at once and
        # started on the free card again; the second time the rig hands over whole until the lease ends.
        # (Seen within NVML's recheck: card by card every 10 s while leases hold some cards.)
        running.write_text("all\n")
        assert agent.tick() == []
        now[0] += 10
        assert agent.tick() == ["stop-miner"] and not agent.state.whole_rig
        assert agent.tick() == ["start-miner"] and running.read_text().strip() == CARD_UUIDS[1]
        running.write_text("all\n")
        now[0] += 10
        assert agent.tick() == ["stop-miner"] and agent.state.whole_rig
        assert agent.tick() == [] and not running.exists()
        assert json.loads((tmp_path / "state/status.json").read_text())["hand_over"] == "whole rig"
    finally:
        proc.kill()
        proc.wait()
    api.delete_pod("job")
    assert agent.tick() == ["start-miner"] and running.read_text().strip() == "all"
    assert not agent.state.whole_rig and agent.state.mode == "idle-mining"
    # The OS's clocks: re-applied before mining on every card, never before mining beside a lease (its command
    # tunes every card, the leased one too); the lease's card alone reset before its container ran (the other
    # mines on the owner's tuning beside it).
    assert (tmp_path / "events").read_text().split() == ["reapply", "start", f"reset:{CARD_UUIDS[0]}", "start",
                                                         "start", "reapply", "start"]


def test_per_card_a_container_whose_cards_cannot_be_read_hands_the_whole_rig_over(api, tmp_path):
    agent = per_card_agent(api, tmp_path)
    agent.tick()
    agent.tick()
    api.add_pod("job", NODE, 1, phase="Pending")
    proc, state = container(tmp_path)  # no bundle in its state: the cards it is given are unknown
    try:
        assert handed_over(agent, tmp_path, state) == (True, "") and not (tmp_path / "miner.running").exists()
        assert agent.tick() == []
    finally:
        proc.kill()
        proc.wait()


def test_per_card_a_lease_container_that_restarts_keeps_its_card_and_passes_the_gate_beside_the_miner(
        api, tmp_path):
    """Between two runs of a lease's container (a restart, a crash loop) its card stays the lease's: the miner
    mines on the other card throughout, and the container passes the gate again without a stop."""
    agent, proc = per_card_lease(api, tmp_path)
    running = tmp_path / "miner.running"
    proc.kill()
    proc.wait()
    assert agent.tick() == [] and running.read_text().strip() == CARD_UUIDS[1]  # the container is gone, its pod not
    again, state = container(tmp_path, name="c2")
    state["bundle"] = str(tmp_path / "bundle-1")
    try:
        assert handed_over(agent, tmp_path, state, (["grant"],)) == (True, "")
        assert running.read_text().strip() == CARD_UUIDS[1]
    finally:
        again.kill()
        again.wait()


def test_per_card_a_miner_that_takes_none_of_its_cards_beside_a_lease_is_said(api, tmp_path):
    """A flight sheet naming devices by index (T-Rex -d 0,1) counts among the visible cards: such a miner starts
    on none.  The lease is safe; the status says why the rig mines nothing."""
    now = [1_800_000_000.0]
    agent, proc = per_card_lease(api, tmp_path, clock=lambda: now[0])
    running = tmp_path / "miner.running"
    try:
        running.write_text("GPU-none\n")  # it runs (its screen does), on no card
        now[0] += 30
        agent.tick()
        assert agent.last_error == ""
        now[0] += 31
        agent.tick()
        assert "runs on none of them after 60 s (does its flight sheet name devices by index?)" in agent.last_error
        running.write_text(f"{CARD_UUIDS[1]}\n")  # it took its card (a long DAG build): nothing to say
        now[0] += 10
        agent.tick()
        assert agent.last_error == ""
    finally:
        proc.kill()
        proc.wait()


def test_per_card_the_miner_beside_a_lease_is_not_measured_as_the_rigs_mining(api, tmp_path):
    """The rig's measured average (policy profit's quote) is of every card: a miner on some cards beside a lease
    reports fewer GPUs, which would start the average anew on them."""
    agent, proc = per_card_lease(api, tmp_path)
    sampled = []
    agent.sample_miner = lambda now, running: sampled.append(running)
    try:
        agent.tick()
        assert sampled == [] and agent.state.mine_on == (CARD_UUIDS[1],)
    finally:
        proc.kill()
        proc.wait()
    api.delete_pod("job")
    agent.tick()  # the lease gone: the miner on every card again, measured again
    agent.tick()
    assert agent.state.mine_on == () and sampled and sampled[-1] is True


def test_m2p_status_says_what_a_per_card_lease_leaves_mining():
    golden = json.loads((Path(__file__).parent / "facts/agent_status/per-card-lease.json").read_text())
    read = agent_status_from(json.loads(golden["output"]))
    line = render.agent_line({"service": "active", **dataclasses.asdict(read)})
    assert "; leased 1 of 2 GPUs for 0.12/h (the miner mines on the cards no lease holds)" in line, line


def test_per_card_a_flight_sheet_that_selects_devices_hands_the_whole_rig_over_and_says_why(api, tmp_path):
    """HiveOS's flight sheet (wallet.conf) names devices by index: the miner started with CUDA_VISIBLE_DEVICES
    naming the free cards would count among them only.  The whole rig is the unit, said in the status (never a
    wallet); the owner's new flight sheet without it brings per card back (the file read again on a change)."""
    agent = per_card_agent(api, tmp_path)
    wallet = tmp_path / "wallet.conf"
    wallet.write_text('TREX_TEMPLATE="RVN:0xSECRET.%WORKER_NAME%"\nTREX_USER_CONFIG="-d 0,1"\n')
    agent.config = dataclasses.replace(agent.config, miner=dataclasses.replace(
        agent.config.miner, config_files=(str(tmp_path / "rig.conf"), str(wallet))))
    agent.tick()
    agent.tick()
    status = json.loads((tmp_path / "state/status.json").read_text())
    assert status["hand_over"] == "whole rig" and agent.cards() == ()
    assert status["hand_over_why"] == "wallet.conf TREX_USER_CONFIG selects devices by index"
    assert agent_status_from(status).hand_over_why == status["hand_over_why"] and "SECRET" not in json.dumps(status)
    wallet.write_text('TREX_TEMPLATE="RVN:0xSECRET.%WORKER_NAME%"\nTREX_USER_CONFIG="--mt 3"\n')
    os.utime(wallet, ns=(0, 1))  # a new mtime, however fast the test
    agent.tick()
    status = json.loads((tmp_path / "state/status.json").read_text())
    assert status["hand_over"] == "per card" and status["hand_over_why"] == "" and len(agent.cards()) == 2


def test_per_card_a_leased_card_tuned_again_during_the_lease_is_put_back_on_its_defaults(api, tmp_path):
    """A dashboard OC push during a lease runs HiveOS's nvidia-oc, which tunes every card, the leased one too: the
    agent reads the leased card's clocks every 10 s (only that card: the other mines on the owner's tuning) and
    resets the one found off its defaults, saying so."""
    now = [1_800_000_000.0]
    agent, proc = per_card_lease(api, tmp_path, clock=lambda: now[0])
    try:
        reads = tmp_path / "clock-reads"
        agent.tick()
        (tmp_path / "retuned").write_text(f"{CARD_UUIDS[0]} {CARD_UUIDS[1]}\n")  # nvidia-oc tuned both cards
        now[0] += 3
        assert "reset-clocks" not in agent.tick()  # read every 10 s, not every tick
        now[0] += 10
        assert agent.tick() == ["reset-clocks"]
        assert reads.read_text().split()[-1] == CARD_UUIDS[0]  # only the leased card is read, and reset
        assert (tmp_path / "events").read_text().split()[-1] == f"reset:{CARD_UUIDS[0]}"
        assert "tuned again during the lease" in agent.last_error
        (tmp_path / "retuned").unlink()
        now[0] += 10
        assert agent.tick() == [] and agent.last_error == ""
    finally:
        proc.kill()
        proc.wait()
