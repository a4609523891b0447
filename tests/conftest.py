"""Shared pytest setup: the order the whole suite runs in."""

from __future__ import annotations

import pytest

# The slowest tests of a CI run (its --durations), slowest first.  scripts/test runs xdist's `load` with one
# test sent at a time (--maxschedchunk 1): a worker that finishes takes the next test of this order, so the long
# ones start first, side by side, and the short ones fill in behind them (the longest-first rule; xdist keeps one
# test queued on each worker, so the first two go to one worker, the next two to the next).  Under
# worksteal a worker that ran out took the back half of another's queue, so a long test left near the end
# became the run's tail with the others idle: a 3-worker run spent its last 4 minutes on the drift test alone.
# A name that no longer matches a test is harmless (the test runs in its place); re-read a CI log's durations
# when the suite changes (these: a 3-worker run under Mitogen's strategy on 2026-11-30).
SLOWEST_FIRST = (
    "tests/integration/test_convert.py::test_convert_twice_then_plan_revert_and_no_secret_anywhere",
    "tests/integration/test_agent.py::test_agent_switches_the_real_miner_survives_hello_and_a_reboot",
    "tests/integration/test_sites.py::test_rigs_behind_nat_at_two_sites_join_and_the_farm_runs_over_the_tunnel",
    "tests/integration/test_agent.py::test_a_lease_with_a_window_is_reclaimed_in_time_and_the_miner_runs_when",
    "tests/integration/test_convert.py::test_drift_is_repaired_an_upgrade_restarts_k3s_and_an_agent_reverts_alone",
    "tests/integration/test_faults.py::test_failed_convert_and_revert_leave_the_rigs_mining_and_the_next_run_converges",
    "tests/integration/test_molecule.py::test_molecule_scenario[nvidia_driver]",
    "tests/integration/test_molecule.py::test_molecule_scenario[convert]",
    "tests/integration/test_molecule.py::test_molecule_scenario[timeshare_agent]",
    "tests/integration/test_alerts.py::test_a_hot_card_leaves_the_market",
    "tests/integration/test_agent.py::test_every_adapted_mining_os_hands_the_gpus_to_a_lease_and_takes_them_back",
    "tests/integration/test_faults.py::test_connection_cut_mid_revert_leaves_the_rig_mining_and_the_next_revert",
    "tests/integration/test_old_rigs.py::test_old_pythons_convert_refuse_and_revert",
    "tests/integration/test_wheel.py::",  # the whole module: its tests share one built wheel (a module fixture)
    "tests/integration/test_agent.py::test_policy_profit_follows_the_economics_file_as_it_changes_and_never_cuts",
    "tests/integration/test_agent.py::test_lease_guard_convert_revert_and_apply_leave_a_leased_rig_alone_until",
    "tests/integration/test_molecule.py::test_molecule_scenario",
    "tests/integration/test_convert.py::test_rig_that_loses_power_mid_convert_converges_next_run",
)


def _rank(item: pytest.Item) -> tuple[int, int]:
    """(place among the slowest, 0 for an integration test and 1 for the rest): the slowest first, then the
    other integration tests, then the fast ones."""
    node = item.nodeid
    place = next((i for i, prefix in enumerate(SLOWEST_FIRST) if node.startswith(prefix)), len(SLOWEST_FIRST))
    return place, 0 if item.get_closest_marker("integration") else 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: each group keeps pytest's own order
