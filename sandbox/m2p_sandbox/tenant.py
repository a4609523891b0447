"""A STAND-IN tenant for `m2p demo` and the tests: a lease's container reaching m2p's gate on a sandbox
rig, run exactly as runc runs the CDI spec's hook (an empty environment, the container's OCI state on
stdin), with a process standing for the container (runc has created it, its program not yet run).
Its pod is the caller's to add to the stand-in Kubernetes API (kube_api.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import paramiko

from . import gpu_standin
from .rig import Rig


def ssh(rig: Rig, attempts: int = 3) -> paramiko.SSHClient:
    """A look at the rig as its test user.  A connection that breaks during key exchange is tried again: on CI's
    loaded two cores paramiko has once said "No existing session" and once "Invalid packet blocking" (the window
    test's tenant ending its container) of a rig that answered the next connection.  A refused login is not tried
    again."""
    for attempt in range(attempts):
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # a sandbox rig's key is made at boot
        try:
            client.connect(rig.address, port=rig.port, username=rig.user, key_filename=rig.key_file, timeout=10,
                           allow_agent=False, look_for_keys=False)
            return client
        except (paramiko.SSHException, EOFError) as exc:
            client.close()
            if attempt == attempts - 1 or isinstance(exc, paramiko.AuthenticationException):
                raise
            time.sleep(1)
    raise AssertionError("unreachable")


def run(client: paramiko.SSHClient, command: str) -> tuple[int, str]:
    _, stdout, stderr = client.exec_command(command, timeout=120)
    out = stdout.read().decode() + stderr.read().decode()
    return stdout.channel.recv_exit_status(), out


def container_at_the_gate(rig: Rig, pod: str, hook: dict[str, Any],
                          cards: tuple[int, ...] = ()) -> tuple[int, str, int]:
    """(the hook's exit code, its output, the PID standing for the container).  ``pod``: the lease's pod,
    ``namespace/name`` as the stand-in Kubernetes API lists it (containerd puts the same names in the
    CRI annotations); its container is ``main``.  ``hook``: the role's ``nvidia_container_toolkit_gate_hook``
    (path, args).  ``cards``: the device minors the container is given, written in its OCI bundle's
    config.json (``linux.devices``, as CDI's device edits put them; root's alone, as containerd's bundles
    are); none: no bundle in the state (the runtime's state always names one; the agent then cannot tell
    the container's cards and hands the whole rig over)."""
    namespace, _, name = pod.partition("/")
    container = f"{name}-main"
    client = ssh(rig)
    try:
        pid = run(client, "sudo setsid sleep 3600 > /dev/null 2>&1 < /dev/null & echo $!")[1].strip()
        raw: dict[str, Any] = {"ociVersion": "1.0.2", "id": container, "status": "creating", "pid": int(pid),
                               "annotations": {"io.kubernetes.cri.sandbox-namespace": namespace,
                                               "io.kubernetes.cri.sandbox-name": name,
                                               "io.kubernetes.cri.container-name": "main"}}
        if cards:
            bundle = f"/run/m2p-standin-tenant/{container}"
            spec = json.dumps({"ociVersion": "1.0.2", "linux": {"devices": gpu_standin.card_nodes(cards)}})
            run(client, f"sudo install -d -m 0700 {bundle} && echo '{spec}' | sudo tee {bundle}/config.json "
                        "> /dev/null")
            raw["bundle"] = bundle
        state = json.dumps(raw)
        args = " ".join("'" + a.replace("'", "'\\''") + "'" for a in hook["args"][1:])
        code, out = run(client, f"echo '{state}' | sudo env -i {hook['path']} {args} 2>&1")
        return code, out, int(pid)
    finally:
        client.close()


def container_ends(rig: Rig, pid: int) -> None:
    client = ssh(rig)
    try:
        run(client, f"sudo kill {int(pid)}")
    finally:
        client.close()
