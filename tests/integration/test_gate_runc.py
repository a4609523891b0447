"""m2p's gate run by a real container runtime: runc (Debian's) creates a real container whose
OCI hooks are the CDI spec's (roles/nvidia_container_toolkit's gate hook), on this test machine
itself: inside a sandbox rig the cgroup controllers are read-only, so no runtime runs there
(shared/reference/test-environment.md).  The real agent (the zipapp the role installs) runs
beside it as a process against the STAND-IN Kubernetes API on loopback.

What stands in, and why: containerd and the NVIDIA runtime, which would turn the CDI spec into
the container's OCI hooks (k3s cannot run here): the test copies the spec's
``containerEdits.hooks`` into config.json as the CDI spec says they map (hookName -> the OCI
hook list of that name); ``/opt/m2p/gate`` in the hook's command is the test's own copy of the
role's launcher (nothing is written to this machine's /opt); the miner is a process named
``m2p-gate-test-miner`` that the stand-in nvidia-smi reports on both stand-in GPUs (no GPU here).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
import yaml

from m2p_sandbox import gpu_standin
from m2p_sandbox.kube_api import KubeApiStandin
from miner2provider.fleet import agent_zipapp as package

pytestmark = pytest.mark.integration

ROLE = Path(__file__).parents[2] / "ansible_collections/m2p/rigs/roles"
HOOK = yaml.safe_load((ROLE / "nvidia_container_toolkit/defaults/main.yml").read_text())[
    "nvidia_container_toolkit_gate_hook"]
NODE = "gate-rig"
MINER = "m2p-gate-test-miner"  # not the sandbox rigs' standin-miner: rigs may run beside this test
POD_CGROUP = "kubepods/besteffort/pod-m2p-gate-test"


def wait_for(what, check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def world(tmp_path):
    for tool in ("runc", "busybox"):
        assert shutil.which(tool), f"{tool} is missing: run scripts/install (Debian's runc and busybox-static)"
    api = KubeApiStandin()  # HTTPS, as kube-apiserver: the agent trusts its CA (agent.json's ca_file, as the role's)
    token = secrets.token_urlsafe(16)
    api.add_node(NODE, token, gpus=2)
    (tmp_path / "token").write_text(token)
    assert api.authority is not None
    (tmp_path / "cluster-ca.crt").write_bytes(api.authority.pem)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(gpu_standin.HERE / "nvidia-smi", bin_dir / "nvidia-smi")
    (bin_dir / "nvidia-smi").chmod(0o755)
    (tmp_path / "gpus.json").write_text(json.dumps(gpu_standin.rig_config(NODE, ["rtx3090", "rtx3090"])))
    (tmp_path / "agent.pyz").write_bytes(package.build())
    (tmp_path / "schedule.yml").write_text("timezone: UTC\npolicy: lease-first\nmin_switch_interval: 0s\n")
    pidfile = tmp_path / "miner.pid"
    # The stand-in miner: a process the stand-in nvidia-smi shows on every GPU.
    start = (f"setsid {sys.executable} -c \"import os; os.execv('/bin/sleep', ['{MINER}', '3600'])\" "
             f"> /dev/null 2>&1 < /dev/null & echo $! > {pidfile}")
    # Running: its pid lives and is no zombie (ended miners may wait here for a PID 1 that does not reap).
    alive = f"test -e {pidfile} && ! grep -qs '^State:.*Z' /proc/$(cat {pidfile})/status && kill -0 $(cat {pidfile})"
    miner = {"running_cmd": alive, "start_cmd": start,
             "stop_cmd": f"kill $(cat {pidfile}) && rm {pidfile}"}
    agent = {"process": None}

    def start_agent(gpu_info_dir: str = "", **adapter: object) -> None:
        config = {"node": NODE, "schedule": str(tmp_path / "schedule.yml"), "api_server": api.url,
                  "token_file": str(tmp_path / "token"), "ca_file": str(tmp_path / "cluster-ca.crt"),
                  "gpu_count": 2, "state_dir": str(tmp_path / "state"),
                  "labels_file": str(tmp_path / "labels.json"), "interval_s": 0.5, "miner": {**miner, **adapter},
                  **({"gpu_info_dir": gpu_info_dir} if gpu_info_dir else {})}
        (tmp_path / "agent.json").write_text(json.dumps(config))
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "M2P_STANDIN_GPUS": str(tmp_path / "gpus.json"),
               "M2P_STANDIN_MINER": MINER}
        agent["process"] = subprocess.Popen([sys.executable, str(tmp_path / "agent.pyz"), "--config",
                                             str(tmp_path / "agent.json")], env=env)

    def stop_agent() -> None:
        if agent["process"] is not None:
            agent["process"].terminate()
            agent["process"].wait(10)

    # The role's gate (roles/timeshare_agent templates/gate.sh.j2), pointing at this test's agent's folder.
    template = (Path(__file__).parents[2] / "ansible_collections/m2p/rigs/roles/timeshare_agent/templates"
                / "gate.sh.j2").read_text()
    (tmp_path / "gate").write_text(jinja2.Template(template).render(
        ansible_managed="test", timeshare_agent_state_dir=str(tmp_path / "state")))
    (tmp_path / "gate").chmod(0o755)
    # The hook's /usr/bin/nvidia-smi: the stand-in, told where its cards are (hooks get no environment).
    (tmp_path / "nvidia-smi").write_text(f"#!/bin/sh\nM2P_STANDIN_GPUS={tmp_path}/gpus.json M2P_STANDIN_MINER={MINER} "
                                         f"exec {bin_dir}/nvidia-smi \"$@\"\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    yield api, tmp_path, start_agent, stop_agent
    stop_agent()
    if pidfile.exists():
        subprocess.run(["sh", "-c", f"kill $(cat {pidfile})"], check=False)
    api.close()
    # runc removed each container's cgroup; the empty parents it made go too (rmdir: only if empty).
    for controller in Path("/sys/fs/cgroup").glob("*"):
        for parent in (POD_CGROUP, "kubepods/besteffort", "kubepods"):
            with contextlib.suppress(OSError):
                (controller / parent).rmdir()


def bundle(tmp_path: Path, name: str, gate: str = "gate", cards: tuple[int, ...] = (), seconds: int = 0) -> Path:
    """An OCI bundle: busybox as the root filesystem, the run dir of the test bound read-only at
    /m2p (the container reports whether the miner's pid file was there when it started), the
    CDI spec's hooks, and a cgroup under kubepods/ as kubelet gives a pod's container."""
    b = tmp_path / name
    (b / "rootfs/bin").mkdir(parents=True)
    shutil.copy(shutil.which("busybox"), b / "rootfs/bin/busybox")
    (b / "rootfs/bin/sh").symlink_to("busybox")
    subprocess.run(["runc", "spec", "--bundle", str(b)], check=True)
    config = json.loads((b / "config.json").read_text())
    config["process"].update(terminal=False, args=[
        "/bin/sh", "-c", "if [ -e /m2p/miner.pid ]; then echo MINER-RUNNING; else echo MINER-STOPPED; fi; "
        f"sleep {seconds}"])
    # The cards the container is given: their device nodes, as CDI's device edits add them (what the gate reads).
    config["linux"]["devices"] = gpu_standin.card_nodes(cards)
    config["root"]["readonly"] = True
    config["mounts"].append({"destination": "/m2p", "type": "bind", "source": str(tmp_path),
                             "options": ["rbind", "ro"]})
    config["linux"]["cgroupsPath"] = f"/{POD_CGROUP}/{name}"
    args = [a.replace("/opt/m2p/gate", str(tmp_path / gate)).replace("/usr/bin/nvidia-smi", str(tmp_path / "nvidia-smi"))
            for a in HOOK["args"]]
    hook = {"path": HOOK["path"], "args": args, "timeout": HOOK["timeout"]}
    config["hooks"] = {HOOK["hookName"]: [hook]}
    (b / "config.json").write_text(json.dumps(config))
    return b


def runc_argv(tmp_path: Path, name: str, gate: str = "gate", **kwargs: object) -> list[str]:
    return ["runc", "--root", str(tmp_path / "runc"), "run", "--bundle", str(bundle(tmp_path, name, gate, **kwargs)),
            name]


def runc(tmp_path: Path, name: str, gate: str = "gate") -> subprocess.CompletedProcess[str]:
    return subprocess.run(runc_argv(tmp_path, name, gate), capture_output=True, text=True, timeout=150)


def test_runc_starts_a_gpu_container_only_after_the_miner_stopped_and_fails_closed(world):
    api, tmp_path, start_agent, stop_agent = world
    start_agent()
    miner_pid = tmp_path / "miner.pid"
    wait_for("idle mining", lambda: api.nodes[NODE]["metadata"]["labels"].get("m2p.io/mode") == "idle-mining"
             and miner_pid.exists())
    assert api.akash_view(NODE)["gpus_available"] == 2  # offered, nothing holds the GPUs
    started = time.monotonic()
    ran = runc(tmp_path, "lease-1")
    took = time.monotonic() - started
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "MINER-STOPPED"  # what the container's own program saw
    assert not miner_pid.exists() and took < HOOK["timeout"]
    # The container ended: idle mining resumes.
    wait_for("idle mining again", lambda: miner_pid.exists(), timeout=30)

    # The OS's stop fails and the miner stays: m2p ends what holds the GPUs outside every container after the
    # grace (TERM), and the container starts.
    stop_agent()
    start_agent(stop_cmd="echo stuck >&2; exit 4", grace_s=1)
    wait_for("the agent back", lambda: (tmp_path / "state/status.json").exists() and miner_pid.exists())
    pid = int(miner_pid.read_text())
    ended = runc(tmp_path, "lease-2")
    assert ended.returncode == 0 and "MINER-" in ended.stdout, ended.stderr  # its program ran...
    state = Path(f"/proc/{pid}/status")
    assert not state.exists() or "zombie" in state.read_text()  # ...once m2p had ended the miner (its pid file stays)
    wait_for("idle mining again", lambda: miner_pid.exists() and "idle-mining" in (tmp_path / "state/status.json")
             .read_text(), timeout=30)

    # A miner the OS still says runs after all that (its own watchdog brings it back): runc fails the
    # container, its program never runs, and the hook says why.
    stop_agent()
    start_agent(running_cmd="true", stop_cmd="echo stuck >&2; exit 4", grace_s=1)
    wait_for("the agent back", lambda: (tmp_path / "state/status.json").exists() and miner_pid.exists())
    refused = runc(tmp_path, "lease-2b")
    assert refused.returncode != 0 and "MINER" not in refused.stdout
    assert "m2p gate: GPUs not handed over: the miner could not be stopped" in refused.stderr, refused.stderr
    assert "it exited 4: stuck" in refused.stderr
    stop_agent()
    start_agent()  # the plain adapter again: the miner m2p ended is started anew
    wait_for("the miner mining again", lambda: subprocess.run(
        ["sh", "-c", f"! grep -qs '^State:.*Z' /proc/$(cat {miner_pid})/status && kill -0 $(cat {miner_pid})"],
        capture_output=True).returncode == 0, timeout=30)

    # No agent at all (the service died): the container does not start either (the gate waits
    # its bounded time, here shortened through the hook's own --timeout).
    stop_agent()
    (tmp_path / "gate").write_text((tmp_path / "gate").read_text().replace("timeout=90\n", "timeout=2\n"))
    silent = runc(tmp_path, "lease-3")
    assert silent.returncode != 0 and "MINER" not in silent.stdout
    assert "no hand-over from m2p-agent within 2 s" in silent.stderr, silent.stderr

    # No time-share agent installed at all (a plain rig, a mining OS without an adapter): the
    # hook itself refuses while a process outside every container holds a GPU.
    assert miner_pid.exists()
    unguarded = runc(tmp_path, "lease-4", gate="no-agent-here")
    assert unguarded.returncode != 0 and "MINER" not in unguarded.stdout
    assert "outside every container holds a GPU, and no m2p time-share agent runs here" in unguarded.stderr
    subprocess.run(["sh", "-c", f"kill $(cat {miner_pid}) && rm {miner_pid}"], check=True)
    free = runc(tmp_path, "lease-5", gate="no-agent-here")
    assert free.returncode == 0 and free.stdout.strip() == "MINER-STOPPED", free.stderr

    # ...and when it cannot tell: nvidia-smi failing as the real one does without a driver (exit 9), or missing.
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with"
                                         " the NVIDIA driver.\"\nexit 9\n")
    blind = runc(tmp_path, "lease-6", gate="no-agent-here")
    assert blind.returncode != 0 and "MINER" not in blind.stdout
    assert "nvidia-smi could not say which processes hold the GPUs (exit 9)" in blind.stderr, blind.stderr
    (tmp_path / "nvidia-smi").unlink()
    missing = runc(tmp_path, "lease-7", gate="no-agent-here")
    assert missing.returncode != 0 and "(exit 127)" in missing.stderr, missing.stderr


def test_runc_a_one_gpu_container_stops_the_miner_on_its_card_only(world):
    """Per-card hand-over (a mining OS whose start passes the environment on, HiveOS): runc creates a container
    given /dev/nvidia1; the agent reads that from its OCI spec through the gate, maps the minor to the card's
    UUID through the driver's cards (STAND-IN of /proc/driver/nvidia/gpus), stops the miner, lets the container
    through and starts the miner again with CUDA_VISIBLE_DEVICES naming the other card; the stand-in nvidia-smi
    then shows it on that card only, as CUDA would.  When the container ends the miner mines on both again."""
    api, tmp_path, start_agent, stop_agent = world
    config = json.loads((tmp_path / "gpus.json").read_text())
    leased, other = (gpu["uuid"] for gpu in reversed(config["gpus"]))  # minor 1 is the second card
    driver = gpu_standin.driver_info(config, tmp_path / "driver-gpus")
    start_agent(gpu_info_dir=str(driver), per_card=True)
    miner_pid = tmp_path / "miner.pid"
    env = {**os.environ, "M2P_STANDIN_GPUS": str(tmp_path / "gpus.json"), "M2P_STANDIN_MINER": MINER}
    smi = [str(tmp_path / "bin/nvidia-smi"), "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"]

    def mining_on() -> set[str]:
        rows = subprocess.run(smi, env=env, capture_output=True, text=True, check=True).stdout.splitlines()
        return {row.split(", ")[1] for row in rows}
    wait_for("idle mining on both cards", lambda: miner_pid.exists() and mining_on() == {leased, other})
    container = subprocess.Popen(runc_argv(tmp_path, "card-1", cards=(1,), seconds=8), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
    try:
        wait_for("the container through the gate", lambda: any((tmp_path / "state/gate").glob("*.granted")))
        wait_for("the miner on the other card", lambda: miner_pid.exists() and mining_on() == {other}, timeout=20)
        environ = Path(f"/proc/{miner_pid.read_text().strip()}/environ").read_bytes().split(b"\0")
        assert f"CUDA_VISIBLE_DEVICES={other}".encode() in environ and b"CUDA_DEVICE_ORDER=PCI_BUS_ID" in environ
        status = json.loads((tmp_path / "state/status.json").read_text())
        assert status["hand_over"] == "per card" and status["mode"] == "leasing", status
        out, err = container.communicate(timeout=60)
    finally:
        if container.poll() is None:
            container.kill()
            container.wait()
    assert container.returncode == 0, err
    wait_for("mining on both cards again", lambda: miner_pid.exists() and mining_on() == {leased, other}, timeout=30)
