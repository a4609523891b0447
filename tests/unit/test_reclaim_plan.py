"""AEP-82 reclamation planned (market/akash/reclaim.py, issue 36's first brick), by property: no close is
ever sent before a deadline; a mining window starts no later than planned when every lease on the node has
a window no longer than its lead (less the margin a transaction takes to land); leases without a window are
never reclaimed (closed only on opt-in, or once m2p's gate has refused them past the grace); a lease the gate
keeps refusing ends whether or not mining is due (issue 52).  And what the planner reads and writes: the
gate's refusal in a pod's status, the commands (``--broadcast-mode block``), the chain's error names."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.agent import gate
from miner2provider.market.akash import reclaim
from miner2provider.market.akash.address import encode
from miner2provider.market.akash.reclaim import (
    GATE_GRACE_S,
    LABEL,
    MARGIN_S,
    REASON_UNSTABLE,
    Lease,
    LeaseId,
    Refusal,
    lease_id,
    plan,
)

OWNER, PROVIDER = encode(bytes(range(20))), encode(bytes(range(20, 40)))
HOUR = 3600.0

leases = st.lists(st.builds(
    lambda dseq, window, reclaiming_for: Lease(LeaseId(OWNER, dseq, 1, 1, PROVIDER), window,
                                               None if window is None or reclaiming_for is None
                                               else 1_000_000 + window - reclaiming_for),
    st.integers(1, 10**9), st.one_of(st.none(), st.floats(HOUR, 720 * HOUR)),
    st.one_of(st.none(), st.floats(0, 720 * HOUR))), max_size=6, unique_by=lambda lease: lease.id)


def run_until_quiet(start: list[Lease], now: float, mining_at: float | None, opt_in: bool = False,
                    refused: dict[LeaseId, Refusal] | None = None) -> tuple[list[tuple[float, str, Lease]],
                                                                             dict[LeaseId, Lease]]:
    """Follow the plan as the reclaimer would: send what is due, wake at the next wait, until nothing waits.
    Returns (the sends, by time; the leases still there)."""
    live = {lease.id: lease for lease in start}
    sent: list[tuple[float, str, Lease]] = []
    t = now
    for _ in range(100):
        actions = plan(live.values(), t, mining_at, opt_in, refused=refused)
        due = [a for a in actions if a.kind in ("start-reclaim", "close")]
        for a in due:
            lease = live[a.lease]
            sent.append((t, a.kind, lease))
            if a.kind == "start-reclaim":
                live[a.lease] = Lease(lease.id, lease.window_s, t + (lease.window_s or 0))
            else:
                del live[a.lease]
        if due:
            continue  # what was sent changes the plan: ask again now
        waits = [a.at for a in actions if a.kind == "wait"]
        if not waits:
            return sent, live
        t = max(t, min(waits))
    raise AssertionError("the plan never settles")


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(leases, st.floats(0, 800 * HOUR), st.booleans())
def test_no_close_before_a_deadline_and_no_reclaim_without_a_window(start: list[Lease], lead: float,
                                                                    opt_in: bool) -> None:
    now = 1_000_000.0
    sent, _ = run_until_quiet(start, now, now + lead, opt_in)
    for t, kind, lease in sent:
        if lease.window_s is None:
            assert kind == "close" and opt_in, (kind, lease)  # never reclaimed; closed only on opt-in
            assert t >= now + lead - MARGIN_S, (t, lease)  # and only when mining is due, never days ahead
        elif kind == "close":
            assert lease.deadline is not None and t >= lease.deadline, (t, lease)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(leases, st.floats(0, 800 * HOUR))
def test_mining_starts_on_time_when_every_window_fits_the_lead(start: list[Lease], lead: float) -> None:
    now = 1_000_000.0
    mining_at = now + lead
    fresh = [lease for lease in start if lease.window_s is not None and lease.deadline is None]
    if any(lease.window_s is not None and lease.window_s + MARGIN_S > lead for lease in fresh):
        return  # a window (and the margin for the transaction) longer than the lead: mining waits (said in
        # the plan), not this property
    if any(lease.deadline is not None and lease.deadline > mining_at for lease in start):
        return  # a reclaim started earlier ends after the mining window starts: likewise
    sent, live = run_until_quiet(fresh, now, mining_at)
    assert not live, live
    assert all(t <= mining_at for t, kind, _ in sent if kind == "close"), sent


def test_a_window_longer_than_the_lead_is_said() -> None:
    lease = Lease(LeaseId(OWNER, 7, 1, 1, PROVIDER), 24 * HOUR)
    (action,) = plan([lease], 0.0, 2 * HOUR)
    assert action.kind == "start-reclaim" and "mining waits for it" in action.why


def test_a_lease_id_comes_from_akashs_namespace_labels_and_nothing_else() -> None:
    labels = {LABEL + "owner": OWNER, LABEL + "dseq": "123", LABEL + "gseq": "1", LABEL + "oseq": "1",
              LABEL + "provider": PROVIDER, "akash.network": "true"}
    assert lease_id(labels) == LeaseId(OWNER, 123, 1, 1, PROVIDER)
    for bad in ({LABEL + "dseq": "-1"}, {LABEL + "dseq": "1e3"}, {LABEL + "owner": "akash1short"},
                {LABEL + "provider": OWNER.upper()}, {LABEL + "oseq": ""}):
        assert lease_id({**labels, **bad}) is None, bad
    assert lease_id({"akash.network": "true"}) is None


refusals = st.dictionaries(st.integers(0, 5), st.floats(-2 * GATE_GRACE_S, 2 * GATE_GRACE_S), max_size=6)


def refused_among(start: list[Lease], picked: dict[int, float], now: float) -> dict[LeaseId, Refusal]:
    """Some of the leases refused by the gate, each since ``now`` plus its offset (a past or a future refusal)."""
    return {start[i].id: Refusal("rig01", now + offset, "the miner could not be stopped")
            for i, offset in picked.items() if i < len(start)}


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(leases, st.one_of(st.none(), st.floats(0, 800 * HOUR)), st.booleans(), refusals)
def test_a_refused_lease_ends_never_by_an_early_close_and_only_after_the_grace(
        start: list[Lease], lead: float | None, opt_in: bool, picked: dict[int, float]) -> None:
    now = 1_000_000.0
    mining_at = None if lead is None else now + lead
    refused = refused_among(start, picked, now)
    sent, live = run_until_quiet(start, now, mining_at, opt_in, refused)
    for t, kind, lease in sent:
        refusal = refused.get(lease.id)
        if kind == "close" and lease.window_s is not None:
            assert lease.deadline is not None and t >= lease.deadline, (t, lease)  # never before a deadline
        if lease.window_s is None:
            assert kind == "close", (kind, lease)  # never reclaimed
            by_refusal = refusal is not None and t >= refusal.since + GATE_GRACE_S
            by_mining = opt_in and mining_at is not None and t >= mining_at - MARGIN_S
            assert by_refusal or by_mining, (t, lease, refusal)
        elif kind == "start-reclaim" and lease.deadline is None and (mining_at is None or t < mining_at - lease.window_s
                                                                      - MARGIN_S):
            assert refusal is not None and t >= refusal.since + GATE_GRACE_S, (t, lease)  # not before the grace
    # Every lease refused (the refusal lasting) is gone in the end, whether or not mining is due.
    assert not set(refused) & set(live), (refused, live)


def test_a_lease_the_gate_keeps_refusing_is_reclaimed_after_the_grace_with_the_rig_and_the_reason_said() -> None:
    lease = Lease(LeaseId(OWNER, 9, 1, 1, PROVIDER), 24 * HOUR)
    refusal = Refusal("rig07", 1_000.0, "the miner could not be stopped: it exited 4: stuck")
    (early,) = plan([lease], 1_000.0 + GATE_GRACE_S - 1, None, refused={lease.id: refusal})
    assert early.kind == "wait" and early.at == 1_000.0 + GATE_GRACE_S
    assert "m2p's gate on rig07 has refused its container since 1970-01-01T00:16:40+00:00" in early.why
    (due,) = plan([lease], 1_000.0 + GATE_GRACE_S, None, refused={lease.id: refusal})
    assert due.kind == "start-reclaim" and due.reason == REASON_UNSTABLE
    assert "rig07" in due.why and "it exited 4: stuck" in due.why and "cannot run there" in due.why
    # Reclaiming, it is closed at its deadline, the refusal still said (and with no mining due at all).
    reclaiming = Lease(lease.id, lease.window_s, 2_000.0 + 24 * HOUR)
    (close,) = plan([reclaiming], 2_000.0 + 24 * HOUR, None, refused={lease.id: refusal})
    assert close.kind == "close" and close.reason == REASON_UNSTABLE and "rig07" in close.why
    # A lease without a window cannot be reclaimed: past the grace it is closed (nothing of it runs to cut off).
    windowless = Lease(LeaseId(OWNER, 10, 1, 1, PROVIDER), None)
    (closed,) = plan([windowless], 1_000.0 + GATE_GRACE_S, None, refused={windowless.id: refusal})
    assert closed.kind == "close" and closed.reason == REASON_UNSTABLE


def test_without_mining_due_or_a_refusal_a_lease_has_nothing_to_do_but_a_reclaiming_one_is_closed() -> None:
    active = Lease(LeaseId(OWNER, 11, 1, 1, PROVIDER), HOUR)
    assert plan([active], 0.0, None) == []
    reclaiming = Lease(LeaseId(OWNER, 12, 1, 1, PROVIDER), HOUR, 500.0)
    (wait,) = plan([reclaiming], 0.0, None)
    assert (wait.kind, wait.at) == ("wait", 500.0)
    (close,) = plan([reclaiming], 500.0, None)
    assert close.kind == "close" and close.reason == reclaim.REASON_UNSPECIFIED


def test_a_mining_window_due_sooner_than_the_grace_goes_first() -> None:
    lease = Lease(LeaseId(OWNER, 13, 1, 1, PROVIDER), 600.0)
    refusal = Refusal("rig01", 0.0, "no hand-over from m2p-agent within 90 s")
    (action,) = plan([lease], 10.0, 10.0 + 600.0, refused={lease.id: refusal})  # mining due in W: reclaim now
    assert action.kind == "start-reclaim" and action.reason == reclaim.REASON_UNSPECIFIED


CONTAINERD = ("failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
              "failed: unable to start container process: error during container init: error running createRuntime "
              "hook #0: exit status 1, stdout: , stderr: {}\n: unknown")


def pod(state: dict[str, Any], last: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"status": {"phase": "Running", "containerStatuses": [
        {"name": "main", "state": state, "lastState": last or {}, "restartCount": 3}]}}


def test_the_gates_refusal_is_read_from_the_containers_status_as_the_hook_says_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # What the hook really prints (agent/gate.py), as the runtime's error carries it into the status.
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"id": "lease-1"})))
    assert gate.main(["--timeout", "0"], str(tmp_path)) == 1
    said = capsys.readouterr().err.strip()
    assert said.startswith(reclaim.GATE_SAYS.strip())
    backing_off = pod({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}},
                      {"terminated": {"reason": "StartError", "exitCode": 128, "message": CONTAINERD.format(said)}})
    assert reclaim.gate_refusal(backing_off) == "no hand-over from m2p-agent within 0 s (is m2p-agent.service running?)"
    first = pod({"terminated": {"reason": "StartError", "exitCode": 128, "message": CONTAINERD.format(
        reclaim.GATE_SAYS + "the miner could not be stopped: it exited 4: stuck")}})
    assert reclaim.gate_refusal(first) == "the miner could not be stopped: it exited 4: stuck"
    # Running now: not refused, whatever its last state says; another failure is no refusal of m2p's gate.
    assert reclaim.gate_refusal(pod({"running": {}}, {"terminated": {"message": CONTAINERD.format(said)}})) == ""
    assert reclaim.gate_refusal(pod({"waiting": {"reason": "ImagePullBackOff", "message": "pull failed"}})) == ""
    assert reclaim.gate_refusal({"status": {"containerStatuses": ["junk"]}}) == ""
    assert reclaim.gate_refusal({"status": None}) == ""


def test_transactions_wait_for_their_block_and_refusals_are_named_as_the_chain_names_them() -> None:
    lease = LeaseId(OWNER, 5, 1, 2, PROVIDER)
    for argv in (reclaim.start_argv(lease, REASON_UNSTABLE), reclaim.close_argv(lease)):
        assert argv[argv.index("--broadcast-mode") + 1] == "block"
        assert argv[argv.index("--reason") + 1] in ("10000", "10002") and "--yes" in argv
    refused = json.dumps({"height": "1001", "codespace": "market", "code": 38,
                          "raw_log": "failed to execute message; message index: 0: reclamation window has not elapsed"})
    assert reclaim.tx_error(refused).startswith("ErrReclamationWindowNotElapsed (market code 38): failed to execute")
    assert reclaim.tx_error(json.dumps({"height": "1001", "code": 0, "raw_log": ""})) == ""
    assert reclaim.chain_error("Error: rpc error: ... message index: 0: lease not active: unknown request") == \
        "ErrLeaseNotActive"
    assert reclaim.chain_error("unknown lease for bid") == "ErrUnknownLeaseForBid"  # the longer message wins
    assert reclaim.chain_error("out of gas") == ""


def _pod(owners: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"ownerReferences": owners, "annotations": annotations or {}}}


def _owner(kind: str, api: str = "apps/v1", controller: bool = True) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": "web-5d8f7c9b6", "uid": "u", "controller": controller}


@pytest.mark.parametrize("pod, made", [
    (_pod([_owner("ReplicaSet")]), True),  # a Deployment's pod, as the provider runs a service
    (_pod([_owner("StatefulSet")]), True),  # a service with persistent storage
    (_pod([_owner("Node", "v1")], {reclaim.MIRROR_ANNOTATION: "0f3c"}), False),  # a kubelet's mirror pod
    (_pod([_owner("ReplicaSet")], {reclaim.MIRROR_ANNOTATION: "0f3c"}), False),  # a mirror is never believed
    (_pod([]), False),
    (_pod([_owner("ReplicaSet", controller=False)]), False),  # an owner that does not control it
    (_pod([_owner("ReplicaSet"), _owner("StatefulSet")]), False),  # two controllers: no pod the API would keep
    (_pod([_owner("DaemonSet")]), False),
    (_pod([_owner("ReplicaSet", "extensions/v1beta1")]), False),
    ({"metadata": {"ownerReferences": "ReplicaSet"}}, False),
    ({}, False),
])
def test_a_leases_pods_are_only_those_the_providers_workloads_made(pod: dict[str, Any], made: bool) -> None:
    assert reclaim.made_by_provider(pod) is made
