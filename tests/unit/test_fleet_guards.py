"""The lease guard's sentences and durations (fleet/guards.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from miner2provider.core.errors import UsageError
from miner2provider.fleet import guards as leases
from miner2provider.rigside.status import Lease

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def test_one_lease_refusal_reads_like_the_issue() -> None:
    text = leases.refusal("rig07", (Lease("tenant-ns/job-abc", "2026-11-22T09:00:00Z"),), NOW)
    assert text == "rig07: 1 lease running (pod tenant-ns/job-abc, 3 h): not touched; use --drain to wait for it"


def test_many_leases_are_counted_and_the_first_named() -> None:
    running = tuple(Lease(f"ns/job-{i}", "2026-11-22T11:59:15Z") for i in range(5)) + (Lease("ns/odd", ""),)
    text = leases.refusal("rig01", running, NOW)
    assert text.startswith("rig01: 6 leases running (pods ns/job-0, 45 s; ns/job-1, 45 s; ns/job-2, 45 s; 3 more)")
    assert text.endswith("use --drain to wait for them")


def test_drain_timeout_sentence() -> None:
    text = leases.drain_timed_out("rig02", (Lease("a/b", "2026-11-20T12:00:00Z"),), 7200, NOW)
    assert text == ("rig02: 1 lease still running after 2 h of --drain (a/b, 2 d): not touched; "
                    "the node is schedulable again")


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400), ("600", 600)])
def test_drain_timeout_durations(text: str, seconds: float) -> None:
    assert leases.parse_span(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "2 weeks", "-5m", "1.5h", "h"])
def test_bad_drain_timeouts_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match="--drain-timeout"):
        leases.parse_span(text)
