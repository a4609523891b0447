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
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

REASON_UNSPECIFIED = 10002
MARGIN_S = 60.0
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
class Action:
    kind: str  # start-reclaim | close | wait | leave
    lease: LeaseId
    at: float  # when to send it (wait, leave: when the lease may end on its own, or the deadline)
    why: str


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


def plan(leases: Iterable[Lease], now: float, mining_at: float, close_without_window: bool = False,
         margin_s: float = MARGIN_S) -> list[Action]:
    """What to send for each lease on a node that must mine from ``mining_at``; never a close before a
    deadline, never a reclaim of a lease without a window."""
    actions = []
    for lease in sorted(leases, key=lambda item: item.id):
        if lease.window_s is None:
            if close_without_window:  # cut when mining is due (less the margin for the close to land), not sooner
                at = mining_at - margin_s
                kind = "close" if now >= at else "wait"
                actions.append(Action(kind, lease.id, max(now, at), "won without a reclamation window; the owner "
                                                                    "opted to close such leases when mining is due"))
            else:
                actions.append(Action("leave", lease.id, now, "won without a reclamation window: it cannot be "
                                                              "reclaimed; mining waits until it ends"))
            continue
        if lease.deadline is not None:  # reclaiming already
            kind = "close" if now >= lease.deadline else "wait"
            actions.append(Action(kind, lease.id, max(now, lease.deadline), _late(lease.deadline, mining_at)))
            continue
        start = max(now, mining_at - lease.window_s - margin_s)
        deadline = start + lease.window_s
        if start > now:
            actions.append(Action("wait", lease.id, start, f"reclaim at {utc(start)}, {lease.window_s:.0f} s "
                                                           "before mining"))
        else:
            actions.append(Action("start-reclaim", lease.id, now, _late(deadline, mining_at)))
    return actions


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


def start_argv(lease: LeaseId, reason: int = REASON_UNSPECIFIED) -> list[str]:
    if reason not in REASONS:
        raise ValueError(f"reason {reason} is not a provider's (10000-19999)")
    return ["provider-services", "tx", "market", "bid", "start-reclaim", *_lease_flags(lease), "--reason",
            str(reason), "--yes", "--output", "json"]


def close_argv(lease: LeaseId) -> list[str]:
    return ["provider-services", "tx", "market", "bid", "close", *_lease_flags(lease), "--yes", "--output", "json"]


def tx_error(stdout: str) -> str:
    """'' when the transaction's reply says it was accepted (code 0), else why not (its raw_log, cut)."""
    try:
        reply = json.loads(stdout)
        code = int(reply.get("code", 0))
    except (ValueError, TypeError, AttributeError):
        return "the transaction's reply is not JSON"
    return "" if code == 0 else f"code {code}: {str(reply.get('raw_log', ''))[:200]}"
