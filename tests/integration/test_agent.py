"""The time-share agent on a HiveOS-layout sandbox rig with python3 3.8: installed by the timeshare_agent role
(playbooks/schedule.yml), run by systemd, talking to the STAND-IN Kubernetes API server
(sandbox/m2p_sandbox/kube_api.py) on the sandbox network's gateway.  The miner is the
HiveOS stand-in's real `screen` session."""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from m2p_sandbox import flavours, network, tenant
from m2p_sandbox import rig as sandbox
from m2p_sandbox.bundle import build_test_bundle
from m2p_sandbox.kube_api import KubeApiStandin
from miner2provider import cli

from .conftest import M2P, m2p, rig_entry, run, ssh, wait_for
from .conftest import outcomes as conftest_outcomes

pytestmark = pytest.mark.integration


# The hook m2p puts in the CDI spec (roles/nvidia_container_toolkit): run below exactly as
# runc runs an OCI hook (an empty environment, the container's state on stdin).
GATE_HOOK = yaml.safe_load((Path(__file__).parents[2] / "ansible_collections/m2p/rigs/roles/nvidia_container_toolkit"
                            / "defaults/main.yml").read_text())["nvidia_container_toolkit_gate_hook"]


def through_the_gate(r, pod: str, cards: tuple[int, ...] = ()) -> tuple[int, str, int]:
    """The container of the lease's pod (namespace/name) reaches the gate (the harness's STAND-IN tenant),
    given ``cards`` (device minors; none: its cards unknown to the agent).  Returns (exit, output, its pid)."""
    return tenant.container_at_the_gate(r, pod, GATE_HOOK, cards)


def gpu_log(r) -> list[str]:
    """What the stand-in cards saw, in order: nvidia-smi's clock and power calls, miners attaching."""
    with ssh(r) as client:
        return run(client, "cat /var/log/m2p-standin-gpu.log")[1].splitlines()


def since_the_miner(log: list[str]) -> list[str]:
    """The calls after the last miner attached."""
    return log[len(log) - log[::-1].index("miner attached"):]


# HiveOS's commands as a root login runs them: with its /etc/environment (pam_env; sudo's secure_path drops its PATH).
HIVE_ENV = "set -a; . /etc/environment; set +a;"
RESET = ["nvidia-smi -rgc", "nvidia-smi -rmc"]  # locked clocks off; then each card's default power limit


def miner_running(r) -> bool:
    """A HiveOS miner window's miner-run loop runs (not merely a `miner` screen session: hiveos-linux hive/bin/miner
    leaves one holding only a bash after a start with no miner set)."""
    with ssh(r) as client:
        return run(client, f"sudo {flavours.MINING['hiveos'][1]}")[0] == 0


def watchdog(r) -> tuple[str, str]:
    """HiveOS's hive-watchdog unit: (is-active, is-enabled) (masked-runtime while the agent holds it)."""
    with ssh(r) as client:
        return (run(client, "systemctl is-active hive-watchdog")[1].strip(),
                run(client, "systemctl is-enabled hive-watchdog")[1].strip())


def limits(r) -> list[str]:
    """Each card's power limit as the stand-in nvidia-smi reports it."""
    with ssh(r) as client:
        return run(client, "nvidia-smi --query-gpu=power.limit --format=csv,noheader,nounits")[1].split()


def given_back(unit: tuple[str, str]) -> bool:
    return unit[0] == "active" and not unit[1].startswith("masked")


def reboots(r) -> str:
    """The reboots HiveOS's watchdog asked for (its sreboot, the stand-in's record)."""
    with ssh(r) as client:
        return run(client, "cat /var/log/m2p-standin-reboots.log 2>/dev/null")[1]


def miner_process(r) -> tuple[str, str]:
    """The GPU miner stand-in's pid on the rig and its cgroup (its unit or scope)."""
    with ssh(r) as client:
        pid = run(client, "pgrep -of '^python3 /usr/lib/m2p-standin/standin-cuda'")[1].strip()
        return pid, run(client, f"cat /proc/{pid}/cgroup")[1] if pid else ""


def apply(r, tmp_path, api, schedule: str, *extra: str, settings: dict | None = None) -> tuple[int, list[dict]]:
    """`m2p schedule apply` as a user runs it (the rig's own ``settings`` in the inventory too); returns the
    exit code and the --json outcomes.  The API speaks TLS (as kube-apiserver): the agent's token comes with the
    cluster's CA, the stand-in's, in a file on the controller (m2p_agent_ca_file; the role copies it to the rig)."""
    (tmp_path / "schedule.yml").write_text(schedule)
    assert api.authority is not None
    (tmp_path / "cluster-ca.crt").write_bytes(api.authority.pem)
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {r.name: {
        "ansible_host": r.address, "ansible_user": r.user, "ansible_ssh_private_key_file": r.key_file,
        "m2p_agent_token_env": "AG_HIVE_AGENT_TOKEN", "m2p_agent_ca_file": str(tmp_path / "cluster-ca.crt"),
        **(settings or {})}}}}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["schedule", "apply", "-i", str(inv), str(tmp_path / "schedule.yml"), "--api-server", api.url,
                         "--accept-new", "--known-hosts", str(tmp_path / "known_hosts"), "--json", "--yes", *extra])
    return code, json.loads(out.getvalue())


MANIFESTS = "/var/lib/rancher/k3s/server/manifests"


def with_the_agents_account(exc: AssertionError, r, api: KubeApiStandin | None = None) -> AssertionError:
    """A failed assertion with what the agent logged and last said, and the node as the API holds it."""
    with ssh(r) as client:
        journal = run(client, "sudo journalctl -u m2p-agent --no-pager -n 40; sudo cat /var/lib/m2p/agent/status.json")[1]
    node = f"\nnode: {api.nodes[r.name]}" if api is not None else ""
    # The failure again at the end: a CI log that keeps only a long message's head and tail still names it.
    return AssertionError(f"{exc}{node}\nagent:\n{journal}\nfailed: {str(exc)[:300]}")


def test_agent_switches_the_real_miner_survives_hello_and_a_reboot(boot_rigs, tmp_path, monkeypatch):
    # HiveOS 0.6-227 (Ubuntu 20.04): python3 3.8, no zoneinfo: the agent reads the zone's TZif file itself.
    (r,) = boot_rigs(sandbox.RigSpec("ag-hive", "hiveos", ("rtx3090", "rtx3090"), ("3.8",)))
    api = KubeApiStandin(host=str(network.gateway()))
    token = secrets.token_urlsafe(24)
    monkeypatch.setenv("AG_HIVE_AGENT_TOKEN", token)
    api.add_node(r.name, token, gpus=2)  # the device plugin's count, as kubelet reports it
    lease_first = "timezone: Europe/Berlin\npolicy: lease-first\nmin_switch_interval: 0s\n"
    try:
        assert wait_for("hive.service to start the miner", lambda: miner_running(r))
        # --check: the plan, and nothing on the rig.
        code, outcomes = apply(r, tmp_path, api, lease_first, "--check")
        assert code == 1 and outcomes[0]["result"] == "pending", outcomes
        assert any("agent" in t for t in outcomes[0]["tasks"]), outcomes
        with ssh(r) as client:
            assert run(client, "test -e /opt/m2p || test -e /etc/m2p || test -e " + MANIFESTS)[0] == 1
        # lease-first: idle mining, and no pod holds the GPUs: Akash counts them free.
        code, outcomes = apply(r, tmp_path, api, lease_first)
        assert code == 0 and outcomes[0]["result"] == "changed", outcomes
        code, outcomes = apply(r, tmp_path, api, lease_first)
        assert code == 0 and outcomes[0]["result"] == "converged", outcomes
        with ssh(r) as client:  # the rig is its own k3s server: the cluster objects are in its manifests dir
            names = run(client, f"sudo ls {MANIFESTS}")[1].split()
            docs = [d for name in names for d in yaml.safe_load_all(run(client, f"sudo cat {MANIFESTS}/{name}")[1])]
            token_mode = run(client, "sudo stat -c %a /etc/m2p/agent-token")[1].strip()
        assert sorted(names) == ["m2p-agent-ag-hive.yaml", "m2p-timeshare.yaml"]
        for doc in docs:
            kubernetes_validate.validate(doc, "1.35", strict=True)
        assert token_mode == "600"
        wait_for("idle mining", lambda: api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode") == "idle-mining")
        assert api.akash_view(r.name) == {"excluded": None, "gpus_allocatable": 2, "gpus_allocated": 0,
                                          "gpus_available": 2}
        assert miner_running(r)

        # Akash bids and wins; the lease's container reaches the gate: the hook returns only once
        # the real miner stopped and nvidia-smi shows no process on the GPUs.
        code, out, _ = through_the_gate(r, "lease/lease-1")
        assert code == 0, out
        assert not miner_running(r)
        with ssh(r) as client:
            assert run(client, "nvidia-smi --query-compute-apps=pid --format=csv,noheader")[1].strip() == ""
        # The cards left HiveOS's tuning (nvidia-oc.conf: 240 W) for their defaults before the lease ran.
        assert since_the_miner(gpu_log(r)) == [*RESET, "nvidia-smi -i 0 -pl 350.00", "nvidia-smi -i 1 -pl 350.00"]
        api.add_pod("lease-1", r.name, 2)
        assert wait_for("leasing", lambda: api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode") == "leasing")
        assert api.akash_view(r.name)["gpus_available"] == 0

        # m2p status shows the agent's own account (status.json, read by the probe).
        def status_row() -> dict:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert cli.main(["status", "-i", str(tmp_path / "rigs.yml"), "--known-hosts",
                                 str(tmp_path / "known_hosts"), "--json"]) == 0
            return json.loads(out.getvalue())[0]

        def unblind(row: dict) -> list:
            """The ledger's changes the agent saw, a blind spell left out: an API read that timed out on CI's loaded
            cores writes a blind line and, when the agent sees again, the same change once more."""
            seen: list = []
            after_blind = False
            for e in row["agent"]["ledger"]:
                change = (e["mode"], e["leases"])
                if not e["blind"] and not (after_blind and seen[-1:] == [change]):  # a line twice only across a blind one
                    seen.append(change)
                after_blind = e["blind"]
            return seen

        # The rig's ledger: one line per change, the lease named by its pod once the agent read it
        # from the API (the label turned "leasing" on the gate's grant, a tick before that).
        last: list[dict] = []

        def lease_in_ledger() -> dict | None:
            row = status_row()
            last[:] = [row]
            agent = row["agent"]
            settled = (agent["ledger"][-1:] and not agent["ledger"][-1]["blind"] and agent["last_error"] == ""
                       and unblind(row)[-1:] == [("leasing", ["lease/lease-1"])])
            return row if settled else None

        try:
            row = wait_for("the lease in the rig's ledger", lease_in_ledger, timeout=60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the last row: {last}") from None
        assert row["agent"]["service"] == "active" and row["agent"]["mode"] == "leasing", row
        assert row["agent"]["schedule"] == "schedule", row
        assert unblind(row)[-3:] == [("idle-mining", []), ("leasing", []), ("leasing", ["lease/lease-1"])], \
            row["agent"]["ledger"]
        # The controller keeps the ledger: a second sweep stores nothing twice.
        db = tmp_path / "history.sqlite3"
        for _ in range(2):
            swept = m2p("history", "-i", str(tmp_path / "rigs.yml"), "--known-hosts", str(tmp_path / "known_hosts"),
                        "--db", str(db), "--json", env={"AG_HIVE_AGENT_TOKEN": "x"})
            assert swept.returncode == 0, swept.stderr
        (hist,) = json.loads(swept.stdout)
        assert hist["seconds"]["leasing"] > 0 and hist["seconds"]["idle-mining"] > 0, hist
        # Every line the agent had is kept, and no more than it has now (a blind spell may add lines meanwhile).
        after = status_row()
        with sqlite3.connect(db) as stored:
            kept = stored.execute("SELECT count(*) FROM ledger").fetchone()[0]
        assert len(row["agent"]["ledger"]) <= kept <= len(after["agent"]["ledger"]), (kept, after["agent"]["ledger"])

        # HiveOS's watchdog (running since boot: WD_ENABLED=1) is held while the lease runs: its unit stopped and
        # masked for this boot, since its own `wd stop` does nothing.  HiveOS fights back: `hello restartminer` (a
        # dashboard push) restarts the miner, and the watchdog, which the mask keeps down; the agent stops the
        # miner again (HiveOS's stop takes ~16 s: miner-run starts the miner again 3 s after Ctrl-C, until the
        # session is quit).
        assert watchdog(r) == ("inactive", "masked-runtime")
        with ssh(r) as client:
            run(client, f"sudo sh -c '{HIVE_ENV} /hive/bin/hello restartminer'")
            assert run(client, f"sudo sh -c '{HIVE_ENV} /hive/bin/wd start'")[0] != 0  # masked: nothing starts it
        wait_for("the agent to stop the miner hello started", lambda: not miner_running(r), timeout=120)
        assert watchdog(r) == ("inactive", "masked-runtime")

        # A reboot: hive.service starts the miner at boot; the agent resumes leasing from its state.
        with ssh(r) as client:
            client.exec_command("sudo systemctl reboot")
        time.sleep(1)
        sandbox.wait_ssh(r, timeout=60)
        with ssh(r) as client:
            assert run(client, "systemctl is-system-running --wait")[1].strip() in {"running", "degraded"}
            state = json.loads(run(client, "cat /var/lib/m2p/agent/state.json")[1])
        assert state["state"]["mode"] == "leasing" and state["watchdog_was"] is True
        wait_for("the miner stopped after the reboot", lambda: not miner_running(r), timeout=120)
        # The reboot cleared the mask and HiveOS's boot started its watchdog: held again.
        wait_for("the watchdog held again", lambda: watchdog(r) == ("inactive", "masked-runtime"), timeout=30)
        status = json.loads(api.nodes[r.name]["metadata"]["annotations"]["m2p.io/status"])
        assert status["mode"] == "leasing" and status["schedule"] == "schedule"

        # The lease ends (its container too): idle mining resumes, the GPUs free in Akash's eyes.
        api.delete_pod("lease-1")
        # (The reboot ended the container's stand-in process: the gate's record of it went with it.)
        wait_for("idle mining again", lambda: api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode") == "idle-mining")
        assert wait_for("the miner started again", lambda: miner_running(r))
        assert api.akash_view(r.name)["gpus_available"] == 2
        # The watchdog back as it was (running, not masked); it never rebooted the rig under the lease.
        wait_for("the watchdog given back", lambda: given_back(watchdog(r)), timeout=15)
        assert reboots(r) == ""
        # HiveOS's own nvidia-oc (run with HiveOS's environment) put its tuning back before the miner attached.
        # (The screen session shows before the miner stand-in has taken its cards and said so: wait for it.)
        tail = ["nvidia-smi -i 0 -pl 240", "nvidia-smi -i 1 -pl 240", "miner attached"]
        wait_for(f"the cards' log to end {tail}", lambda: gpu_log(r)[-3:] == tail, timeout=15)

        # The miner the agent started runs in a scope of its own: restarting the agent (a new config, an upgrade)
        # or stopping it leaves it mining; a stopped agent takes its node off the market until it runs again.
        pid, cgroup = miner_process(r)
        assert "/m2p-miner-" in cgroup and "m2p-agent" not in cgroup, cgroup
        with ssh(r) as client:
            assert run(client, "sudo systemctl restart m2p-agent")[0] == 0
            assert run(client, "sudo systemctl stop m2p-agent")[0] == 0
        assert miner_process(r)[0] == pid and api.nodes[r.name]["spec"].get("unschedulable")
        with ssh(r) as client:
            assert run(client, "sudo systemctl start m2p-agent")[0] == 0
        wait_for("offered again", lambda: not api.nodes[r.name]["spec"].get("unschedulable"))
        assert miner_process(r)[0] == pid

        # A GPU container that is no lease (a monitoring DaemonSet in kube-system): refused while the rig mines.
        api.add_pod("dcgm-exporter-x", r.name, 1, namespace="kube-system")
        code, out, _ = through_the_gate(r, "kube-system/dcgm-exporter-x")
        assert code == 1 and "hands its GPUs only to the marketplace's leases" in out, out
        assert miner_process(r)[0] == pid
        api.delete_pod("dcgm-exporter-x", namespace="kube-system")

        # The USB stick full: a lease that lands is not switched to unrecorded; the rig mines on, off the market,
        # and says why; with room again the switch is made.
        with ssh(r) as client:
            assert run(client, "sudo sh -c 'cp -a /var/lib/m2p/agent /run/agent.copy && mount -t tmpfs -o size=64k "
                               "tmpfs /var/lib/m2p/agent && cp -a /run/agent.copy/. /var/lib/m2p/agent/ && "
                               "{ dd if=/dev/zero of=/var/lib/m2p/agent/fill bs=4k 2>/dev/null; true; }'")[0] == 0
        api.add_pod("lease-3", r.name, 2)
        try:
            said = wait_for("the agent to say it cannot write", lambda: "not switching" in json.loads(
                api.nodes[r.name]["metadata"]["annotations"]["m2p.io/status"])["last_error"], timeout=20)
            assert said and miner_process(r)[0] == pid and api.nodes[r.name]["spec"].get("unschedulable")
        finally:
            with ssh(r) as client:
                run(client, "sudo umount /var/lib/m2p/agent")
        wait_for("the miner stopped for the lease", lambda: not miner_running(r), timeout=120)
        api.delete_pod("lease-3")
        wait_for("idle mining again", lambda: api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode") == "idle-mining")
        assert wait_for("the miner started again", lambda: miner_running(r))

        # A miner that ignores the first stop and its screen's hang-up (it survives `miner stop` outside any
        # screen, holding the GPUs): m2p ends it after the grace, and the container starts once the cards are free.
        with ssh(r) as client:
            run(client, "echo '{\"stops_to_exit\": 2, \"ignore_hangup\": true}' | sudo tee /etc/m2p-standin/miner.json"
                        f" && sudo sh -c '{HIVE_ENV} /hive/bin/miner restart'")
        stubborn, _ = miner_process(r)
        code, out, pid = through_the_gate(r, "lease/lease-2")
        try:
            assert code == 0, out
            with ssh(r) as client:
                assert run(client, f"test -d /proc/{stubborn}")[0] == 1
                assert run(client, "nvidia-smi --query-compute-apps=pid --format=csv,noheader")[1].strip() == ""
        finally:
            with ssh(r) as client:
                run(client, f"sudo rm /etc/m2p-standin/miner.json; sudo kill {pid}")
        per_card_hand_over(r, api)
    except AssertionError as exc:
        raise with_the_agents_account(exc, r, api) from None
    finally:
        api.close()


def per_card_hand_over(r, api) -> None:
    """HiveOS starts its miner with its caller's environment (screen keeps it): a 1-GPU lease stops mining on its
    card only.  The lease's container is given /dev/nvidia1 (its bundle's spec); the agent maps the minor to the
    card through the driver's /proc/driver/nvidia/gpus (the sandbox's STAND-IN), and `miner start` runs the miner
    with CUDA_VISIBLE_DEVICES naming the other card; `hello` restarting it on both cards is undone at once (the
    second time, the rig hands over whole until the lease ends).  Then both cards mine again."""
    with ssh(r) as client:
        uuids = run(client, "nvidia-smi --query-gpu=uuid --format=csv,noheader")[1].split()

    def mining_on() -> set[str]:
        with ssh(r) as client:
            rows = run(client, "sudo nvidia-smi --query-compute-apps=pid,gpu_uuid --format=csv,noheader")[1]
        return {row.split(", ")[1] for row in rows.splitlines() if ", " in row}

    def hand_over() -> str:
        return json.loads(api.nodes[r.name]["metadata"]["annotations"]["m2p.io/status"])["hand_over"]
    wait_for("idle mining on both cards", lambda: mining_on() == set(uuids) and hand_over() == "per card")
    api.add_pod("lease-4", r.name, 1)
    code, out, pid = through_the_gate(r, "lease/lease-4", cards=(1,))
    try:
        assert code == 0, out
        wait_for("the miner on the card no lease holds", lambda: mining_on() == {uuids[0]}, timeout=30)
        assert api.nodes[r.name]["metadata"]["labels"]["m2p.io/mode"] == "leasing"
        # Only the lease's card was reset (by UUID); the other mines on beside it on the owner's tuning.  The miner
        # beside the lease keeps HiveOS's watchdog armed (/run/hive/MINER_RUN): held all the same.
        log = gpu_log(r)
        assert f"nvidia-smi -i {uuids[1]} -rgc" in log and f"nvidia-smi -i {uuids[0]} -rgc" not in log, log[-12:]
        assert watchdog(r) == ("inactive", "masked-runtime")
        # A dashboard OC push: HiveOS's nvidia-oc tunes every card, the leased one too; the agent finds the leased
        # card off its defaults within its 10 s recheck and puts it back; the mining card keeps the owner's 240 W.
        with ssh(r) as client:
            assert run(client, f"sudo sh -c '{HIVE_ENV} /hive/sbin/nvidia-oc' < /dev/null")[0] == 0
        wait_for("the leased card back on its default power limit", lambda: limits(r) == ["240.00", "350.00"],
                 timeout=30)
        # The OS starting a miner on every card: stopped at once and started on the free card again; the second time
        # the agent saw it, the rig hands over whole until the lease ends.  (Modelled by a miner started outside the
        # screen: HiveOS's own `hello restartminer`, tested above, stops the miner and starts it 1 s later, a race
        # the agent may win with min_switch_interval 0s, starting it on its card first.)
        for _ in range(3):
            if hand_over() == "whole rig":
                break
            with ssh(r) as client:
                run(client, f"sudo sh -c '{HIVE_ENV} setsid -f /hive/bin/standin-miner custom > /dev/null 2>&1'")
            wait_for("a miner on the leased card", lambda: uuids[1] in mining_on(), timeout=15)
            wait_for("the agent to stop it", lambda: uuids[1] not in mining_on(), timeout=90)
            wait_for("the miner on its card, or the whole rig handed over",
                     lambda: hand_over() == "whole rig" or mining_on() == {uuids[0]}, timeout=60)
        wait_for("whole-rig hand-over said", lambda: hand_over() == "whole rig", timeout=10)
        wait_for("no miner on any card", lambda: not mining_on(), timeout=60)
    finally:
        with ssh(r) as client:
            run(client, f"sudo kill {pid}")
        api.delete_pod("lease-4")
    wait_for("both cards mining again", lambda: mining_on() == set(uuids) and hand_over() == "per card", timeout=60)
    assert limits(r) == ["240.00", "240.00"]  # the owner's tuning (nvidia-oc.conf) on both cards again
    wait_for("the watchdog given back", lambda: given_back(watchdog(r)), timeout=15)
    assert reboots(r) == ""


def test_lease_guard_convert_revert_and_apply_leave_a_leased_rig_alone_until_drained(boot_rigs, tmp_path, monkeypatch):
    """A lease on the rig's node (a pod in a tenant namespace, seen by the agent and reported in its
    status): convert, schedule apply and revert refuse the rig with one sentence; --drain cordons
    the node (the agent does), waits for the lease to end, goes on; a drain that times out touches
    nothing and uncordons."""
    (r,) = boot_rigs(sandbox.RigSpec("lg-hive", "hiveos", ("rtx3060",)))
    api = KubeApiStandin(host=str(network.gateway()))
    monkeypatch.setenv("AG_HIVE_AGENT_TOKEN", (token := secrets.token_urlsafe(24)))
    api.add_node(r.name, token)
    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    # A strict lease window (no idle mining): the agent holds HiveOS's watchdog from the start and until revert,
    # which gives it back as it was (running: hive's boot started it, WD_ENABLED=1).
    schedule = "timezone: UTC\npolicy: fixed\ndefault: lease\nmin_switch_interval: 0s\n"
    try:
        code, outcomes = apply(r, tmp_path, api, schedule)
        assert code == 0 and outcomes[0]["result"] == "changed", outcomes
        wait_for("the watchdog held", lambda: watchdog(r) == ("inactive", "masked-runtime"), timeout=30)
        api.add_pod("job-abc", r.name, 1, namespace="tenant-ns")
        wait_for("the agent to report the lease", lambda: '"tenant-ns/job-abc"' in agent_status(r), timeout=30)
        common = ["-i", str(tmp_path / "rigs.yml"), "--known-hosts", str(tmp_path / "known_hosts"), "--yes", "--json"]
        refused = "lg-hive: 1 lease running (pod tenant-ns/job-abc, "
        for command in (["convert", "--bundle", str(bundle)], ["revert"]):
            proc = m2p(*command, *common)
            result = conftest_outcomes(proc)[r.name]
            assert proc.returncode == 11 and result["result"] == "failed", proc.stdout + proc.stderr
            assert result["message"].startswith(refused) and result["message"].endswith(
                "not touched; use --drain to wait for it"), result
        code, outcomes = apply(r, tmp_path, api, schedule.replace("0s", "1m"))
        assert code == 11 and outcomes[0]["message"].startswith(refused), outcomes
        with ssh(r) as client:  # nothing was touched: the old schedule, k3s never installed
            assert "min_switch_interval: 0s" in run(client, "sudo cat /etc/m2p/schedule.yml")[1]
            assert run(client, "test -e /usr/local/bin/k3s")[0] == 1

        # A drain that runs out of time: refused as before, and the node is schedulable again.
        proc = m2p("convert", "--bundle", str(bundle), *common, "--drain", "--drain-timeout", "8s")
        result = conftest_outcomes(proc)[r.name]
        assert result["message"].startswith("lg-hive: 1 lease still running after 8 s of --drain"), result
        wait_for("the agent to uncordon", lambda: not api.nodes[r.name].get("spec", {}).get("unschedulable"))

        # A drain that sees the lease end: revert waits, then goes on; the miner runs afterwards.
        def end_lease_once_cordoned() -> None:
            wait_for("the agent to cordon the node", lambda: api.nodes[r.name].get("spec", {}).get("unschedulable"),
                     timeout=60)
            api.delete_pod("job-abc", "tenant-ns")
        ender = threading.Thread(target=end_lease_once_cordoned)
        ender.start()
        proc = m2p("revert", *common, "--drain", "--drain-timeout", "2m")
        ender.join()
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert conftest_outcomes(proc)[r.name]["result"] == "changed"
        assert miner_running(r)  # started by revert with HiveOS's environment
        assert given_back(watchdog(r)) and reboots(r) == ""
        with ssh(r) as client:
            assert run(client, "test -e /var/lib/m2p || test -e /etc/m2p")[0] == 1
    finally:
        api.close()


def agent_status(r) -> str:
    with ssh(r) as client:
        return run(client, "cat /var/lib/m2p/agent/status.json")[1]


def test_mining_oses_without_an_adapter_are_named_and_get_no_time_share(boot_rigs, tmp_path, monkeypatch):
    """Issue 15: detect names RaveOS, NiceHash OS and ethOS on their layouts; a RaveOS rig (no miner adapter)
    is no plain rig: plan says it gets k3s without time-share, and `schedule apply` refuses it with a
    sentence naming the OS; NiceHash OS and ethOS are refused with their reasons."""
    r, nhos, ethos = boot_rigs(sandbox.RigSpec("rave1", "raveos", ("rtx3060",)), sandbox.RigSpec("nh1", "nhos"),
                               sandbox.RigSpec("eth1", "ethos"))
    api = KubeApiStandin(host=str(network.gateway()))
    monkeypatch.setenv("AG_HIVE_AGENT_TOKEN", secrets.token_urlsafe(24))
    try:
        code, results = apply(r, tmp_path, api, "timezone: UTC\npolicy: lease-first\n")
        (result,) = results
        assert code == 11 and result["result"] == "failed", results
        assert "RaveOS has no miner adapter in m2p yet" in result["message"], result
        assert "convert works on it: k3s without time-share" in result["message"]
        with ssh(r) as client:
            assert run(client, "test -e /etc/systemd/system/m2p-agent.service")[0] != 0  # nothing installed
        inv = tmp_path / "all.yml"
        inv.write_text(yaml.safe_dump({"all": {"hosts": {x.name: rig_entry(x) for x in (r, nhos, ethos)}}}))
        ssh_args = ["--known-hosts", str(tmp_path / "known_hosts"), "--accept-new"]
        detected = m2p("detect", "-i", str(inv), *ssh_args, "--json")
        reports = {x["name"]: x for x in json.loads(detected.stdout)}
        assert reports["rave1"]["facts"]["mining_os"]["kind"] == "raveos"
        assert reports["rave1"]["facts"]["mining_os"]["miner_control"] == "none"
        assert any(w["code"] == "no-miner-adapter" for w in reports["rave1"]["verdict"]["warnings"])
        assert "nhos-in-ram" in [b["code"] for b in reports["nh1"]["verdict"]["blockers"]], reports["nh1"]
        assert reports["eth1"]["facts"]["mining_os"] | {"markers": []} == {
            "kind": "ethos", "version": "1.3.3", "markers": [], "label": "ethOS", "miner_control": "none"}
        assert "ethos-eol" in [b["code"] for b in reports["eth1"]["verdict"]["blockers"]]
        bundle = tmp_path / "bundle"
        build_test_bundle(bundle)
        planned = conftest_outcomes(m2p("plan", "-i", str(tmp_path / "rigs.yml"), "--known-hosts",
                                        str(tmp_path / "known_hosts"), "--bundle", str(bundle), "--json",
                                        env={"AG_HIVE_AGENT_TOKEN": "x"}))
        assert planned["rave1"]["result"] == "pending", planned
        assert planned["rave1"]["message"].endswith("RaveOS: no miner adapter, k3s without time-share"), planned
    finally:
        api.close()


# The mining OSes with an adapter besides HiveOS (whose own test is above; issue 15): how the test sees
# the miner run, how the OS itself starts it again behind the agent's back while a lease runs, and how
# sure m2p is of its miner control.
ADAPTED = {
    # msOS: minerstat.service starts the miner at boot.
    "msos": ("sudo screen -ls minew", "reboot", "verified"),
    # mmpOS: its agent restarts the miner; a dashboard "enable" (or the owner) runs agent-start.
    "mmpos": ("pgrep -f '^python3 /opt/mmp/miners/'", "sudo /opt/mmp/bin/agent-start", "generic (unverified)"),
    # SMOS: a reboot clears /tmp (and with it the pause); its boot runs start.sh.
    "smos": ("sudo runuser -u miner -- screen -ls miner", "reboot", "generic (unverified)"),
    # Issue 38: plain Linux with the owner's hand-run miner (a respawn wrapper), adopted into m2p-miner.service;
    # the owner (or anything) starts the unit again during the lease.
    # (Its process, not the unit's state: a unit stopping says inactive while the miner still lets its cards go.)
    "adopted": ("pgrep -f '[s]tandin-cuda --name t-rex'",
                "sudo systemctl start m2p-miner.service", "the owner's systemd unit (mining_os_miner_unit), if any"),
}
WALLET = "w-0xSECRETWALLET42"  # in the owner's miner's environment
POOL_PASS = "pool-pass-SECRET17"  # on its command line
# The miner serves T-Rex's HTTP API (standin-trex-api, 58 MH/s per card), as T-Rex does by default.
OWNERS_WRAPPER = ("#!/bin/sh\n# The owner's own respawn loop: the miner again two seconds after it ends.\nwhile true; do\n"
                  "  /usr/bin/python3 /usr/lib/m2p-standin/standin-cuda --name t-rex --pool stratum+tcp://pool.invalid:4444"
                  f" --pass {POOL_PASS} --serve 'python3 /usr/lib/m2p-standin/standin-trex-api'\n  sleep 2\ndone\n")
MINER_SETTINGS = "merged/etc/m2p-standin/miner.json"  # the stand-in miner's, and its API's per-card hashrate


def gpu_holders(client) -> list[tuple[int, str]]:
    """(pid, its systemd unit) of each process the stand-in nvidia-smi lists as holding a GPU."""
    out = run(client, "for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do "
                      "echo \"$p $(sed -n 's#.*/##p' /proc/$p/cgroup | tail -n 1)\"; done")[1]
    return [(int(line.split()[0]), (line.split() + [""])[1]) for line in out.splitlines() if line.strip()]


def adopt_the_owners_miner(r, tmp_path) -> tuple[dict[str, str], list[str]]:
    """Issue 38: a plain rig whose miner the owner runs from a respawn loop (nohup from a login).  Refused without
    the owner's --pid (an unknown GPU process: the stand-in reads as python3), then adopted into m2p-miner.service
    with the same program, arguments, folder and environment, captured root-only and never shown.  Returns the
    settings that time-share it and what m2p printed."""
    wrapper = r.path / "merged/opt/owner/keep-mining.sh"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(OWNERS_WRAPPER)
    wrapper.chmod(0o755)
    with ssh(r) as client:
        assert run(client, f"sudo sh -c 'cd /opt/owner && MINER_WALLET={WALLET} nohup ./keep-mining.sh </dev/null "
                           ">/dev/null 2>&1 &'")[0] == 0
        (pid, _), = wait_for("the owner's miner", lambda: gpu_holders(client))
    inv = tmp_path / "adopt.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {r.name: rig_entry(r, m2p_trex_api_port=4067)}}}))
    common = ["-i", str(inv), "--accept-new", "--known-hosts", str(tmp_path / "known_hosts"), "--yes"]
    seen = m2p("detect", *common[:-1])  # named, with what keeps it running, and never touched
    assert f"unknown GPU process python3.11 (pid {pid}, 1 GPU; wrapper keep-mining.sh)" in seen.stdout, seen.stdout
    blind = m2p("miner", "adopt", r.name, *common)
    assert blind.returncode == 2 and "never touches an unknown GPU process unless you name it" in blind.stderr

    # The miner comes back slower in m2p's unit (its API says 20 MH/s from the moment the unit is written, 58 before
    # the stop): the adoption is rolled back and the owner's wrapper runs it again, as before.
    settings = r.path / MINER_SETTINGS
    owners = settings.read_text() if settings.exists() else None
    slower = subprocess.Popen([*M2P, "miner", "adopt", r.name, "--pid", str(pid), "--hashrate-window", "8", *common,
                               "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for("m2p's unit written", (r.path / "merged/etc/systemd/system/m2p-miner.service").exists)
        settings.write_text(json.dumps({**json.loads(owners or "{}"), "trex_mhs": 20.0}))
        slow_out, slow_err = slower.communicate(timeout=300)
    finally:
        if slower.poll() is None:
            slower.kill()
        if owners is None:
            settings.unlink(missing_ok=True)
        else:
            settings.write_text(owners)
    assert slower.returncode == 11, slow_out[-2000:] + slow_err[-2000:]
    assert conftest_outcomes(subprocess.CompletedProcess([], 11, slow_out, slow_err))[r.name]["message"] == (
        "not adopted (in m2p-miner.service it reached 20.0 MH/s in 8 s, against 58.0 MH/s before); it runs as it "
        "did before"), slow_out
    with ssh(r) as client:
        (pid, unit), = wait_for("the miner under its wrapper again", lambda: [
            h for h in gpu_holders(client) if h[1] != "m2p-miner.service"])
        assert run(client, "pgrep -x keep-mining.sh")[0] == 0 and run(client, "sudo test -e /etc/m2p")[0] == 1

    adopted = m2p("miner", "adopt", r.name, "--pid", str(pid), *common)
    assert adopted.returncode == 0, adopted.stdout[-2000:] + adopted.stderr[-2000:]
    assert "adopted: it runs in m2p-miner.service as it ran before, at 58.0 MH/s (58.0 before)" in adopted.stdout
    with ssh(r) as client:
        (pid, _), = wait_for("the miner in m2p's unit", lambda: [h for h in gpu_holders(client)
                                                                if h[1] == "m2p-miner.service"])
    again = m2p("miner", "adopt", r.name, "--pid", str(pid), *common, "--json")
    assert conftest_outcomes(again)[r.name]["result"] == "converged", again.stdout
    with ssh(r) as client:
        out = run(client, f"tr '\\0' ' ' < /proc/{pid}/cmdline; echo; sudo cat /proc/{pid}/environ | tr '\\0' "
                          "'\\n' | grep ^MINER_WALLET=; pgrep -x keep-mining.sh | wc -l; sudo stat -c '%a %U' "
                          "/etc/m2p/miner /etc/m2p/miner/adopted.json /etc/m2p/miner/run; "
                          "cat /etc/systemd/system/m2p-miner.service")[1]
        lines = out.splitlines()
        assert lines[0].split() == ["/usr/bin/python3", "/usr/lib/m2p-standin/standin-cuda", "--name", "t-rex", "--pool",
                                    "stratum+tcp://pool.invalid:4444", "--pass", POOL_PASS, "--serve", "python3",
                                    "/usr/lib/m2p-standin/standin-trex-api"], out
        assert lines[1:6] == [f"MINER_WALLET={WALLET}", "0", "700 root", "600 root", "700 root"], out
        assert POOL_PASS not in out.split("[Unit]")[1] and WALLET not in out.split("[Unit]")[1]  # the unit: 0644
        record = json.loads(run(client, "sudo cat /etc/m2p/miner/adopted.json")[1])
        assert record["supervisor"] == "wrapper" and record["top"]["argv"][-1] == "./keep-mining.sh", record["top"]
        assert len(record["sha256"]) == 64 and record["cwd"] == "/opt/owner"
    return {"m2p_miner_unit": "m2p-miner.service"}, [slow_out, slow_err,
                                                     *(p.stdout + p.stderr for p in (seen, blind, adopted, again))]


def release_the_owners_miner(r, tmp_path, said: list[str]) -> None:
    """`m2p miner release`: the unit goes and the owner's wrapper runs the miner again, as it did; a second
    release changes nothing; no secret in anything m2p printed."""
    common = ["-i", str(tmp_path / "adopt.yml"), "--known-hosts", str(tmp_path / "known_hosts"), "--yes", "--json"]
    released = m2p("miner", "release", r.name, *common)
    assert released.returncode == 0 and conftest_outcomes(released)[r.name]["result"] == "changed", released.stdout
    with ssh(r) as client:
        (back, _), = wait_for("the miner under its wrapper again", lambda: [
            h for h in gpu_holders(client) if h[1] != "m2p-miner.service"])
        out = run(client, f"ps -o comm= -p $(ps -o ppid= -p {back}); sudo cat /proc/{back}/environ | tr '\\0' "
                          "'\\n' | grep ^MINER_WALLET=; sudo ls /etc/m2p /etc/systemd/system/m2p-miner.service 2>&1")[1]
        assert out.splitlines()[:2] == ["keep-mining.sh", f"MINER_WALLET={WALLET}"], out
        assert "'/etc/m2p': No such file" in out and "m2p-miner.service': No such file" in out, out
    again = m2p("miner", "release", r.name, *common)
    assert conftest_outcomes(again)[r.name]["result"] == "converged", again.stdout
    printed = "".join([*said, released.stdout, released.stderr, again.stdout])
    assert POOL_PASS not in printed and WALLET not in printed


@pytest.mark.parametrize("flavour", sorted(ADAPTED))
def test_every_adapted_mining_os_hands_the_gpus_to_a_lease_and_takes_them_back(flavour, boot_rigs, tmp_path,
                                                                               monkeypatch):
    """The lease hand-over on msOS, mmpOS and SMOS layouts: the real stand-in miner stopped (the OS's own
    command or hold, then for a generic adapter m2p's TERM/KILL), no process on the GPUs, the cards on their
    defaults; the OS's own restart during the lease undone; the lease ends and the miner runs again (the
    OS's clocks re-applied first where it has a command for it); the OS's config byte-identical after the
    lease and after revert."""
    running_cmd, restart, control = ADAPTED[flavour]
    layout = "plain" if flavour == "adopted" else flavour
    (r,) = boot_rigs(sandbox.RigSpec(f"gen-{flavour}", layout, ("rtx3060",)))
    api = KubeApiStandin(host=str(network.gateway()))
    monkeypatch.setenv("AG_HIVE_AGENT_TOKEN", (token := secrets.token_urlsafe(24)))
    api.add_node(r.name, token, gpus=1)
    pristine = flavours.pristine_config(layout)

    def mining() -> bool:
        with ssh(r) as client:
            return run(client, running_cmd)[0] == 0

    def config_changed() -> list[str]:
        with ssh(r) as client:
            return [path for path, sha in pristine.items()
                    if run(client, f"sudo sha256sum {path}")[1].split()[:1] != [sha]]

    try:
        adopted, said = adopt_the_owners_miner(r, tmp_path) if flavour == "adopted" else ({}, [])
        assert wait_for("the OS to start its miner", mining)
        # msOS's stand-in miner serves T-Rex's HTTP API (standin-trex-api): the owner names its port.
        # So does the adopted T-Rex (the owner's miner serves it, as T-Rex does by default).
        trex = {"m2p_trex_api_port": 4067} if flavour in ("msos", "adopted") else {}
        code, outcomes = apply(r, tmp_path, api, "timezone: UTC\npolicy: lease-first\nmin_switch_interval: 0s\n",
                               settings={**trex, **adopted})
        assert code == 0 and outcomes[0]["result"] == "changed", outcomes
        if trex:  # the agent averaged T-Rex's per-GPU figures
            measured = wait_for("T-Rex's figures in the agent's status",
                                lambda: json.loads(agent_status(r) or "{}").get("measured"))
            assert (measured["algo"], measured["mhs"], measured["watts"]) == ("kawpow", [58.0], [170.0]), measured
        detected = m2p("detect", "-i", str(tmp_path / "rigs.yml"), "--known-hosts", str(tmp_path / "known_hosts"),
                       "--json", env={"AG_HIVE_AGENT_TOKEN": "x"})
        (report,) = json.loads(detected.stdout)
        assert report["facts"]["mining_os"]["kind"] == {"adopted": "debian"}.get(flavour, flavour), report
        assert report["facts"]["miner"]["running"] or flavour == "adopted", report  # not a process m2p names
        assert report["facts"]["mining_os"]["miner_control"] == control
        wait_for("idle mining", lambda: api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode") == "idle-mining")
        # Per card where the miner can be started on some cards: m2p's own unit (the adopted miner) reads the
        # agent's cards file; these OSes' start paths are not read for that yet.
        hand_over = json.loads(agent_status(r) or "{}").get("hand_over")
        assert hand_over == ("per card" if flavour == "adopted" else "whole rig"), hand_over

        code, out, container_pid = through_the_gate(r, "lease/lease-1")
        assert code == 0, out
        assert not mining()
        with ssh(r) as client:
            assert run(client, "nvidia-smi --query-compute-apps=pid --format=csv,noheader")[1].strip() == ""
        assert since_the_miner(gpu_log(r)) == [*RESET, "nvidia-smi -i 0 -pl 170.00"]  # defaults before the lease
        api.add_pod("lease-1", r.name, 1)
        wait_for("leasing", lambda: api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode") == "leasing")

        # The OS starts its miner again behind the agent's back: the agent stops it again.
        with ssh(r) as client:
            if restart == "reboot":
                client.exec_command("sudo systemctl reboot")
            else:
                run(client, restart)
        if restart == "reboot":
            time.sleep(1)
            sandbox.wait_ssh(r, timeout=60)
        wait_for("the agent to stop the miner the OS started", lambda: not mining(), timeout=30)
        with ssh(r) as client:
            assert run(client, "nvidia-smi --query-compute-apps=pid --format=csv,noheader")[1].strip() == ""
        assert config_changed() == []
        if flavour == "adopted":  # issue 38: at the third restart during leases, the rig leaves the market
            for _ in range(2):
                with ssh(r) as client:
                    run(client, restart)
                wait_for("the agent to stop the miner once more", lambda: not mining(), timeout=30)
            wait_for("the sentence in the agent's status", lambda: "another supervisor restarts the miner (3 times "
                     "during leases)" in json.loads(agent_status(r) or "{}").get("last_error", ""))
            wait_for("the node off the market", lambda: api.nodes[r.name].get("spec", {}).get("unschedulable"))

        api.delete_pod("lease-1")
        if restart != "reboot":  # its container ends with it (a reboot ended it already: its PID may be another's)
            with ssh(r) as client:
                run(client, f"sudo kill {container_pid}")
        again = "mining" if flavour == "adopted" else "idle-mining"  # off the market after the strikes: mining
        wait_for(f"{again} again", lambda: api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode") == again)
        assert wait_for("the miner started again", mining)
        # SMOS's own reloadOc.sh and msOS's overclock.sh (its mclock) put their clocks back before the miner
        # attached; mmpOS has no such command (its log ends with the miner the OS brought back during the
        # lease, then the one after it).
        tail = {"smos": ["nvidia-smi -i 0 -pl 130", "miner attached"],
                "msos": ["nvidia-smi -i 0 -pl 170", "miner attached"]}.get(flavour, ["miner attached", "miner attached"])
        # (The miner shows running before its stand-in has taken its cards and said so: wait for it; 45 s, as a
        # loaded CI machine once took over 15 s here.)
        wait_for(f"the cards' log to end {tail}", lambda: gpu_log(r)[-2:] == tail, timeout=45)

        proc = m2p("revert", "-i", str(tmp_path / "rigs.yml"), "--known-hosts", str(tmp_path / "known_hosts"),
                   "--yes", "--json")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert wait_for("the miner running after revert", mining)
        assert config_changed() == []
        if flavour == "adopted":  # the adoption is the owner's to undo, not revert's
            release_the_owners_miner(r, tmp_path, said)
        with ssh(r) as client:
            assert run(client, "test -e /var/lib/m2p || test -e /etc/m2p")[0] == 1
    except AssertionError as exc:
        raise with_the_agents_account(exc, r) from None
    finally:
        api.close()


def test_policy_profit_follows_the_economics_file_as_it_changes_and_never_cuts_a_lease(boot_rigs, tmp_path,
                                                                                       monkeypatch):
    """Issue 17: policy profit on a HiveOS rig.  The economics file changes mid-run (`schedule apply
    --economics` again: the role copies it, the running agent reads it on its next tick); the rig is
    offered only while a lease pays more than mining, and a lease running when mining pays more again
    is not cut: the rig drains.  The node's model labels (Akash's and m2p's own, which the agent reads) are those convert's gpu_attributes role
    writes (the rig is not converted here: the API is the stand-in)."""
    (r,) = boot_rigs(sandbox.RigSpec("ag-profit", "hiveos", ("rtx3090", "rtx3090"), ("3.8",)))
    api = KubeApiStandin(host=str(network.gateway()))
    token = secrets.token_urlsafe(24)
    monkeypatch.setenv("AG_HIVE_AGENT_TOKEN", token)
    api.add_node(r.name, token, {"akash.network/capabilities.gpu.vendor.nvidia.model.rtx3090": "2",
                                 "m2p.io/gpu.model.rtx3090": "2"}, gpus=2)
    profit = "timezone: UTC\npolicy: profit\nmin_switch_interval: 0s\nhysteresis: 0.05\n"
    figures = tmp_path / "economics.yml"

    def prices(lease: float) -> str:
        # Measured (HiveOS's last_stat.json, written by the sandbox's stand-in miner): 58 MH/s kawpow at
        # 240 W per card; 58 x 0.05 = 2.90 a day = 0.1208/h, power 0.048/h: floor 0.1208 per GPU, 0.2417
        # for the rig (the per-GPU figure alone would give 0.20).
        figures.write_text(f"lease_price_per_gpu_hour: {{rtx3090: {lease}}}\nmining_revenue_per_gpu_day: "
                           "{rtx3090: 2.40}\ngpu_power_watts: {default: 250}\npower_price_per_kwh: 0.20\n"
                           "mining_revenue_per_mhs_day: {kawpow: 0.05}\n")
        return str(figures)

    def mode() -> str:
        return str(api.nodes[r.name]["metadata"]["labels"].get("m2p.io/mode"))

    def said() -> dict:
        return json.loads(api.nodes[r.name]["metadata"]["annotations"].get("m2p.io/status", "{}"))

    def cordoned() -> bool:
        return bool(api.nodes[r.name]["spec"].get("unschedulable"))

    try:
        assert wait_for("hive.service to start the miner", lambda: miner_running(r))
        code, refused = apply(r, tmp_path, api, profit)  # no economics file: refused before any rig changes
        assert code == 7 and "policy profit, which needs an economics file" in refused["error"], refused
        code, outcomes = apply(r, tmp_path, api, profit, "--economics", prices(0.08))
        assert code == 0 and outcomes[0]["result"] == "changed", outcomes
        wait_for("the agent's quote from the measured hashrate",
                 lambda: said().get("profit", {}).get("source") == "measured kawpow hashrate of 2 GPUs")
        assert said()["profit"] == {"lease_pays": False, "lease_per_hour": 0.16, "floor_per_hour": 0.2417,
                                    "source": "measured kawpow hashrate of 2 GPUs"}
        assert {k: said()["measured"][k] for k in ("algo", "mhs", "watts")} == {
            "algo": "kawpow", "mhs": [58.0, 58.0], "watts": [240.0, 240.0]}
        assert "1q2w3e4r" not in json.dumps(api.nodes[r.name]) + agent_status(r)  # the rig's password stays
        assert mode() == "mining" and cordoned() and miner_running(r)

        code, outcomes = apply(r, tmp_path, api, profit, "--economics", prices(0.12))  # 0.24 < 0.2417 x 1.05
        assert code == 0 and outcomes[0]["result"] == "changed", outcomes
        time.sleep(3)  # a tick or more: still mining
        assert mode() == "mining" and said()["profit"]["lease_pays"] is False
        code, outcomes = apply(r, tmp_path, api, profit, "--economics", prices(0.15))  # 0.30 >= 0.2417 x 1.05
        assert code == 0 and outcomes[0]["result"] == "changed", outcomes
        wait_for("offered at the new price", lambda: mode() == "idle-mining" and not cordoned())
        assert said()["profit"]["lease_pays"] is True and miner_running(r)
        assert api.akash_view(r.name)["gpus_available"] == 2

        code, out, pid = through_the_gate(r, "lease/lease-1")
        assert code == 0, out
        api.add_pod("lease-1", r.name, 2)
        # The agent names the lease in its status (read from the API a tick after the gate's grant).
        wait_for("the lease in the agent's status", lambda: mode() == "leasing" and said()["leases"])
        code, outcomes = apply(r, tmp_path, api, profit, "--economics", prices(0.05))  # mining pays more again
        assert code == 11 and outcomes[0]["message"].startswith("ag-profit: 1 lease running"), outcomes
        # The lease guard refuses any apply on a leased rig: the owner writes the rig's copy instead.
        with ssh(r) as client:
            run(client, f"printf '%s' '{figures.read_text()}' | sudo tee /etc/m2p/economics.yml > /dev/null")
        wait_for("draining: no new lease, the running one goes on", lambda: mode() == "draining" and cordoned())
        assert not miner_running(r) and said()["profit"]["lease_pays"] is False

        api.delete_pod("lease-1")
        tenant.container_ends(r, pid)
        wait_for("mining again once the lease ended", lambda: mode() == "mining")
        assert wait_for("the miner started again", lambda: miner_running(r))
    except AssertionError as exc:
        raise with_the_agents_account(exc, r, api) from None
    finally:
        api.close()


def test_a_lease_with_a_window_is_reclaimed_in_time_and_the_miner_runs_when_the_mining_window_starts(
        boot_rigs, tmp_path, monkeypatch):
    """Issue 36 end to end, on a HiveOS rig with a fixed schedule: a mining window a few minutes ahead, a
    reclamation window W of 60 s (the STAND-IN chain's governance bound, as a devnet may set it).  The agent
    leaves the market W plus its lead before the window; the farm's reclaimer (market/akash/reclaimer.py, the
    code the server's unit runs, here beside the test: provider_flow tests the installed unit) reads the
    agent's ``mine_at`` from the node, reclaims the lease through the stand-in provider pod, and closes it at
    its deadline; the lease's pod goes (the provider's teardown, standing in) and the miner runs by the
    window's start.  A second lease, won without a window, cannot be reclaimed: with the owner's opt-in
    (close_leases_without_window) it is closed when mining is due, not before.  (Without the opt-in it is left
    to finish: tests/unit/test_reclaimer.py.)"""
    from datetime import UTC, datetime, timedelta

    from m2p_sandbox.akash_chain import ChainStandin, ProviderPod
    from miner2provider.market.akash.reclaimer import Config as ReclaimerConfig
    from miner2provider.market.akash.reclaimer import KubectlExec, Reclaimer
    from miner2provider.rigside.kube import KubeClient

    (r,) = boot_rigs(sandbox.RigSpec("ag-reclaim", "hiveos", ("rtx3090", "rtx3090"), ("3.8",)))
    api = KubeApiStandin(host=str(network.gateway()))
    token = secrets.token_urlsafe(24)
    monkeypatch.setenv("AG_HIVE_AGENT_TOKEN", token)
    api.add_node(r.name, token, {"m2p.io/gpu.model.rtx3090": "2"}, gpus=2)
    provider, tenant_address = "akash1" + "q" * 38, "akash1" + "p" * 38
    chain = ChainStandin(min_window_s=60.0)
    pod = ProviderPod(chain, provider, "-----BEGIN TENDERMINT PRIVATE KEY-----\nSANDBOXKEY\n-----END")
    api.exec_in[("akash-services", "akash-provider-0", "provider")] = pod.run
    (tmp_path / "reclaimer-token").write_text(secrets.token_urlsafe(24))
    api.add_reclaimer((tmp_path / "reclaimer-token").read_text())
    (tmp_path / "kubeconfig").write_text(api.token_kubeconfig(str(tmp_path / "reclaimer-token")))
    (tmp_path / "reclaimer").mkdir()
    k3s = Path(__file__).parents[2] / "sandbox/m2p_sandbox/bundle_files/k3s"  # its stand-in kubectl exec
    config = ReclaimerConfig(kubeconfig=str(tmp_path / "kubeconfig"), kubectl=(sys.executable, str(k3s), "kubectl"),
                             state_dir=str(tmp_path / "reclaimer"), interval_s=5.0, margin_s=20.0,
                             close_without_window=True)
    reclaimer = Reclaimer(config, KubeClient("", None, kubeconfig=config.kubeconfig), KubectlExec(config))
    stop = threading.Event()

    def sweeping() -> None:
        while not stop.wait(config.interval_s):
            reclaimer.sweep()

    # The mining window: a whole minute at least W (60 s) + the reclaimer's lead (25 s) + a minute and a half
    # for the schedule and the lease to land ahead (the agent may have left the market by then: a lease bound
    # before the cordon still gets the GPUs through the gate).
    start = (datetime.now(UTC) + timedelta(minutes=4)).replace(second=0, microsecond=0)
    schedule = ("timezone: UTC\npolicy: fixed\ndefault: lease\nmin_switch_interval: 0s\nlease_grace: forever\n"
                f"reclamation_window: 1m\nwindows:\n  - {{days: daily, from: '{start:%H:%M}', "
                f"to: '{start + timedelta(hours=1):%H:%M}', mode: mine}}\n")
    label = "akash.network/lease.id."

    def lease_namespace(name: str, dseq: int) -> None:
        api.apply([{"kind": "Namespace", "metadata": {"name": name, "labels": {
            f"{label}owner": tenant_address, f"{label}dseq": str(dseq), f"{label}gseq": "1", f"{label}oseq": "1",
            f"{label}provider": provider}}}])

    thread = threading.Thread(target=sweeping, daemon=True)
    try:
        assert wait_for("hive.service to start the miner", lambda: miner_running(r))
        code, outcomes = apply(r, tmp_path, api, schedule)
        assert code == 0 and outcomes[0]["result"] == "changed", outcomes
        status = wait_for("the agent's status", lambda: json.loads(
            api.nodes[r.name]["metadata"]["annotations"].get("m2p.io/status", "{}")), timeout=60)
        assert status["mine_at"] == start.isoformat(timespec="seconds"), status
        pids = {}
        for namespace, dseq in (("lease-w", 77), ("lease-nw", 78)):
            lease_namespace(namespace, dseq)
            code, out, pids[namespace] = through_the_gate(r, f"{namespace}/web")
            assert code == 0, out
            api.add_pod("web", r.name, 1, namespace=namespace)
        lease = chain.create_lease(tenant_address, 77, provider, 60.0)
        windowless = chain.create_lease(tenant_address, 78, provider, None)
        thread.start()

        wait_for("the reclaim", lambda: lease.state == "reclaiming", timeout=(start - datetime.now(UTC)).total_seconds())
        reclaimed_at = time.time()
        assert api.nodes[r.name]["spec"].get("unschedulable") is True  # off the market before the reclaim
        assert reclaimed_at <= start.timestamp() - 60, "reclaimed later than W before the mining window"
        assert windowless.state == "active"  # mining is not due yet: the opted-in close waits for it
        wait_for("the close at the deadline", lambda: lease.state == "closed", timeout=120)
        wait_for("the windowless lease closed when mining is due", lambda: windowless.state == "closed", timeout=120)
        sent = next(tx for tx in chain.txs if "/78/" in tx["lease"])["block_time"] - 6  # a block after it was sent
        assert sent >= start.timestamp() - config.margin_s - config.interval_s - 1, "closed before mining was due"
        for namespace in pids:  # Akash's provider tears the closed leases down
            api.delete_pod("web", namespace=namespace)
            tenant.container_ends(r, pids[namespace])
        wait_for("the miner", lambda: miner_running(r), timeout=max(5.0, start.timestamp() - time.time() + 5))
        assert time.time() <= start.timestamp() + 5, "the miner started after the mining window began"
        assert chain.refused() == [], chain.txs
        assert sorted((tx["lease"].split("/")[1], tx["kind"]) for tx in chain.txs) == [
            ("77", "close"), ("77", "start-reclaim"), ("78", "close")]
        assert next(tx for tx in chain.txs if tx["kind"] == "close" and "/77/" in tx["lease"])["block_time"] \
            >= lease.deadline
        ledger = (tmp_path / "reclaimer" / "ledger.jsonl").read_text()
        assert ledger.count('"result": "accepted"') == 3 and "SANDBOXKEY" not in ledger
    except AssertionError as exc:
        raise with_the_agents_account(exc, r, api) from None
    finally:
        stop.set()
        api.close()
