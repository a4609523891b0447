"""AEP-82 reclamation planned (market/akash/reclaim.py, issue 36's first brick), by property: no close is
ever sent before a deadline; a mining window starts no later than planned when every lease on the node has
a window no longer than its lead (less the margin a transaction takes to land); leases without a window are never reclaimed (closed only on opt-in)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.market.akash.address import encode
from miner2provider.market.akash.reclaim import LABEL, MARGIN_S, Lease, LeaseId, lease_id, plan

OWNER, PROVIDER = encode(bytes(range(20))), encode(bytes(range(20, 40)))
HOUR = 3600.0

leases = st.lists(st.builds(
    lambda dseq, window, reclaiming_for: Lease(LeaseId(OWNER, dseq, 1, 1, PROVIDER), window,
                                               None if window is None or reclaiming_for is None
                                               else 1_000_000 + window - reclaiming_for),
    st.integers(1, 10**9), st.one_of(st.none(), st.floats(HOUR, 720 * HOUR)),
    st.one_of(st.none(), st.floats(0, 720 * HOUR))), max_size=6, unique_by=lambda lease: lease.id)


def run_until_quiet(start: list[Lease], now: float, mining_at: float, opt_in: bool = False):
    """Follow the plan as the reclaimer would: send what is due, wake at the next wait, until nothing waits.
    Returns (the sends, by time; the leases still there)."""
    live = {lease.id: lease for lease in start}
    sent: list[tuple[float, str, Lease]] = []
    t = now
    for _ in range(100):
        actions = plan(live.values(), t, mining_at, opt_in)
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
def test_no_close_before_a_deadline_and_no_reclaim_without_a_window(start, lead, opt_in):
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
def test_mining_starts_on_time_when_every_window_fits_the_lead(start, lead):
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


def test_a_window_longer_than_the_lead_is_said():
    lease = Lease(LeaseId(OWNER, 7, 1, 1, PROVIDER), 24 * HOUR)
    (action,) = plan([lease], 0.0, 2 * HOUR)
    assert action.kind == "start-reclaim" and "mining waits for it" in action.why


def test_a_lease_id_comes_from_akashs_namespace_labels_and_nothing_else():
    labels = {LABEL + "owner": OWNER, LABEL + "dseq": "123", LABEL + "gseq": "1", LABEL + "oseq": "1",
              LABEL + "provider": PROVIDER, "akash.network": "true"}
    assert lease_id(labels) == LeaseId(OWNER, 123, 1, 1, PROVIDER)
    for bad in ({LABEL + "dseq": "-1"}, {LABEL + "dseq": "1e3"}, {LABEL + "owner": "akash1short"},
                {LABEL + "provider": OWNER.upper()}, {LABEL + "oseq": ""}):
        assert lease_id({**labels, **bad}) is None, bad
    assert lease_id({"akash.network": "true"}) is None
