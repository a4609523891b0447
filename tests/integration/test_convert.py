"""`m2p convert` / `plan` / `revert` / `status` over real SSH on sandbox rigs, with the TEST bundle
(stand-in k3s and NVIDIA toolkit packages: the vendors' sites are unreachable here)."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shlex
import socket
import subprocess

import pytest
import yaml

from m2p_sandbox import gpu_standin, network
from m2p_sandbox import rig as sandbox
from m2p_sandbox.bundle import build_test_bundle
from m2p_sandbox.kube_api import KubeApiStandin, NodePasswordRejected
from miner2provider.core import collection, inventory
from miner2provider.fleet import runner
from miner2provider.fleet.bundle.manifest import load_bundle
from miner2provider.rigside import kube

from .conftest import (
    M2P,
    give_kubelet_credential,
    kubeconfig_text,
    m2p,
    outcomes,
    point_k3s_kubectl_at,
    run,
    ssh,
    wait_for,
)
from .provider_flow import provider_goes_on_and_off

pytestmark = pytest.mark.integration

DATA_DIR = "/srv/k3s-data"  # the server's m2p_data_dir


def _farm(boot_rigs, tmp_path, with_locked: bool) -> dict:
    """A HiveOS-layout k3s server and a plain agent logging in with a password; ``with_locked``: and a rig
    whose password is wrong.  The server's python3 is HiveOS 0.6-227's 3.8, the agent's Debian's 3.11: a task of the
    agent's run on its server (its join token) must run the server's own."""
    specs = [sandbox.RigSpec("cv-hive", "hiveos", ("rtx3090", "rtx3090"), ("3.8",)),
             sandbox.RigSpec("cv-plain", "plain", ("rtx3060",))]
    rigs = boot_rigs(*specs, *([sandbox.RigSpec("cv-locked", "hiveos", ("rtx3070",))] if with_locked else []))
    hive, plain = rigs[:2]
    password = "m2p-" + secrets.token_urlsafe(18)
    with ssh(plain) as client:
        rc, out = run(client, f"echo 'rigadmin:{password}' | sudo chpasswd")
        assert rc == 0, out
    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    inv = tmp_path / "rigs.yml"
    children = {
        # k3s's data on a data disk: the agent must read its join token from there.
        "k3s_server": {"hosts": {"cv-hive": {"ansible_host": hive.address, "ansible_user": hive.user,
                                             "ansible_ssh_private_key_file": hive.key_file,
                                             "m2p_data_dir": DATA_DIR}}},
        "k3s_agent": {"hosts": {"cv-plain": {"ansible_host": plain.address, "ansible_user": "rigadmin",
                                             "m2p_ssh_password_env": "CV_PLAIN_PW",
                                             "m2p_become_password_env": "CV_PLAIN_PW"}}}}
    if with_locked:
        children["broken"] = {"hosts": {"cv-locked": {"ansible_host": rigs[2].address, "ansible_user": "user",
                                                      "m2p_ssh_password_env": "CV_LOCKED_PW"}}}
    inv.write_text(yaml.safe_dump({"all": {"vars": {"m2p_min_free_disk_gb": 5}, "children": children}}))
    env = {"CV_PLAIN_PW": password, "CV_LOCKED_PW": "not-the-password", "PYTHONUNBUFFERED": "1"}
    common = ["-i", str(inv), "--bundle", str(bundle), "--accept-new", "--known-hosts", str(tmp_path / "known_hosts")]
    return {"hive": hive, "plain": plain, "password": password, "env": env, "common": common, "tmp": tmp_path,
            "inventory": inv}


@pytest.fixture
def farm(boot_rigs, tmp_path):
    """The two-rig farm and a rig whose password is wrong."""
    return _farm(boot_rigs, tmp_path, with_locked=True)


@pytest.fixture
def pair(boot_rigs, tmp_path):
    """The two-rig farm alone (a second farm, so the long convert scenario runs as two tests side by side)."""
    return _farm(boot_rigs, tmp_path, with_locked=False)


def verify_playbook(farm) -> runner.RunReport:
    """m2p.rigs.verify on the two good rigs, through m2p's runner."""
    hosts = list(inventory.load(farm["inventory"], environ={**os.environ, **farm["env"]}).hosts)
    return runner.run_playbook(collection.playbook("verify"), hosts, limit=["cv-hive", "cv-plain"],
                               known_hosts=farm["tmp"] / "known_hosts")


def test_convert_twice_then_plan_revert_and_no_secret_anywhere(farm):
    env, common, tmp = farm["env"], farm["common"], farm["tmp"]

    first = m2p("convert", *common, "--yes", "--json", "--keep-artifacts", str(tmp / "artifacts"), env=env)
    result = outcomes(first)
    assert first.returncode == 11, first.stdout[-3000:] + first.stderr[-3000:]  # one rig failed: the wrong password, alone
    assert result["cv-locked"]["result"] == "unreachable"
    assert "password" in result["cv-locked"]["message"].lower()
    assert result["cv-hive"]["result"] == "changed" and result["cv-plain"]["result"] == "changed", result

    # Rigs without internet: the bundle's images lie where k3s imports them at start (k3s docs,
    # "Air-Gap Install": <data-dir>/agent/images/), as the manifest lists them.
    listed = {a.path.name: a.sha256 for a in load_bundle(tmp / "bundle").images}
    assert len(listed) == 2
    for rig, data_dir in ((farm["hive"], DATA_DIR), (farm["plain"], "/var/lib/rancher/k3s")):
        with ssh(rig) as client:
            rc, out = run(client, f"cd {data_dir}/agent/images && sudo sha256sum *")
        assert rc == 0, out
        assert {line.split()[1]: line.split()[0] for line in out.splitlines()} == listed

    # --full: the whole playbook again, proving it is idempotent (the fingerprint would skip it)
    second = m2p("convert", *common, "--yes", "--json", "--full", env=env)
    result = outcomes(second)
    assert result["cv-hive"] == {**result["cv-hive"], "result": "converged", "changed": 0}, result["cv-hive"]["tasks"]
    assert result["cv-plain"] == {**result["cv-plain"], "result": "converged", "changed": 0}, result
    assert "fingerprint" not in result["cv-hive"]["message"]

    good = ["--limit", "cv-hive,cv-plain"]
    skipped = outcomes(m2p("convert", *common, *good, "--yes", "--json", env=env))
    assert {o["result"] for o in skipped.values()} == {"converged"}, skipped
    assert {o["message"] for o in skipped.values()} == {"fingerprint matches: skipped"}, skipped

    plan = m2p("plan", *common, *good, env=env)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-2000:]
    verified = verify_playbook(farm)
    assert verified.rc == 0 and verified.changed == 0, verified

    status_args = [*[a for a in common if a != "--bundle" and not a.endswith("/bundle")], *good]
    status = m2p("status", *status_args, "--json", env=env)
    assert status.returncode == 0, status.stdout[-2000:] + status.stderr[-2000:]
    rows = {r["rig"]: r for r in json.loads(status.stdout)}
    assert rows["cv-hive"]["state"] == "converged" and rows["cv-hive"]["k3s"].startswith("k3s v1.35")
    assert rows["cv-plain"]["k3s"].startswith("k3s-agent") and rows["cv-plain"]["gpus"] == "1 x NVIDIA GeForce RTX 3060"
    provider_goes_on_and_off(farm)  # issue 35, on this converged farm (tests/integration/provider_flow.py)

    # Secrets: the SSH/sudo password and the join token appear in no output and no runner artifact.
    with ssh(farm["hive"]) as client:
        rc, token = run(client, f"sudo cat {DATA_DIR}/server/token")
    token = token.strip()
    assert rc == 0 and len(token) > 40
    texts = {"convert stdout": first.stdout, "convert stderr": first.stderr, "second": second.stdout + second.stderr,
             "plan": plan.stdout + plan.stderr, "status": status.stdout + status.stderr}
    artifacts = [p for p in (tmp / "artifacts").rglob("*") if p.is_file()]
    assert len(artifacts) > 5
    texts.update({str(p): p.read_text(errors="replace") for p in artifacts})
    # The worker holds a one-time join token only, made for it on the server (k3s token create: a bootstrap
    # token, K10<CA hash>::<id>.<secret>, expiring in minutes) and deleted there once it joined, so what it holds is
    # dead; neither the server token (cluster admin) nor the server's long-lived agent token is in any file on it.
    with ssh(farm["hive"]) as client:
        rc, agent_token = run(client, f"sudo cat {DATA_DIR}/server/agent-token")
        made = json.loads(run(client, f"sudo cat {DATA_DIR}/server/m2p-standin-bootstrap-tokens.json")[1])
    agent_token = agent_token.strip()
    assert rc == 0 and "::node:" in agent_token and agent_token.split("::")[0] == token.split("::")[0]
    with ssh(farm["plain"]) as client:
        rc, env_file = run(client, "sudo cat /etc/systemd/system/k3s-agent.service.env")
        joined = re.fullmatch(r"K3S_TOKEN=K10([0-9a-f]{64})::([a-z0-9]{6})\.([a-z0-9]{16})", env_file.strip())
        assert rc == 0 and joined and joined[1] == token.split("::")[0][3:], env_file
        assert f"bootstrap-token-{joined[2]}" not in made, made  # made for it, and deleted once it joined
        rc, found = run(client, f"sudo grep -rlF {shlex.quote(agent_token.split('::')[-1])} /etc /var/lib /opt /root "
                                "/home 2>/dev/null; true")
        assert found.strip() == "", found
        rc, found = run(client, f"sudo grep -rlF {shlex.quote(token.split('::')[-1])} /etc /var/lib /opt /root "
                                "/home 2>/dev/null; true")
        assert found.strip() == "", found
    for secret in (farm["password"], token, token.split("::")[-1], agent_token.split("::")[-1], joined[3]):
        leaks = [where for where, text in texts.items() if secret in text]
        assert not leaks, f"a secret leaked into {leaks}"

    leave_what_k3s_leaves(farm["plain"])
    revert = m2p("revert", *common, *good, "--yes", "--json", env=env)
    assert revert.returncode == 0, revert.stdout[-3000:] + revert.stderr[-3000:]
    with ssh(farm["plain"]) as client:  # k3s's leftovers ended, as k3s-killall.sh would
        rc, out = run(client, "ls -l /proc/[0-9]*/exe 2>/dev/null | grep -c /var/lib/rancher/k3s/data/; "
                              "grep -c ' /run/k3s' /proc/mounts; ip link show cni0; cat /sys/fs/cgroup/kubepods/cgroup.procs")
        assert out.split()[:2] == ["0", "0"] and "does not exist" in out, out
    again = outcomes(m2p("revert", *common, *good, "--yes", "--json", env=env))
    assert {o["result"] for o in again.values()} == {"converged"}, again  # a second revert changes nothing
    pending = m2p("plan", *common, "--limit", "cv-plain", env=env)  # one rig says it: a check-mode run each
    assert pending.returncode == 1, pending.stdout[-3000:]
    assert "changes pending" in pending.stderr


def test_drift_is_repaired_an_upgrade_restarts_k3s_and_an_agent_reverts_alone(pair):
    """Drift, an upgrade, and the time-shared agent's revert and removal, on a second converged farm (the
    first test's rigs are busy with the provider: the two halves run side by side)."""
    farm = pair
    env, common = farm["env"], farm["common"]
    first = m2p("convert", *common, "--yes", "--json", env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    good = ["--limit", "cv-hive,cv-plain"]
    status_args = [*[a for a in common if a != "--bundle" and not a.endswith("/bundle")], *good]
    # Drift on one rig (a hand-edited k3s config, a stopped agent) is caught by the probe and
    # repaired by a run on that rig alone; a swapped card on the other changes its labels.
    with ssh(farm["plain"]) as client:
        rc, out = run(client, "sudo sh -c 'echo \"# by hand\" >> /etc/rancher/k3s/config.yaml; systemctl stop k3s-agent'")
        assert rc == 0, out
        # and the owner lets go of one toolkit hold: a run on a rig with the bundle's toolkit holds only what is not held
        rc, out = run(client, "sudo apt-mark unhold nvidia-container-toolkit")
        assert rc == 0, out
    with ssh(farm["hive"]) as client:
        swapped = json.dumps(gpu_standin.rig_config("cv-hive", ["rtx3090", "rtx3080"]))
        rc, out = run(client, f"echo {shlex.quote(swapped)} | sudo tee /etc/m2p-standin/gpus.json >/dev/null")
        assert rc == 0, out
    drifted = m2p("status", *status_args, "--json", env=env)
    rows = {r["rig"]: r for r in json.loads(drifted.stdout)}
    assert rows["cv-plain"]["state"] == "drifted", rows
    assert "file /etc/rancher/k3s/config.yaml" in rows["cv-plain"]["detail"]
    assert "unit k3s-agent.service: inactive enabled (was active enabled)" in rows["cv-plain"]["detail"]
    assert rows["cv-hive"]["state"] == "drifted" and "GPUs changed" in rows["cv-hive"]["detail"], rows
    verified = verify_playbook(farm)  # the verify playbook sees the same drift, read-only
    assert verified.changed == 0 and set(verified.failures) == {"cv-hive", "cv-plain"}, verified
    assert "drift: unit k3s-agent.service: inactive enabled (was active enabled)" in verified.failures["cv-plain"]
    assert "GPUs changed: " in verified.failures["cv-hive"]
    # The stopped unit is in the plan (cv-plain's alone: a check-mode run of the whole playbook per rig).
    planned = outcomes(m2p("plan", *common, "--limit", "cv-plain", "--json", env=env))
    assert "Start k3s now and at boot" in planned["cv-plain"]["tasks"], planned["cv-plain"]
    repaired = outcomes(m2p("convert", *common, *good, "--yes", "--json", env=env))
    assert repaired["cv-plain"]["result"] == "changed" and "drift: file" in repaired["cv-plain"]["message"], repaired
    assert repaired["cv-hive"]["result"] == "changed" and "GPUs changed" in repaired["cv-hive"]["message"], repaired
    with ssh(farm["plain"]) as client:
        rc, holds = run(client, "apt-mark showhold")
    assert {"libnvidia-container1", "libnvidia-container-tools", "nvidia-container-toolkit-base",
            "nvidia-container-toolkit"} <= set(holds.split()), holds
    with ssh(farm["hive"]) as client:
        rc, labels = run(client, "cat /var/lib/m2p/node-labels.json")
    labels = json.loads(labels)
    model = "akash.network/capabilities.gpu.vendor.nvidia.model."
    assert labels[model + "rtx3090"] == "1" and labels[model + "rtx3080"] == "1", labels
    assert labels["nvidia.com/gpu.count"] == "2"
    rows = {r["rig"]: r for r in json.loads(m2p("status", *status_args, "--json", env=env).stdout)}
    assert {r["state"] for r in rows.values()} == {"converged"}, rows

    upgrade_restarts_k3s_on_the_new_version(farm)
    revert_agent_leaves_nothing_on_its_server(farm)


def test_rig_that_loses_power_mid_convert_converges_next_run(boot_rigs, tmp_path):
    (rig,) = boot_rigs(sandbox.RigSpec("cv-crash", "hiveos", ("rtx3080",)))
    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"m2p_min_free_disk_gb": 5}, "hosts": {"cv-crash": {
        "ansible_host": rig.address, "ansible_user": rig.user, "ansible_ssh_private_key_file": rig.key_file}}}}))
    common = ["-i", str(inv), "--bundle", str(bundle), "--accept-new", "--known-hosts", str(tmp_path / "kh")]
    with ssh(rig) as client:
        pid1_start = run(client, "cut -d' ' -f22 /proc/1/stat")[1]
    proc = subprocess.Popen([*M2P, "convert", *common, "--yes"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    seen = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if "changed" in line and "Copy the bundle's packages" in line:
            # Power cut: the rig dies at once, no clean shutdown (nspawn exits 133, the harness boots it again).
            with ssh(rig) as client:
                run(client, "sudo sh -c 'nohup systemctl reboot --force --force >/dev/null 2>&1 &'")
            break
    rest, _ = proc.communicate(timeout=600)
    # The run fails for this rig, or (when the cut fell between tasks) reconnects and goes on.
    assert proc.returncode in (0, 11), "".join(seen) + rest
    sandbox.wait_ssh(rig, timeout=90)
    with ssh(rig) as client:
        assert run(client, "cut -d' ' -f22 /proc/1/stat")[1] != pid1_start, "the power cut never happened"
    again = m2p("convert", *common, "--yes", "--json")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert outcomes(again)["cv-crash"]["result"] in {"changed", "converged"}
    third = m2p("convert", *common, "--yes", "--json", "--full")
    assert outcomes(third)["cv-crash"]["changed"] == 0, third.stdout


def leave_what_k3s_leaves(rig):
    """What a real k3s leaves once its unit stops (KillMode=process): a containerd shim run from
    k3s's data dir, a pod's process in a kubepods cgroup, a container's mount under /run/k3s
    and the CNI's bridge.  STAND-INS: sleep under a shim's name, a tmpfs, a bare bridge."""
    shim = "/var/lib/rancher/k3s/data/standin/bin/containerd-shim-runc-v2"
    with ssh(rig) as client:
        rc, out = run(client, "sudo sh -c '"
                              f"mkdir -p {os.path.dirname(shim)} && cp /bin/sleep {shim} && "
                              f"(setsid {shim} 3600 </dev/null >/dev/null 2>&1 &) && "
                              "mkdir -p /sys/fs/cgroup/kubepods && (setsid sleep 3601 </dev/null >/dev/null 2>&1 &) && "
                              "sleep 0.3 && for p in $(pgrep -x sleep); do grep -q 3601 /proc/$p/cmdline && "
                              "echo $p > /sys/fs/cgroup/kubepods/cgroup.procs; done; "
                              "mkdir -p /run/k3s/containerd/standin && mount -t tmpfs m2p-standin /run/k3s/containerd/standin && "
                              "ip link add cni0 type bridge && echo planted'")
    assert rc == 0 and "planted" in out, out


def revert_agent_leaves_nothing_on_its_server(farm):
    """Issues 22 and 34: the time-shared agent rig cv-plain is its own kubelet to the API (k3s's
    kubelet.kubeconfig: a client certificate for system:node:cv-plain), and m2p makes it no identity of its
    own; the identity an earlier m2p made it (a ServiceAccount, its token Secret, RBAC, their manifest)
    is deleted when the time-share is applied.  Its credential reads and patches its own node only: another
    node's pods and Node are refused, as is a change to its taints.  Reverted while its server cv-hive
    stays, its Node and node-password secret go from the server (through the server's `k3s kubectl`), the
    last agent takes the shared objects with it (an old time-share's PriorityClass too), and the rig
    re-installed under its name rejoins.
    STAND-IN: the API (kube_api.py over TLS, with the Node authorizer's and NodeRestriction's rules and
    k3s's node-password check), the kubelet credential files (k3s writes them when the agent registers),
    and the stand-in k3s's kubectl that talks to the API."""
    env, common, tmp = farm["env"], farm["common"], farm["tmp"]
    api = KubeApiStandin(host=str(network.gateway()), tls=True)
    admin = secrets.token_urlsafe(16)
    api.admin_tokens.add(admin)
    assert api.authority is not None
    try:
        point_k3s_kubectl_at(farm["hive"], api, admin)
        # What the cluster holds for cv-plain: its Node and k3s's node password (its registration), and what
        # an earlier m2p made: the agent's ServiceAccount, token Secret and RBAC (and their manifest on the
        # server), and an old time-share's PriorityClass.
        api.join("cv-plain", secrets.token_urlsafe(8))
        api.add_node("cv-hive", secrets.token_urlsafe(16))
        api.add_pod("tenant-on-hive", "cv-hive", 0)
        old_identity = [{"kind": "Secret", "metadata": {"name": "m2p-agent-cv-plain", "namespace": "m2p-system"},
                         "data": {"token": base64.b64encode(b"old").decode()}},
                        {"kind": "ServiceAccount", "metadata": {"name": "m2p-agent-cv-plain", "namespace": "m2p-system"}},
                        {"kind": "ClusterRole", "metadata": {"name": "m2p-agent-cv-plain"}},
                        {"kind": "ClusterRoleBinding", "metadata": {"name": "m2p-agent-cv-plain"}},
                        {"kind": "ClusterRoleBinding", "metadata": {"name": "m2p-agent-cv-plain-pods"}}]
        api.apply([*old_identity, {"kind": "PriorityClass", "metadata": {"name": "m2p-placeholder"}}])
        with ssh(farm["hive"]) as client:
            rc, out = run(client, f"echo 'kind: ServiceAccount' | sudo tee {DATA_DIR}/server/manifests/"
                                  "m2p-agent-cv-plain.yaml > /dev/null")
            assert rc == 0, out
        with pytest.raises(NodePasswordRejected):  # the rig re-installed now (a new password) is refused
            api.join("cv-plain", secrets.token_urlsafe(8))
        give_kubelet_credential(farm["plain"], api, "cv-plain")
        give_kubelet_credential(farm["hive"], api, "cv-hive", data_dir=DATA_DIR)
        # Issue 33: converted with no schedule, no agent could hand the GPUs over: the market guard cordons
        # the mining cv-hive as its own kubelet.  cv-plain's GPU is free (no miner): it stays on the market.
        wait_for("the market guard to cordon the mining cv-hive",
                 lambda: api.nodes["cv-hive"]["spec"].get("unschedulable") is True)
        assert not api.nodes["cv-plain"]["spec"].get("unschedulable"), api.nodes["cv-plain"]
        (tmp / "lease-first.yml").write_text("timezone: UTC\npolicy: lease-first\nmin_switch_interval: 0s\n")
        ssh_args = [a for a in common if a != "--bundle" and not a.endswith("/bundle")]
        applied = m2p("schedule", "apply", *ssh_args, str(tmp / "lease-first.yml"), "--limit", "cv-plain",
                      "--yes", "--json", env=env)
        assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
        assert [o["kind"] for o in old_identity if api.has(o["kind"], o["metadata"]["name"],
                                                            o["metadata"].get("namespace", ""))] == []
        with ssh(farm["hive"]) as client:  # k3s's deploy controller, standing in: the shared manifest's objects
            assert run(client, f"sudo ls {DATA_DIR}/server/manifests")[1].split() == [
                "m2p-nvidia-device-plugin.yaml", "m2p-timeshare.yaml"]
            rc, text = run(client, f"sudo cat {DATA_DIR}/server/manifests/m2p-timeshare.yaml")
            assert rc == 0, text
            api.apply([d for d in yaml.safe_load_all(text) if d])
        with ssh(farm["plain"]) as client:
            assert run(client, "sudo test -e /etc/m2p/agent-token")[0] == 1  # no token of m2p's on the rig
        # The agent's kubelet credential works: it publishes its mode.
        wait_for("the agent to reach the API as its kubelet",
                 lambda: "m2p.io/mode" in api.nodes.get("cv-plain", {}).get("metadata", {}).get("labels", {}))
        with ssh(farm["plain"]) as client:  # the agent answers for the node now: the guard has ended
            assert run(client, "systemctl is-active m2p-market-guard")[1].strip() == "inactive"
        # What root on cv-plain holds reaches no further than cv-plain's own node.
        with ssh(farm["plain"]) as client:
            files = {n: run(client, f"sudo cat /var/lib/rancher/k3s/agent/{n}")[1]
                     for n in ("server-ca.crt", "client-kubelet.crt", "client-kubelet.key")}
        for name, text in files.items():
            (tmp / name).write_text(text)
        (tmp / "stolen.kubeconfig").write_text(kubeconfig_text(api.url, *(str(tmp / n) for n in files)))
        as_plain = kube.KubeClient("", None, kubeconfig=str(tmp / "stolen.kubeconfig"))
        assert [p["metadata"]["name"] for p in as_plain.pods_on_node("cv-plain")] == []
        for denied in (lambda: as_plain.pods_on_node("cv-hive"), lambda: as_plain.node("cv-hive"),
                       lambda: as_plain.patch_node("cv-hive", {"metadata": {"labels": {"m2p.io/mode": "x"}}}),
                       lambda: as_plain.patch_node("cv-plain", {"spec": {"taints": [
                           {"key": "evil", "effect": "NoSchedule"}]}})):
            with pytest.raises(kube.ApiError, match="HTTP 403"):
                denied()

        reverted = m2p("revert", *common, "--limit", "cv-plain", "--yes", "--json", env=env)
        assert reverted.returncode == 0, reverted.stdout[-3000:] + reverted.stderr[-3000:]
        left = [(kind, ns, name) for kind, ns, name in [
            ("Node", "", "cv-plain"), ("Secret", "kube-system", "cv-plain.node-password.k3s"),
            ("Namespace", "", "m2p-system"), ("ClusterRole", "", "m2p-agent-pods"),
            ("PriorityClass", "", "m2p-placeholder")] if api.has(kind, name, ns)]
        assert left == [], f"left on the server: {left}"
        with ssh(farm["hive"]) as client:
            assert run(client, f"sudo ls {DATA_DIR}/server/manifests")[1].split() == ["m2p-nvidia-device-plugin.yaml"]
        again = outcomes(m2p("revert", *common, "--limit", "cv-plain", "--yes", "--json", env=env))
        assert again["cv-plain"]["result"] == "converged", again  # nothing left to do, here or there
        api.join("cv-plain", secrets.token_urlsafe(8))  # re-installed under its name, it rejoins
        remove_forgets_a_dead_rig_on_its_server(farm, api)
    finally:
        api.close()
        with ssh(farm["hive"]) as client:
            run(client, "sudo rm -f /etc/m2p-standin/kube-api.json /etc/m2p-standin/kube-api-ca.crt")


def remove_forgets_a_dead_rig_on_its_server(farm, api):
    """Issue 21: `m2p remove` on a rig that is gone (its address answers nothing: a closed
    loopback port) deletes its Node, node password and agent identity through its server, drops
    its host key from the known_hosts file, and never needs the rig."""
    env, tmp = farm["env"], farm["tmp"]
    api.apply([{"kind": "ServiceAccount", "metadata": {"name": "m2p-agent-cv-plain", "namespace": "m2p-system"}},
               {"kind": "ClusterRole", "metadata": {"name": "m2p-agent-cv-plain"}}])
    with socket.socket() as s:  # a port nothing listens on: the dead rig
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    doc = yaml.safe_load(farm["inventory"].read_text())
    doc["all"]["children"]["k3s_agent"]["hosts"]["cv-plain"].update(ansible_host="127.0.0.1", ansible_port=port)
    dead = tmp / "rigs-dead.yml"
    dead.write_text(yaml.safe_dump(doc))
    known = tmp / "known_hosts"
    line = next(x for x in known.read_text().splitlines() if x.split()[0] == farm["plain"].address)
    with known.open("a") as f:
        f.write(f"[127.0.0.1]:{port} {line.split(None, 1)[1]}\n")
    removed = m2p("remove", "-i", str(dead), "--limit", "cv-plain", "--known-hosts", str(known), "--yes", "--json",
                  env=env)
    assert removed.returncode == 0, removed.stdout[-3000:] + removed.stderr[-3000:]
    outcome = outcomes(removed)["cv-plain"]
    assert outcome["result"] == "changed" and f"host key of [127.0.0.1]:{port} dropped" in outcome["message"], outcome
    left = [(k, n) for k, ns, n in [("Node", "", "cv-plain"), ("Secret", "kube-system", "cv-plain.node-password.k3s"),
                                    ("ServiceAccount", "m2p-system", "m2p-agent-cv-plain"),
                                    ("ClusterRole", "", "m2p-agent-cv-plain")] if api.has(k, n, ns)]
    assert left == [], left
    assert f"[127.0.0.1]:{port}" not in known.read_text() and farm["plain"].address in known.read_text()
    refused = m2p("remove", "-i", str(dead), "--limit", "cv-hive", "--known-hosts", str(known), "--yes", "--json",
                  env=env)
    assert refused.returncode == 11 and "is a k3s server" in outcomes(refused)["cv-hive"]["message"], refused.stdout


def upgrade_restarts_k3s_on_the_new_version(farm):
    """Issue 21 (part): a bundle with a newer k3s patch replaces the binary and restarts k3s, so
    the new version runs (the stand-in k3s process is the new file); a bundle that would skip a
    minor line is refused before anything runs; a release that fails to start is rolled back."""
    env, common, tmp = farm["env"], farm["common"], farm["tmp"]
    newer = tmp / "bundle-newer"
    build_test_bundle(newer, k3s_version="v1.35.4+k3s1")

    def with_bundle(path):
        return [str(path) if a.endswith("/bundle") else a for a in common]
    with ssh(farm["hive"]) as client:
        before = run(client, "systemctl show -p MainPID --value k3s")[1].strip()
    upgraded = outcomes(m2p("convert", *with_bundle(newer), "--limit", "cv-hive", "--yes", "--json", env=env))
    assert upgraded["cv-hive"]["result"] == "changed", upgraded
    with ssh(farm["hive"]) as client:
        after = run(client, "systemctl show -p MainPID --value k3s")[1].strip()
        version = run(client, "k3s --version")[1]
    assert after != before and after != "0" and "v1.35.4+k3s1" in version
    skipping = tmp / "bundle-skipping"
    build_test_bundle(skipping, k3s_version="v1.37.0+k3s1")
    refused = outcomes(m2p("convert", *with_bundle(skipping), "--limit", "cv-hive", "--yes", "--json", env=env))
    assert refused["cv-hive"]["result"] == "failed", refused
    assert "k3s 1.35 runs here and the target is 1.37: Kubernetes upgrades one minor line at a time" in \
        refused["cv-hive"]["message"], refused
    # A release that does not come up on the rig: k3s comes back on the version that ran.
    broken = tmp / "bundle-broken"
    build_test_bundle(broken, k3s_version="v1.35.5+k3s1", k3s_fails_at_start=True)
    failed = outcomes(m2p("convert", *with_bundle(broken), "--limit", "cv-hive", "--yes", "--json", env=env))
    assert failed["cv-hive"]["result"] == "failed", failed
    assert ('k3s v1.35.5+k3s1 did not start (level=fatal msg="m2p STAND-IN: this k3s build fails at start'
            in failed["cv-hive"]["message"]), failed
    assert "back on k3s version v1.35.4+k3s1 (m2p-standin), which runs again" in failed["cv-hive"]["message"], failed
    with ssh(farm["hive"]) as client:
        assert run(client, "systemctl is-active k3s")[1].strip() == "active"
        assert "v1.35.4+k3s1" in run(client, "k3s --version")[1]
        assert run(client, "test -e /usr/local/bin/k3s.previous")[0] == 1  # the kept copy is back in place
