"""The farm's reclaimer (market/akash/reclaimer.py) against the STAND-IN chain and provider pod
(sandbox/m2p_sandbox/akash_chain.py), reached as on a farm: the stand-in k3s's ``kubectl exec`` with the
reclaimer's own kubeconfig, through the STAND-IN API's RBAC (sandbox/m2p_sandbox/kube_api.py)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from m2p_sandbox.akash_chain import ChainLease, ChainStandin, ProviderPod
from m2p_sandbox.kube_api import KubeApiStandin
from miner2provider.market.akash import reclaim
from miner2provider.market.akash.reclaimer import Config, KubectlExec, Reclaimer, main
from miner2provider.rigside.kube import KubeClient

K3S = Path(__file__).resolve().parents[2] / "sandbox/m2p_sandbox/bundle_files/k3s"
PROVIDER = "akash1" + "q" * 38
TENANT = "akash1" + "p" * 38
KEY = "-----BEGIN TENDERMINT PRIVATE KEY-----\nkdf: bcrypt\n\nSECRETSECRETSECRET\n-----END TENDERMINT PRIVATE KEY-----\n"
T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


Farm = tuple[KubeApiStandin, ChainStandin, ProviderPod, Clock, Config]


@pytest.fixture
def farm(tmp_path: Path) -> Iterator[Farm]:
    """The API with two agents' nodes, the chain, the provider pod and the reclaimer's identity.  The API speaks
    TLS, as kube-apiserver (the reclaimer's kubeconfig names its CA), where a rig's kubelet can show its
    certificate (system:node:<rig>)."""
    api = KubeApiStandin()
    clock = Clock()
    chain = ChainStandin(min_window_s=60.0, clock=clock)  # a test chain's governance bound (a devnet's)
    pod = ProviderPod(chain, PROVIDER, KEY)
    api.exec_in[("akash-services", "akash-provider-0", "provider")] = pod.run
    for node in ("rig01", "rig02"):
        api.add_node(node, f"agent-{node}", {"m2p.io/mode": "leasing"}, gpus=2)
    (tmp_path / "token").write_text("reclaimer-token\n")
    api.add_reclaimer("reclaimer-token")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(api.token_kubeconfig(str(tmp_path / "token")))
    (tmp_path / "state").mkdir()
    config = Config(kubeconfig=str(kubeconfig), kubectl=(sys.executable, str(K3S), "kubectl"),
                    state_dir=str(tmp_path / "state"), margin_s=10.0)
    try:
        yield api, chain, pod, clock, config
    finally:
        api.close()


def reclaimer(config: Config, clock: Clock, **changes: Any) -> Reclaimer:
    from dataclasses import replace

    config = replace(config, **changes)
    return Reclaimer(config, KubeClient("", None, kubeconfig=config.kubeconfig), KubectlExec(config), clock=clock)


def must_mine(api: KubeApiStandin, node: str, at: float | None) -> None:
    """The node's agent says when it must mine (its status annotation, as agent/record.py writes it)."""
    from datetime import UTC, datetime

    text = None if at is None else datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
    api.nodes[node]["metadata"]["annotations"]["m2p.io/status"] = json.dumps({"mode": "leasing", "mine_at": text})


def lease_on(api: KubeApiStandin, chain: ChainStandin, dseq: int, nodes: tuple[str, ...],
             window_s: float | None) -> ChainLease:
    """A lease as Akash's provider deploys it: its namespace labelled with the lease id, a pod per node."""
    namespace = f"lease-{dseq}"
    api.apply([{"kind": "Namespace", "metadata": {"name": namespace, "labels": {
        "akash.network": "true", f"{reclaim.LABEL}owner": TENANT, f"{reclaim.LABEL}dseq": str(dseq),
        f"{reclaim.LABEL}gseq": "1", f"{reclaim.LABEL}oseq": "1", f"{reclaim.LABEL}provider": PROVIDER}}}])
    for n, node in enumerate(nodes):
        api.add_pod(f"web-{n}", node, 1, namespace=namespace)
    return chain.create_lease(TENANT, dseq, PROVIDER, window_s)


def test_a_lease_with_a_window_is_reclaimed_w_before_mining_and_closed_at_its_deadline_never_before(farm: Farm) -> None:
    api, chain, pod, clock, config = farm
    lease = lease_on(api, chain, 7, ("rig01",), window_s=600.0)
    mining = T0 + 3600
    must_mine(api, "rig01", mining)
    r = reclaimer(config, clock)
    status = r.sweep()
    assert [(s["action"], s["window_s"], s["state"]) for s in status["leases"]] == [("wait", 600.0, "active")]
    assert chain.txs == [] and len(pod.ran) == 1  # asked once; nothing due
    r.sweep()
    assert len(pod.ran) == 1  # the window is known: the chain is not asked again until something is due

    clock.now = mining - 600 - config.margin_s - config.interval_s  # W, the margin and one sweep before mining
    status = r.sweep()
    assert status["leases"][0]["action"] == "start-reclaim" and status["leases"][0]["error"] == ""
    assert lease.state == "reclaiming" and lease.deadline == int(clock.now + 6 + 600)  # dated from its block
    r.sweep()
    assert [tx["kind"] for tx in chain.txs] == ["start-reclaim"]  # sent once
    clock.now = lease.deadline - 1
    status = r.sweep()
    assert status["leases"][0]["action"] == "wait" and status["leases"][0]["deadline"] is not None
    assert [tx["kind"] for tx in chain.txs] == ["start-reclaim"]
    clock.now = lease.deadline - 6  # sent now, it lands at the deadline: the reclaimer still waits
    r.sweep()
    assert len(chain.txs) == 1
    clock.now = lease.deadline
    r.sweep()
    assert lease.state == "closed" and [tx["kind"] for tx in chain.txs] == ["start-reclaim", "close"]
    assert chain.refused() == [] and lease.deadline <= mining
    ledger = [json.loads(line) for line in (Path(config.state_dir) / "ledger.jsonl").read_text().splitlines()]
    assert [(e["sent"], e["result"]) for e in ledger] == [("start-reclaim", "accepted"), ("close", "accepted")]


def test_a_lease_without_a_window_is_left_unless_the_owner_opted_to_close_it(farm: Farm) -> None:
    api, chain, pod, clock, config = farm
    lease = lease_on(api, chain, 8, ("rig01",), window_s=None)
    must_mine(api, "rig01", T0)
    status = reclaimer(config, clock).sweep()
    assert status["leases"][0]["action"] == "leave" and "cannot be reclaimed" in status["leases"][0]["why"]
    assert chain.txs == [] and lease.state == "active"
    reclaimer(config, clock, close_without_window=True).sweep()
    assert lease.state == "closed" and chain.refused() == []


def test_nothing_is_sent_for_a_node_that_need_not_mine_or_a_lease_spanning_a_rig_that_need_not(farm: Farm) -> None:
    api, chain, pod, clock, config = farm
    alone = lease_on(api, chain, 9, ("rig02",), window_s=60.0)
    spanning = lease_on(api, chain, 10, ("rig01", "rig02"), window_s=60.0)
    must_mine(api, "rig01", T0)
    must_mine(api, "rig02", None)
    status = reclaimer(config, clock).sweep()
    by_dseq = {s["lease"].split("/")[1]: s for s in status["leases"]}
    assert by_dseq["9"]["action"] == "" and by_dseq["10"]["action"] == "hold"
    assert "also run on rig02" in by_dseq["10"]["why"] and chain.txs == []
    reclaimer(config, clock, reclaim_spanning=True).sweep()  # the owner's consent
    assert spanning.state == "reclaiming" and alone.state == "active"


def test_the_key_stays_in_the_provider_pod_and_the_reclaimer_may_exec_nowhere_else(farm: Farm, tmp_path: Path) -> None:
    api, chain, pod, clock, config = farm
    lease_on(api, chain, 11, ("rig01",), window_s=60.0)
    must_mine(api, "rig01", T0)
    reclaimer(config, clock).sweep()
    clock.now += 120
    reclaimer(config, clock).sweep()
    assert [tx["kind"] for tx in chain.txs] == ["start-reclaim", "close"] and chain.refused() == []
    seen = "".join(p.read_text() for p in Path(config.state_dir).iterdir()) + json.dumps(api.requests)
    assert "SECRETSECRET" not in seen and "PRIVATE KEY" not in seen
    other = subprocess.run([*config.kubectl, "--kubeconfig", config.kubeconfig, "exec", "-n", "kube-system",
                            "coredns-0", "--", "cat", "/etc/passwd"], capture_output=True, text=True)
    assert other.returncode == 1 and "Forbidden" in other.stderr and "pods/exec" in other.stderr
    client = KubeClient("", None, kubeconfig=config.kubeconfig)
    with pytest.raises(Exception, match="HTTP 403"):
        client.patch_node("rig01", {"spec": {"unschedulable": False}})  # it cannot uncordon a rig


def test_an_answer_m2p_does_not_understand_is_an_error_never_a_close(farm: Farm) -> None:
    api, chain, pod, clock, config = farm
    lease_on(api, chain, 12, ("rig01",), window_s=60.0)
    must_mine(api, "rig01", T0)
    api.exec_in[("akash-services", "akash-provider-0", "provider")] = lambda argv: (0, '{"lease": {"state": 4}}', "")
    status = reclaimer(config, clock).sweep()
    assert status["leases"][0]["error"].startswith("query: lease ") and chain.txs == []
    api.exec_in[("akash-services", "akash-provider-0", "provider")] = lambda argv: (1, "", "Error: rpc error: timeout")
    status = reclaimer(config, clock).sweep()
    assert "exit 1" in status["leases"][0]["error"] and chain.txs == []


def test_an_unreachable_api_is_said_and_the_service_runs_once_from_its_config(farm: Farm, tmp_path: Path) -> None:
    api, chain, pod, clock, config = farm
    api.down = True
    status = reclaimer(config, clock).sweep()
    assert status["last_error"].startswith("API: GET /api/v1/nodes") and status["leases"] == []
    api.down = False
    path = tmp_path / "reclaimer.json"
    path.write_text(json.dumps({"kubeconfig": config.kubeconfig, "kubectl": list(config.kubectl),
                                "state_dir": config.state_dir}))
    assert main([str(path), "--once"]) == 0
    assert json.loads((Path(config.state_dir) / "status.json").read_text())["last_error"] == ""


def test_random_farms_every_close_lands_after_its_deadline_and_mining_starts_on_time(farm: Farm) -> None:
    """Random windows, mining times and sweep intervals against the stand-in chain's rules: no transaction is
    ever refused, and a node whose leases all have windows that fit the lead is free by its mining time."""
    api, chain, pod, clock, config = farm
    rng = random.Random(36)
    mining = T0 + 4000
    must_mine(api, "rig01", mining)
    leases = [lease_on(api, chain, 100 + n, ("rig01",), window_s=rng.choice([60.0, 600.0, 1800.0, 3600.0]))
              for n in range(4)]
    r = Reclaimer(config, KubeClient("", None, kubeconfig=config.kubeconfig), pod.run, clock=clock)
    while clock.now < mining + 120:
        r.sweep()
        for lease in leases:  # the provider tears a closed lease down
            if lease.state == "closed":
                api.delete_pod("web-0", namespace=f"lease-{lease.dseq}")
        clock.now += rng.uniform(1, config.interval_s)  # sweeps come at most interval_s apart
    assert chain.refused() == []
    assert all((lease.window_s or 0) + config.margin_s + config.interval_s <= 4000 for lease in leases)  # all fit
    assert len({lease.window_s for lease in leases}) > 1
    assert all(lease.state == "closed" and lease.deadline <= mining for lease in leases)


# -- a lease m2p's gate keeps refusing (issue 52) ------------------------------------------------------------------
GATE_LINE = ("failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
             "failed: unable to start container process: error during container init: error running createRuntime "
             "hook #0: exit status 1, stdout: , stderr: m2p gate: GPUs not handed over: {}\n: unknown")


def refused_by_gate(api: KubeApiStandin, dseq: int, why: str, pod: str = "web-0") -> None:
    """The lease's container as the kubelet reports it while m2p's gate refuses it: the runtime's StartError with
    the hook's words, the kubelet backing off."""
    api.pods[(f"lease-{dseq}", pod)]["status"]["containerStatuses"] = [{
        "name": "main", "ready": False, "restartCount": 4,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s restarting failed container"}},
        "lastState": {"terminated": {"reason": "StartError", "exitCode": 128, "message": GATE_LINE.format(why),
                                     "startedAt": "1970-01-01T00:00:00Z"}}}]


def started(api: KubeApiStandin, dseq: int, pod: str = "web-0") -> None:
    api.pods[(f"lease-{dseq}", pod)]["status"]["containerStatuses"] = [
        {"name": "main", "ready": True, "restartCount": 5, "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}}}]


def test_a_windowed_lease_the_gate_keeps_refusing_is_reported_reclaimed_and_closed_without_mining_due(farm: Farm, capsys: pytest.CaptureFixture[str]) -> None:
    api, chain, pod, clock, config = farm
    lease = lease_on(api, chain, 20, ("rig01",), window_s=600.0)
    refused_by_gate(api, 20, "the miner could not be stopped: it exited 4: stuck")
    r = reclaimer(config, clock)
    status = r.sweep()
    (row,) = status["leases"]
    assert row["mine_at"] is None and row["action"] == "wait" and chain.txs == []  # within the grace: said, not sent
    assert row["refused"] == {"node": "rig01", "since": reclaim.utc(T0),
                              "why": "the miner could not be stopped: it exited 4: stuck"}
    assert "m2p's gate on rig01 has refused its container" in row["why"] and "given up at" in row["why"]

    clock.now = T0 + config.gate_grace_s
    (row,) = r.sweep()["leases"]
    assert row["action"] == "start-reclaim" and row["error"] == "" and lease.state == "reclaiming"
    assert "rig01" in row["why"] and "it exited 4: stuck" in row["why"] and "cannot run there" in row["why"]
    assert chain.txs[-1]["reason"] == reclaim.REASON_UNSTABLE
    said = capsys.readouterr().err  # the journal: which lease, which rig, why
    assert f"lease {TENANT}/20/1/1/{PROVIDER}:" in said and "rig01" in said and "exited 4" in said

    clock.now = lease.deadline
    r.sweep()
    assert lease.state == "closed" and [tx["kind"] for tx in chain.txs] == ["start-reclaim", "close"]
    assert chain.refused() == [] and {tx["broadcast_mode"] for tx in chain.txs} == {"block"}
    ledger = [json.loads(line) for line in (Path(config.state_dir) / "ledger.jsonl").read_text().splitlines()]
    assert [(e["sent"], e["reason"], e["refused"]["node"]) for e in ledger] == [
        ("start-reclaim", 10000, "rig01"), ("close", 10000, "rig01")]


def test_a_container_that_starts_within_the_grace_is_not_given_up_and_a_windowless_one_refused_is_closed(farm: Farm) -> None:
    api, chain, pod, clock, config = farm
    windowed = lease_on(api, chain, 21, ("rig01",), window_s=600.0)
    windowless = lease_on(api, chain, 22, ("rig02",), window_s=None)
    refused_by_gate(api, 21, "no hand-over from m2p-agent within 90 s (is m2p-agent.service running?)")
    refused_by_gate(api, 22, "this rig is mining: m2p hands its GPUs only to the marketplace's leases")
    r = reclaimer(config, clock)
    r.sweep()
    clock.now = T0 + config.gate_grace_s - 1
    started(api, 21)  # the miner let go at last: the container runs
    r.sweep()
    clock.now = T0 + config.gate_grace_s
    status = r.sweep()
    by_dseq = {s["lease"].split("/")[1]: s for s in status["leases"]}
    assert windowed.state == "active" and by_dseq["21"]["refused"] is None and by_dseq["21"]["action"] == ""
    assert windowless.state == "closed" and by_dseq["22"]["action"] == "close" and "no reclamation window" in \
        by_dseq["22"]["why"]
    refused_by_gate(api, 21, "the miner could not be stopped: it exited 4: stuck")  # refused again: a new grace
    clock.now += config.gate_grace_s - 1
    r.sweep()
    assert windowed.state == "active" and [tx["kind"] for tx in chain.txs] == ["close"] and chain.refused() == []


def test_a_lease_refused_on_one_rig_and_running_on_another_is_reported_and_held_without_consent(farm: Farm) -> None:
    api, chain, pod, clock, config = farm
    lease = lease_on(api, chain, 23, ("rig01", "rig02"), window_s=600.0)
    refused_by_gate(api, 23, "the GPUs' clocks could not be reset to their defaults: NVML error")
    r = reclaimer(config, clock)
    r.sweep()
    clock.now = T0 + 2 * config.gate_grace_s
    (row,) = r.sweep()["leases"]
    assert row["action"] == "hold" and chain.txs == [] and lease.state == "active"
    assert "m2p's gate on rig01" in row["why"] and "also run on rig02, which need not mine and run it" in row["why"]
    assert row["refused"]["node"] == "rig01"
    consenting = reclaimer(config, clock, reclaim_spanning=True)  # the owner's consent
    consenting.refused_since = dict(r.refused_since)
    consenting.sweep()
    assert lease.state == "reclaiming" and chain.refused() == []


def test_a_lease_reclaiming_is_closed_at_its_deadline_even_when_mining_is_no_longer_due(farm: Farm) -> None:
    api, chain, pod, clock, config = farm
    lease = lease_on(api, chain, 24, ("rig01",), window_s=60.0)
    must_mine(api, "rig01", T0)
    r = reclaimer(config, clock)
    r.sweep()
    assert lease.state == "reclaiming"
    must_mine(api, "rig01", None)  # the schedule changed: the rig need not mine after all
    clock.now = lease.deadline
    r.sweep()
    assert lease.state == "closed" and chain.refused() == []  # the chain never closes it: the tenant would pay on


def test_the_standin_chain_refuses_with_the_chains_own_errors_and_only_a_block_reply_says_so(farm: Farm) -> None:
    """The names and codes of akash-network/chain-sdk@4870611f go/node/market/v1/errors.go, where
    akash-network/node@3efe26bf x/market/handler/server.go returns them; a sync reply only says the mempool took
    the transaction, which is why every transaction the reclaimer sends waits for its block."""
    from m2p_sandbox.akash_chain import ChainRefusal

    api, chain, pod, clock, config = farm
    windowed = chain.create_lease(TENANT, 30, PROVIDER, 600.0)
    windowless = chain.create_lease(TENANT, 31, PROVIDER, None)
    lid = reclaim.LeaseId(TENANT, 30, 1, 1, PROVIDER)

    def sent(argv: list[str]) -> dict[str, Any]:
        code, out, err = pod.run(argv)
        assert code == 0, err
        reply: dict[str, Any] = json.loads(out)
        return reply

    assert sent(reclaim.close_argv(lid))["code"] == 37  # ErrReclamationNotStarted: reclaim first
    assert reclaim.tx_error(json.dumps(chain.txs[-1])).startswith("ErrReclamationNotStarted (market code 37)")
    assert sent(reclaim.start_argv(lid))["code"] == 0 and windowed.state == "reclaiming"
    second = sent(reclaim.start_argv(lid))  # a second start finds the lease reclaiming: not active
    assert (second["codespace"], second["code"], chain.txs[-1]["error"]) == ("market", 10, "ErrLeaseNotActive")
    assert second["raw_log"] == "failed to execute message; message index: 0: lease not active"
    early = sent(reclaim.close_argv(lid))
    assert (early["code"], chain.txs[-1]["error"]) == (38, "ErrReclamationWindowNotElapsed")
    assert sent(reclaim.start_argv(reclaim.LeaseId(TENANT, 31, 1, 1, PROVIDER)))["code"] == 35  # no window
    assert windowless.state == "active"
    unknown = sent(reclaim.start_argv(reclaim.LeaseId(TENANT, 99, 1, 1, PROVIDER)))
    assert chain.txs[-1]["error"] == "ErrUnknownLease" and unknown["code"] == 7

    # sync: the block refuses the close all the same, but the reply says only that the mempool took it.
    quiet = sent([arg if arg != "block" else "sync" for arg in reclaim.close_argv(lid)])
    assert quiet["code"] == 0 and quiet["height"] == "0" and chain.txs[-1]["error"] == "ErrReclamationWindowNotElapsed"
    argv = reclaim.close_argv(lid)
    argv[argv.index("--reason") + 1] = "3"
    code, _, err = pod.run(argv)  # the CLI checks the reason before anything is sent
    assert code == 1 and "expected range 10000..19999" in err
    code, _, err = pod.run([arg if arg != "block" else "commit" for arg in reclaim.close_argv(lid)])
    assert code == 1 and "invalid broadcast mode" in err

    # A bid below the order's minimum window, or none where the order asks one: CreateBid refuses it.
    with pytest.raises(ChainRefusal, match="shorter than order minimum") as too_short:
        chain.create_lease(TENANT, 32, PROVIDER, 3600.0, min_window_s=7200.0)
    assert (too_short.value.name, too_short.value.code) == ("ErrReclamationWindowTooShort", 41)
    with pytest.raises(ChainRefusal) as required:
        chain.create_lease(TENANT, 33, PROVIDER, None, min_window_s=7200.0)
    assert (required.value.name, required.value.code) == ("ErrReclamationRequired", 40)
    with pytest.raises(ChainRefusal) as bounds:
        chain.create_lease(TENANT, 34, PROVIDER, 30.0)  # below this test chain's governance minimum
    assert (bounds.value.name, bounds.value.code) == ("ErrReclamationWindowInvalid", 39)


# -- a taken rig's kubelet lies about where leases run (issue 55, point 4) -----------------------------------------
def mirror_in_lease(api: KubeApiStandin, tmp_path: Path, rig: str, dseq: int) -> None:
    """What root on ``rig`` can do with its kubelet's own credential (k3s's agent/client-kubelet.crt): a mirror pod
    in the namespace of a lease that runs elsewhere, labelled as that lease's pods are, bound to itself, as the
    API's NodeRestriction admits it (a static pod's mirror)."""
    from test_rigside_kube_identity import create_pod, kubelet_client, mirror_pod  # tests/unit is on sys.path

    folder = tmp_path / f"kubelet-{rig}"
    folder.mkdir(exist_ok=True)
    create_pod(kubelet_client(api, rig, folder), f"lease-{dseq}", mirror_pod(api, rig, name=f"web-0-{rig}"))
    assert api.pods[(f"lease-{dseq}", f"web-0-{rig}")]["spec"]["nodeName"] == rig


def test_a_taken_rigs_mirror_pod_in_a_lease_elsewhere_does_not_hold_its_reclaim(farm: Farm, tmp_path: Path) -> None:
    """ATTACK: rig02's kubelet puts a mirror pod in the namespace of a lease that runs on rig01 only, to make it
    look spanning: held without consent, rig01 would miss its mining window.  Only pods the provider's workloads
    own count: the lease is reclaimed for rig01 as if rig02 had said nothing."""
    api, chain, pod, clock, config = farm
    lease = lease_on(api, chain, 40, ("rig01",), window_s=60.0)
    must_mine(api, "rig01", T0 + 60 + config.margin_s + config.interval_s)
    must_mine(api, "rig02", None)
    mirror_in_lease(api, tmp_path, "rig02", 40)
    (row,) = Reclaimer(config, KubeClient("", None, kubeconfig=config.kubeconfig), pod.run, clock=clock).sweep()["leases"]
    assert row["nodes"] == ["rig01"] and row["action"] == "start-reclaim", row
    assert lease.state == "reclaiming" and lease.deadline <= T0 + 60 + config.margin_s + config.interval_s


def test_a_taken_rig_cannot_get_a_lease_on_another_rig_reclaimed_even_with_consent(farm: Farm, tmp_path: Path) -> None:
    """ATTACK: with ``reclaim_leases_across_rigs`` (reclaim_spanning), rig02 says it must mine (its agent's status,
    which it writes) and puts a mirror pod in the namespace of a lease that runs on rig01 only, which need not
    mine: the lease must stay untouched."""
    api, chain, pod, clock, config = farm
    lease = lease_on(api, chain, 41, ("rig01",), window_s=60.0)
    must_mine(api, "rig01", None)
    must_mine(api, "rig02", T0)
    mirror_in_lease(api, tmp_path, "rig02", 41)
    consenting = replace(config, reclaim_spanning=True)
    r = Reclaimer(consenting, KubeClient("", None, kubeconfig=config.kubeconfig), pod.run, clock=clock)
    for _ in range(3):
        (row,) = r.sweep()["leases"]
        clock.now += 120
    assert row["nodes"] == ["rig01"] and row["action"] == "" and row["mine_at"] is None, row
    assert lease.state == "active" and chain.txs == []
