"""Sandbox rigs for integration tests: real systemd hosts reached over real SSH.

``sandbox_rigs`` (session scope) boots one rig of each flavour and hands the tests a
dict ``name -> Rig`` (address, user, key_file).  Parallel-safe: every worker boots its
own rigs; addresses are allocated under a lock.  The rigs are owned by this pytest
process, so if it dies (even by SIGKILL) their supervisors tear them down.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import paramiko
import pytest
import testinfra
import yaml

from m2p_sandbox import rig as sandbox
from m2p_sandbox import tenant
from m2p_sandbox.kube_api import KubeApiStandin

HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder is an integration test (``-m "not integration"`` leaves them all out),
    whether or not its module says ``pytestmark``.  The hook sees the whole session's items: only ours."""
    for item in items:
        if str(item.path).startswith(HERE + os.sep):
            item.add_marker(pytest.mark.integration)


def _require_harness() -> None:
    # Not a skip: a CI that cannot boot rigs must go red, not quietly pass.
    if os.geteuid() != 0:
        pytest.fail("integration tests boot sandbox rigs and must run as root (scripts/test as root)")
    for tool in ("systemd-nspawn", "mmdebstrap", "ip", "ssh-keygen"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing: run scripts/install first")


FLEET = (
    sandbox.RigSpec("plain1", "plain"),
    sandbox.RigSpec("hive1", "hiveos", ("rtx3090", "rtx3090")),
    sandbox.RigSpec("ms1", "msos", ("cmp90hx",)),
)


@pytest.fixture(scope="session")
def sandbox_rigs() -> Iterator[dict[str, sandbox.Rig]]:
    _require_harness()
    sandbox.sweep()
    rigs = sandbox.boot(FLEET, owner_pid=os.getpid())
    try:
        yield {r.name: r for r in rigs}
    finally:
        for r in rigs:
            sandbox.stop(r, at_once=True)


@pytest.fixture
def boot_rigs() -> Iterator[object]:
    """Boot extra rigs inside one test; they are stopped when the test ends."""
    _require_harness()
    booted: list[sandbox.Rig] = []

    def boot(*specs: sandbox.RigSpec) -> list[sandbox.Rig]:
        started = time.monotonic()
        rigs = sandbox.boot(specs, owner_pid=os.getpid())
        phase(f"boot {', '.join(s.name for s in specs)}", started)
        booted.extend(rigs)
        return rigs

    try:
        yield boot
    finally:
        for r in booted:  # at once: no test reads this poweroff (a rig's own reboot and stop tests ask for theirs)
            sandbox.stop(r, at_once=True)


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0, every_s: float = 0.3) -> Any:
    """``check()``'s first truthy value within ``timeout`` seconds, else an AssertionError naming ``what``."""
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            phase(f"wait for {what}", started)
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


def ssh(rig: sandbox.Rig, attempts: int = 3) -> paramiko.SSHClient:
    """The test's own look at a rig (the sandbox's, which tries a connection broken during key exchange again);
    m2p's own SSH is not this helper and keeps its failure sentences (tests/unit/test_detect_ssh.py)."""
    return tenant.ssh(rig, attempts)


def run(client: paramiko.SSHClient, command: str) -> tuple[int, str]:
    _, stdout, stderr = client.exec_command(command, timeout=60)
    out = stdout.read().decode() + stderr.read().decode()
    return stdout.channel.recv_exit_status(), out


M2P = [sys.executable, "-m", "miner2provider"]


def m2p(*args: str, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """The m2p command line, as a user runs it (its own process)."""
    started = time.monotonic()
    proc = subprocess.run([*M2P, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    words = " ".join(a for a in args if "/" not in a)  # the command and its options, not the files
    phase(f"m2p {words[:120]} (exit {proc.returncode})", started)
    return proc


def phase(what: str, started: float) -> None:
    """Where an integration test's time goes: with ``M2P_PHASE_LOG=FILE``, one line per phase (the test, the
    seconds it took, what it was) is appended to FILE; without it, nothing."""
    log = os.environ.get("M2P_PHASE_LOG")
    if log:
        test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
        with open(log, "a") as f:
            f.write(f"{test}\t{time.monotonic() - started:7.1f}s\t{what}\n")


def outcomes(proc: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    """``--json`` outcomes of a fleet command, by rig."""
    try:
        return {o["name"]: o for o in json.loads(proc.stdout)}
    except json.JSONDecodeError:
        raise AssertionError(f"not JSON (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}") from None


def rig_entry(r: sandbox.Rig, **extra: object) -> dict[str, object]:
    """A rig's inventory entry (key login as the test user)."""
    return {"ansible_host": r.address, "ansible_user": r.user, "ansible_ssh_private_key_file": r.key_file, **extra}


def infra_host(r: sandbox.Rig) -> testinfra.host.Host:
    """testinfra's view of a rig (what Molecule's verify gets), over SSH with the rig's key."""
    return testinfra.get_host(f"ssh://{r.user}@{r.address}", ssh_identity_file=r.key_file,
                              ssh_extra_args="-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null")


def kubeconfig_text(server: str, ca_file: str, cert_file: str, key_file: str) -> str:
    """A kubeconfig of the shape k3s writes for a node's kubelet (agent/kubelet.kubeconfig)."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "default", "preferences": {},
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": ca_file}}],
        "contexts": [{"name": "default", "context": {"cluster": "local", "namespace": "default", "user": "user"}}],
        "users": [{"name": "user", "user": {"client-certificate": cert_file, "client-key": key_file}}]})


def give_kubelet_credential(r: sandbox.Rig, api: KubeApiStandin, node: str,
                            data_dir: str = "/var/lib/rancher/k3s") -> None:
    """STAND-IN for k3s's agent registration, which writes the node's kubelet credential (a client
    certificate for system:node:<node> from the cluster's CA) and its kubeconfig into <data dir>/agent;
    here they come from the stand-in API's CA and point at the stand-in API."""
    ca, cert, key = api.kubelet_credential(node)
    agent = f"{data_dir}/agent"
    names = {"server-ca.crt": ca, "client-kubelet.crt": cert, "client-kubelet.key": key}
    config = kubeconfig_text(api.url, *(f"{agent}/{n}" for n in names)).encode()
    with ssh(r) as client:
        assert run(client, f"sudo mkdir -p {agent}")[0] == 0
        for name, data in {**names, "kubelet.kubeconfig": config}.items():
            code, out = run(client, f"echo {shlex.quote(data.decode())} | sudo tee {agent}/{name} > /dev/null && "
                                    f"sudo chmod 600 {agent}/{name}")
            assert code == 0, out


def point_k3s_kubectl_at(rig: sandbox.Rig, api: KubeApiStandin, admin: str) -> None:
    """The server's STAND-IN `k3s kubectl` talks to ``api`` (TLS, its CA) as the admin ``admin``."""
    assert api.authority is not None
    with ssh(rig) as client:
        ca = shlex.quote(api.authority.pem.decode())
        config = json.dumps({"url": api.url, "token": admin, "ca_file": "/etc/m2p-standin/kube-api-ca.crt"})
        # (A rig without stand-in GPUs, a control node, has no /etc/m2p-standin yet.)
        rc, out = run(client, f"sudo mkdir -p /etc/m2p-standin && echo {ca} | sudo tee /etc/m2p-standin/kube-api-ca.crt "
                              "> /dev/null && "
                              f"echo {shlex.quote(config)} | sudo tee /etc/m2p-standin/kube-api.json > /dev/null")
        assert rc == 0, out
