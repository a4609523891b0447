"""m2p schedule apply's choice of schedule per rig, and what the agent takes for a lease."""

from __future__ import annotations

import pytest

from miner2provider.core import inventory
from miner2provider.core.errors import EconomicsError, ScheduleError
from miner2provider.rigside import kube
from miner2provider.timeshare.apply import economics_files, schedule_files

GOOD = "timezone: UTC\npolicy: lease-first\n"


def farm(tmp_path, rig02_vars=""):
    (tmp_path / "sched").mkdir()
    (tmp_path / "sched" / "night.yml").write_text(GOOD)
    inv = tmp_path / "rigs.yml"
    inv.write_text("all:\n  hosts:\n    rig01:\n      ansible_host: 10.0.0.1\n"
                   f"    rig02:\n      ansible_host: 10.0.0.2\n{rig02_vars}")
    return inventory.load(inv)


def test_a_rigs_own_schedule_is_relative_to_the_inventory_and_wins(tmp_path):
    inv = farm(tmp_path, "      m2p_schedule: sched/night.yml\n")
    (tmp_path / "all.yml").write_text(GOOD)
    files = schedule_files(list(inv.hosts), str(tmp_path / "all.yml"), inv.path)
    assert files == {"rig01": str(tmp_path / "all.yml"), "rig02": str(tmp_path / "sched" / "night.yml")}


def test_a_bad_rig_schedule_names_its_line_and_the_rig(tmp_path):
    inv = farm(tmp_path, "      m2p_schedule: sched/bad.yml\n")
    (tmp_path / "sched" / "bad.yml").write_text("timezone: Mars/Olympus\npolicy: fixed\n")
    (tmp_path / "all.yml").write_text(GOOD)
    with pytest.raises(ScheduleError, match=r"unknown timezone 'Mars/Olympus'.*\(m2p_schedule of rig02, .*rigs.yml:5\)") as err:
        schedule_files(list(inv.hosts), str(tmp_path / "all.yml"), inv.path)
    assert err.value.where == f"{tmp_path / 'sched' / 'bad.yml'}:1"


def test_a_rig_without_any_schedule_is_refused(tmp_path):
    inv = farm(tmp_path)
    with pytest.raises(ScheduleError, match="rig01 has no schedule: give FILE or set m2p_schedule"):
        schedule_files(list(inv.hosts), None, inv.path)
    with pytest.raises(ScheduleError, match="schedule not found"):
        schedule_files(list(inv.hosts), str(tmp_path / "missing.yml"), inv.path)


PROFIT = "timezone: UTC\npolicy: profit\n"


def test_policy_profit_needs_an_economics_file_and_a_rigs_own_wins(tmp_path):
    inv = farm(tmp_path, "      m2p_economics: sched/rig02-economics.yml\n")
    (tmp_path / "profit.yml").write_text(PROFIT)
    schedules = schedule_files(list(inv.hosts), str(tmp_path / "profit.yml"), inv.path)
    with pytest.raises(ScheduleError, match="rig01's schedule has policy profit, which needs an economics file") as err:
        economics_files(list(inv.hosts), None, inv.path, schedules)
    assert err.value.where == f"{inv.path}:3"
    (tmp_path / "sched" / "rig02-economics.yml").write_text("lease_price_per_gpu_hour: {default: 0.2}\n")
    (tmp_path / "all-economics.yml").write_text("margin: 0.1\n")
    assert economics_files(list(inv.hosts), str(tmp_path / "all-economics.yml"), inv.path, schedules) == {
        "rig01": str(tmp_path / "all-economics.yml"), "rig02": str(tmp_path / "sched" / "rig02-economics.yml")}
    # Other policies need none: a rig without one is left out.
    (tmp_path / "profit.yml").write_text(GOOD)
    assert economics_files(list(inv.hosts), None, inv.path, schedules) == {
        "rig02": str(tmp_path / "sched" / "rig02-economics.yml")}


def test_a_bad_rig_economics_file_names_its_line_and_the_rig(tmp_path):
    inv = farm(tmp_path, "      m2p_economics: sched/bad.yml\n")
    (tmp_path / "sched" / "bad.yml").write_text("margin: 0.1\nmargin: 0.2\n")
    schedules = {"rig01": str(tmp_path / "sched" / "night.yml"), "rig02": str(tmp_path / "sched" / "night.yml")}
    with pytest.raises(EconomicsError, match=r"margin is given twice \(m2p_economics of rig02, .*rigs.yml:5\)") as err:
        economics_files(list(inv.hosts), None, inv.path, schedules)
    assert err.value.where == f"{tmp_path / 'sched' / 'bad.yml'}:2"


def test_a_gpu_pod_is_a_lease_except_the_old_placeholder_in_m2ps_namespace():
    """A tenant's pod dressed like the first design's placeholder holds GPUs as a lease; the
    placeholder itself (m2p-system, until its DaemonSet lets it go) does not (no marketplace label here)."""
    labels = {"app.kubernetes.io/name": "m2p-placeholder"}
    spec = {"containers": [{"resources": {"limits": {kube.GPU_RESOURCE: "2"}}}]}
    fake = {"metadata": {"namespace": "tenant", "labels": labels}, "spec": spec, "status": {"phase": "Running"}}
    old = {"metadata": {"namespace": "m2p-system", "labels": labels}, "spec": spec, "status": {"phase": "Running"}}
    assert kube.LeaseRule().gpu_leases([fake, old]) == [fake]


def test_with_a_marketplace_only_its_labelled_pods_are_leases():
    """Akash's provider labels every pod of a lease's workloads akash.network/manifest-service=<service>; a
    kube-system monitoring DaemonSet with GPUs, the owner's own GPU job and the provider's own pod are no lease."""
    from miner2provider.market import AKASH

    gpus = {"containers": [{"resources": {"limits": {kube.GPU_RESOURCE: "1"}}}]}
    def pod(namespace, labels, owner=None):
        meta = {"namespace": namespace, "name": "p", "labels": labels,
                "ownerReferences": [{"kind": owner}] if owner else []}
        return {"metadata": meta, "spec": gpus, "status": {"phase": "Running"}}
    lease = pod("4ml5k0vq9o", {"akash.network": "true", AKASH.lease_label: "web"})
    dcgm = pod("kube-system", {"app": "dcgm-exporter"}, owner="DaemonSet")
    own = pod("default", {"app": "owners-job"})
    provider = pod("akash-services", {"akash.network": "true", "app": "akash-provider"})
    rule = kube.LeaseRule(AKASH.lease_label, AKASH.system_namespaces)
    assert rule.gpu_leases([lease, dcgm, own, provider]) == [lease]
    # No marketplace (m2p_marketplace: none): every pod of a namespace that is not the cluster's own.
    assert kube.LeaseRule().gpu_leases([lease, dcgm, own, provider]) == [lease, own, provider]
