"""AEP-82 reclamation, planned.  Pure: the reclaimer on the farm's server (reclaimer.py) reads the leases and
the chain, asks ``plan`` what to send, and sends it with the commands ``query_argv``, ``start_argv`` and
``close_argv`` build.

What the protocol allows (AEP-82, Final 2026-06-11; ../shared/reference/akash-provider.md section 3):
- a provider that offers a reclamation window W (1 h to 720 h) on its bids may start reclaiming a lease
  won with a window (``MsgLeaseStartReclaim``, reason 10000-19999; 10002 "unspecified"): the lease turns
  ``reclaiming`` with a deadline of now + W, and the tenant pays in full until then;
- after the deadline the provider must close the lease itself (an ordinary bid close): the chain never
  closes a reclaiming lease, and refuses an earlier close (``ErrReclamationWindowNotElapsed``);
- a lease won with a window cannot be closed early without a reclaim (``ErrReclamationNotStarted``);
- a lease won without a window cannot be reclaimed, but can be closed (today's behaviour: wait for it,
  or close it at once only with the owner's opt-in).

So, for a node that must mine from ``mining_at``: each lease with a window W is reclaimed at
``mining_at - W - margin`` (at once when that has passed) and closed at its deadline; if every lease's
W plus the margin fits the lead, mining starts on time.  The margin covers the time a transaction takes
to land in a block: the chain sets the deadline from the block that includes the reclaim, not from when
it was sent (a few 6-second blocks; ``MARGIN_S``).  A lease whose deadline lands after ``mining_at`` is
said (mining waits for it).  Akash's provider labels each lease's namespace with its id
(``akash.network/lease.id.{owner,dseq,gseq,oseq,provider}``: provider cluster/kube/builder).

A lease whose container m2p's gate keeps refusing on a rig (``Refusal``: the miner cannot be stopped, the
cards' clocks cannot be reset, a supervisor keeps restarting the miner) never runs there, and the tenant pays
for it all the same.  Refused for longer than ``GATE_GRACE_S`` it is given up whether or not mining is due:
reclaimed at once when it has a window (and closed at its deadline), closed at once when it has none (the
provider cannot serve it; nothing of it runs to cut off), each with reason 10000 ("unstable").  A reclaiming
lease is closed at its deadline whoever started the reclaim: the chain never closes it.

The chain's own names for what it refuses (``chain_error``) are from akash-network/chain-sdk@4870611f
(``go/node/market/v1/errors.go``, pkg.akt.dev/go v0.2.16; the same in go/v0.2.14, provider v0.14.0's, and in
go/v0.3.0, provider v0.16.0-rc3's), as akash-network/node@3efe26bf (``x/market/handler/server.go``,
v2.1.0-rc10 and later) returns them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

# Lease.ClosedReason, the provider's range (chain-sdk go/cli/flags/market.go: 10000=unstable, 10001=decommission,
# 10002=unspecified, 10003=manifest_timeout).
REASON_UNSTABLE = 10000
REASON_UNSPECIFIED = 10002
MARGIN_S = 60.0
# How long m2p's gate may refuse a lease's container before the lease is given up: the hook waits up to 90 s a try
# (agent/gate.py) and the kubelet retries with a back-off of at most 5 minutes, so a transient refusal (a miner
# slow to let go) has had several tries by then.
GATE_GRACE_S = 600.0
REASONS = range(10000, 20000)
LABEL = "akash.network/lease.id."
_ADDRESS = re.compile(r"akash1[02-9ac-hj-np-z]{38}")
_SEQ = re.compile(r"[0-9]{1,20}")


@dataclass(frozen=True, order=True)
class LeaseId:
    owner: str
    dseq: int
    gseq: int
    oseq: int
    provider: str

    def __str__(self) -> str:
        return f"{self.owner}/{self.dseq}/{self.gseq}/{self.oseq}/{self.provider}"


@dataclass(frozen=True)
class Lease:
    """A lease on the node, as the chain says: its window (None: won without one) and, when it is
    reclaiming, its deadline (seconds since the epoch)."""

    id: LeaseId
    window_s: float | None
    deadline: float | None = None


@dataclass(frozen=True)
class Refusal:
    """m2p's gate on ``node`` has refused the lease's container since ``since`` (seconds since the epoch), saying
    ``why``."""

    node: str
    since: float
    why: str

    def said(self) -> str:
        return f"m2p's gate on {self.node} has refused its container since {utc(self.since)} ({self.why})"


@dataclass(frozen=True)
class Action:
    kind: str  # start-reclaim | close | wait | leave
    lease: LeaseId
    at: float  # when to send it (wait, leave: when the lease may end on its own, or the deadline)
    why: str
    reason: int = REASON_UNSPECIFIED  # the transaction's --reason


def lease_id(labels: Mapping[str, str]) -> LeaseId | None:
    """The lease a namespace holds, from Akash's labels; None when they are missing or malformed (a
    namespace that is no lease's, or labels nobody should trust)."""
    got = {key[len(LABEL):]: value for key, value in labels.items() if key.startswith(LABEL)}
    owner, provider = got.get("owner", ""), got.get("provider", "")
    seqs = [got.get(k, "") for k in ("dseq", "gseq", "oseq")]
    if not (_ADDRESS.fullmatch(owner) and _ADDRESS.fullmatch(provider) and all(_SEQ.fullmatch(s) for s in seqs)):
        return None
    dseq, gseq, oseq = (int(s) for s in seqs)
    return LeaseId(owner, dseq, gseq, oseq, provider)


def plan(leases: Iterable[Lease], now: float, mining_at: float | None, close_without_window: bool = False,
         margin_s: float = MARGIN_S, refused: Mapping[LeaseId, Refusal] | None = None,
         grace_s: float = GATE_GRACE_S) -> list[Action]:
    """What to send for each lease on a node that must mine from ``mining_at`` (None: no mining due), and for
    each lease m2p's gate refuses (``refused``); never a close before a deadline, never a reclaim of a lease
    without a window.  A lease with nothing to do (no mining due, no refusal, not reclaiming) has no action."""
    refused = refused or {}
    actions = []
    for lease in sorted(leases, key=lambda item: item.id):
        action = _one(lease, now, mining_at, close_without_window, margin_s, refused.get(lease.id), grace_s)
        if action is not None:
            actions.append(action)
    return actions


def _one(lease: Lease, now: float, mining_at: float | None, close_without_window: bool, margin_s: float,
         refusal: Refusal | None, grace_s: float) -> Action | None:
    reason = REASON_UNSPECIFIED if refusal is None else REASON_UNSTABLE
    if lease.deadline is not None:  # reclaiming, whoever started it: closed at its deadline, never before
        kind = "close" if now >= lease.deadline else "wait"
        why = (refusal.said() + "; reclaimed, closed at its deadline" if refusal is not None
               else _late(lease.deadline, mining_at) if mining_at is not None else "reclaiming: closed at its deadline")
        return Action(kind, lease.id, max(now, lease.deadline), why, reason)
    if refusal is not None and now >= refusal.since + grace_s:
        if lease.window_s is None:
            return Action("close", lease.id, now, f"{refusal.said()}: it cannot run there; closed (it has no "
                                                  "reclamation window)", REASON_UNSTABLE)
        return Action("start-reclaim", lease.id, now, f"{refusal.said()}: it cannot run there; reclaimed, closed "
                                                      f"at its deadline ({lease.window_s:.0f} s)", REASON_UNSTABLE)
    mining = None if mining_at is None else _for_mining(lease, now, mining_at, close_without_window, margin_s)
    if refusal is None:
        return mining
    give_up = refusal.since + grace_s
    if mining is not None and (mining.kind in ("start-reclaim", "close") or
                               (mining.kind == "wait" and mining.at <= give_up)):
        return mining
    return Action("wait", lease.id, give_up, f"{refusal.said()}: given up at {utc(give_up)} unless it starts")


def _for_mining(lease: Lease, now: float, mining_at: float, close_without_window: bool,
                margin_s: float) -> Action:
    """A lease not reclaiming yet, on a node that must mine from ``mining_at``."""
    if lease.window_s is None:
        if close_without_window:  # cut when mining is due (less the margin for the close to land), not sooner
            at = mining_at - margin_s
            return Action("close" if now >= at else "wait", lease.id, max(now, at),
                          "won without a reclamation window; the owner opted to close such leases when mining is due")
        return Action("leave", lease.id, now, "won without a reclamation window: it cannot be reclaimed; mining "
                                              "waits until it ends")
    start = max(now, mining_at - lease.window_s - margin_s)
    if start > now:
        return Action("wait", lease.id, start, f"reclaim at {utc(start)}, {lease.window_s:.0f} s before mining")
    return Action("start-reclaim", lease.id, now, _late(start + lease.window_s, mining_at))


def utc(ts: float) -> str:
    """A moment as the status and the ledger say it (ISO 8601, UTC, whole seconds)."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def _late(deadline: float, mining_at: float) -> str:
    if deadline <= mining_at:
        return "its deadline comes before mining starts"
    return f"its deadline is {deadline - mining_at:.0f} s after mining should start: mining waits for it"


# Lease.State (AEP-82 "Lease State Machine"): the JSON prints the proto name or, per AEP-82's "Query Support",
# possibly the number.
STATES = {0: "invalid", 1: "active", 2: "insufficient_funds", 3: "closed", 4: "reclaiming"}
LIVE_STATES = {"active", "reclaiming"}


class ChainReplyError(ValueError):
    """The chain's answer about a lease is not the shape AEP-82's lease has."""


def lease_from_chain(doc: object, lease: LeaseId) -> Lease | None:
    """The lease as ``provider-services query market lease get -o json`` prints it (the query's
    ``QueryLeaseResponse``: ``lease.state``; ``lease.reclamation`` is null for a lease won without a window,
    else ``window`` as a protobuf JSON Duration ("3600s") and ``deadline`` in unix seconds, 0 until a reclaim
    starts).  None: the lease is over (closed, insufficient funds).  Raises ChainReplyError on any other
    shape, so a reply m2p does not understand never becomes a close."""
    try:
        body = doc["lease"]  # type: ignore[index]
        raw = body["state"]
        reclamation = body.get("reclamation")
    except (KeyError, TypeError, AttributeError):
        raise ChainReplyError(f"lease {lease}: the chain's reply has no lease with a state") from None
    state = STATES.get(int(raw), "") if str(raw).isdigit() else str(raw)
    if state not in STATES.values() or state == "invalid":
        raise ChainReplyError(f"lease {lease}: the chain says state {str(raw)[:30]!r}, which AEP-82 does not name")
    if state not in LIVE_STATES:
        return None
    if reclamation is None:
        if state == "reclaiming":
            raise ChainReplyError(f"lease {lease}: reclaiming without a reclamation record")
        return Lease(lease, None)
    try:
        window = _seconds(str(reclamation["window"]))
        deadline = int(str(reclamation.get("deadline") or 0))
    except (KeyError, TypeError, AttributeError, ValueError):
        raise ChainReplyError(f"lease {lease}: its reclamation record is not AEP-82's (window, deadline)") from None
    if state == "reclaiming" and deadline <= 0:
        raise ChainReplyError(f"lease {lease}: reclaiming without a deadline")
    return Lease(lease, window, float(deadline) if state == "reclaiming" else None)


def _seconds(duration: str) -> float:
    """A protobuf JSON Duration ("3600s", "1.5s")."""
    if not duration.endswith("s"):
        raise ValueError(duration)
    value = float(duration[:-1])
    if not 0 < value < 10 ** 9:
        raise ValueError(duration)
    return value


def _lease_flags(lease: LeaseId) -> list[str]:
    return ["--owner", lease.owner, "--dseq", str(lease.dseq), "--gseq", str(lease.gseq), "--oseq", str(lease.oseq)]


# Run inside the provider pod, whose environment (the chart's AKASH_FROM, AKASH_NODE, AKASH_CHAIN_ID,
# AKASH_KEYRING_BACKEND ...) names the key, the node and the chain: the commands carry only the lease.
def query_argv(lease: LeaseId) -> list[str]:
    return ["provider-services", "query", "market", "lease", "get", *_lease_flags(lease), "--provider",
            lease.provider, "--output", "json"]


# A transaction waits for its block (CometBFT's broadcast_tx_commit), so that its reply's code is the block's
# verdict: the market module refuses a message only when the block runs it, and a ``sync`` reply says only that
# the mempool took it (code 0 for a close the block then refuses).  Akash's CLI still has ``block`` on cosmos-sdk
# v0.53 (upstream removed it in v0.47, cosmos/cosmos-sdk#12659): chain-sdk@3ccaa4d6, pkg.akt.dev/go/cli v0.2.4
# (provider v0.14.0, v0.16.0-rc3 and main afc4dd7), go/cli/root.go, and the client's go/node/client/v1beta3/tx.go
# (pkg.akt.dev/go v0.2.16 and v0.3.0: chain-sdk@4870611f, @0c10031d).  Passed explicitly, not
# left to the chart's AKASH_BROADCAST_MODE, so that a changed environment cannot make a refusal read as success.
BROADCAST = ["--broadcast-mode", "block"]


def _reason(reason: int) -> list[str]:
    if reason not in REASONS:
        raise ValueError(f"reason {reason} is not a provider's (10000-19999)")
    return ["--reason", str(reason)]


def start_argv(lease: LeaseId, reason: int = REASON_UNSPECIFIED) -> list[str]:
    return ["provider-services", "tx", "market", "bid", "start-reclaim", *_lease_flags(lease), *_reason(reason),
            *BROADCAST, "--yes", "--output", "json"]


def close_argv(lease: LeaseId, reason: int = REASON_UNSPECIFIED) -> list[str]:
    return ["provider-services", "tx", "market", "bid", "close", *_lease_flags(lease), *_reason(reason),
            *BROADCAST, "--yes", "--output", "json"]


# The market module's errors a start-reclaim or a bid close can meet (codespace "market"): code -> name, message.
MARKET_ERRORS = {
    6: ("ErrUnknownBid", "unknown bid"),
    7: ("ErrUnknownLease", "unknown lease"),
    8: ("ErrUnknownLeaseForBid", "unknown lease for bid"),
    9: ("ErrUnknownOrderForBid", "unknown order for bid"),
    10: ("ErrLeaseNotActive", "lease not active"),
    11: ("ErrBidNotActive", "bid not active"),
    33: ("ErrInvalidLeaseClosedReason", "invalid lease closed reason"),
    35: ("ErrLeaseNotReclamable", "lease does not have reclamation configured"),
    36: ("ErrLeaseAlreadyReclaiming", "reclamation already in progress"),
    37: ("ErrReclamationNotStarted", "reclamation not started; call MsgLeaseStartReclaim first"),
    38: ("ErrReclamationWindowNotElapsed", "reclamation window has not elapsed"),
}


def chain_error(text: str, code: int | None = None, codespace: str = "") -> str:
    """The chain's name for a refusal ('' when it is none of MARKET_ERRORS): by its code in the market codespace
    (a transaction's reply), else by its message in the text (the CLI's error when its simulation refused the
    message, as with the chart's ``gas: auto``, so that nothing was broadcast)."""
    if codespace == "market" and code in MARKET_ERRORS:
        return MARKET_ERRORS[code][0]
    found = [(len(message), name) for name, message in MARKET_ERRORS.values() if message in text]
    return max(found)[1] if found else ""


def tx_error(stdout: str) -> str:
    """'' when the transaction's reply says its block accepted it (code 0), else why not: the chain's name for
    the refusal where it has one, the codespace and code, and its raw_log, cut."""
    try:
        reply = json.loads(stdout)
        code = int(reply.get("code", 0))
        codespace = str(reply.get("codespace") or "")
    except (ValueError, TypeError, AttributeError):
        return "the transaction's reply is not JSON"
    if code == 0:
        return ""
    raw = str(reply.get("raw_log", ""))
    name = chain_error(raw, code, codespace)
    return f"{name + ' ' if name else ''}({codespace or 'no codespace'} code {code}): {raw[:200]}"


# The controllers whose pods are a lease's: Akash's provider runs each service of a lease as a Deployment (its pods
# owned by the Deployment's ReplicaSet) or, with persistent storage, a StatefulSet, in the lease's namespace
# (akash-network/provider cluster/kube/builder: deployment.go @010080f3, statefulset.go @ab942eee, namespace.go
# @2859d546).  A kubelet may create only mirror pods, owned by its own Node (NodeRestriction, kubernetes@aab56e9b
# admitPodCreate): a taken rig can label one as any lease's, in any lease's namespace, but cannot give it these.
WORKLOADS = {("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet")}
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def made_by_provider(pod: Mapping[str, Any]) -> bool:
    """Whether the pod is one the provider's workloads made: its controller (the one owner reference with
    ``controller: true``) a ReplicaSet or StatefulSet, and no mirror pod of a kubelet's."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}):
        return False
    owners = meta.get("ownerReferences")
    controllers = [o for o in owners if isinstance(o, dict) and o.get("controller") is True] \
        if isinstance(owners, list) else []
    return len(controllers) == 1 and (controllers[0].get("apiVersion"), controllers[0].get("kind")) in WORKLOADS


# What m2p's gate hook prints when it refuses a container (agent/gate.py, main); the runtime's error carries it.
GATE_SAYS = "m2p gate: GPUs not handed over: "


def gate_refusal(pod: Mapping[str, Any]) -> str:
    """Why m2p's gate refuses a container of the pod ('' when it refuses none now).  The hook's stderr reaches the
    container's status in the runtime's error (containerd: reason ``StartError``, exit 128) in ``state.terminated``
    or, while the kubelet backs off, ``lastState.terminated``.  A container running now is not refused, whatever
    its last state says."""
    status = pod.get("status")
    status = status if isinstance(status, dict) else {}
    listed = [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]
    for item in listed if all(isinstance(x, dict) for x in listed) else []:
        state = item.get("state") if isinstance(item.get("state"), dict) else {}
        if "running" in state:
            continue
        last = item.get("lastState") if isinstance(item.get("lastState"), dict) else {}
        for part in (state.get("waiting"), state.get("terminated"), last.get("terminated")):
            message = part.get("message") if isinstance(part, dict) else None
            if isinstance(message, str) and GATE_SAYS in message:
                # The hook's line ends at its newline; the runtime adds its own ending (": unknown") after it.
                why = " ".join(message.split(GATE_SAYS, 1)[1].split("\n", 1)[0].split())
                return why[:120].rstrip(" :") or "no reason given"
    return ""
