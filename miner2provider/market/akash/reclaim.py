"""AEP-82 reclamation, planned (issue 36's first brick).  Pure: the reclaimer on the farm's server (to
come) reads the leases and the chain, asks ``plan`` what to send, and sends it.

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

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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
            if close_without_window:
                actions.append(Action("close", lease.id, now, "won without a reclamation window; the owner "
                                                              "opted to close such leases"))
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
            actions.append(Action("wait", lease.id, start, f"reclaim at {start:.0f}, {lease.window_s:.0f} s "
                                                           "before mining"))
        else:
            actions.append(Action("start-reclaim", lease.id, now, _late(deadline, mining_at)))
    return actions


def _late(deadline: float, mining_at: float) -> str:
    if deadline <= mining_at:
        return "its deadline comes before mining starts"
    return f"its deadline is {deadline - mining_at:.0f} s after mining should start: mining waits for it"
