"""Kubernetes lines: end of life, one minor line per upgrade, the version-skew policy; and
convert's refusal of a rig whose k3s would break one of them (before anything runs)."""

from __future__ import annotations

from datetime import date

import pytest

from miner2provider.core import collection, k8s_lines


def test_the_pinned_line_is_in_the_table_and_supported_today():
    pin = str(collection.role_defaults("k3s")["k3s_version"])
    assert k8s_lines.end_of_life(pin) is not None
    assert k8s_lines.past_end_of_life(pin, date(2026, 11, 23)) is None
    last_v1 = str(collection.role_defaults("k3s")["k3s_cgroup_v1_last_line"])
    assert k8s_lines.line(last_v1) == k8s_lines.line(pin)  # today the v1 rigs share the pin


@pytest.mark.parametrize("installed, target, refused", [
    ("v1.35.3+k3s1", "v1.35.3+k3s1", None),
    ("v1.34.1+k3s1", "v1.35.3+k3s1", None),
    ("v1.33.2+k3s1", "v1.35.3+k3s1", "convert with k3s 1.34 first"),
    ("v1.35.3+k3s1", "v1.34.1+k3s1", "does not downgrade a server"),
    ("unknown", "v1.35.3+k3s1", None),
])
def test_one_minor_line_per_upgrade(installed, target, refused):
    said = k8s_lines.skipped_line(installed, target)
    assert (said is None) if refused is None else (refused in said)


@pytest.mark.parametrize("server, agent, refused", [
    ("v1.35.3+k3s1", "v1.35.3+k3s1", None),
    ("v1.35.3+k3s1", "v1.32.0+k3s1", None),  # a kubelet may lag three lines
    ("v1.35.3+k3s1", "v1.31.0+k3s1", "more than 3 minor lines older"),
    ("v1.34.1+k3s1", "v1.35.3+k3s1", "newer than its server's 1.34"),
])
def test_version_skew_policy(server, agent, refused):
    said = k8s_lines.skew(server, agent)
    assert (said is None) if refused is None else (refused in said)


def test_convert_refuses_an_agent_newer_than_its_server_and_a_skipped_line(tmp_path):
    from test_readiness import facts  # tests/unit is on sys.path (no package)

    from miner2provider.core import inventory
    from miner2provider.detect.report import RigReport
    from miner2provider.fleet import guards, pipeline

    inv = tmp_path / "rigs.yml"
    inv.write_text("all:\n  children:\n    k3s_server:\n      hosts:\n        s1: {ansible_host: 10.0.0.1, "
                   "k3s_version: v1.34.1+k3s1}\n    k3s_agent:\n      hosts:\n        a1: {ansible_host: 10.0.0.2}\n")
    hosts = {h.name: h for h in inventory.load(inv).hosts}
    derived = pipeline.fleet_role_vars(list(hosts.values()))
    targets = {name: guards.k3s_target(h, None) for name, h in hosts.items()}
    fresh = RigReport("a1", "10.0.0.2", facts(), None)
    said = guards.k3s_refusal(hosts["a1"], fresh, targets, derived["a1"])
    assert said == ("its k3s 1.35 is newer than its server's 1.34: a kubelet may not be newer than the API server "
                    "(s1); pin one k3s_version for both")
    old = RigReport("s1", "10.0.0.1", facts(installed="k3s k3s version v1.33.2+k3s1 (x)\n"), None)
    assert guards.k3s_refusal(hosts["s1"], old, targets, derived["s1"]) is None  # 1.33 -> 1.34: one line
    targets["s1"] = "v1.35.3+k3s1"
    assert "convert with k3s 1.34 first" in guards.k3s_refusal(hosts["s1"], old, targets, derived["s1"])
    patched = RigReport("s1", "10.0.0.1", facts(installed="k3s k3s version v1.35.4+k3s1 (x)\n"), None)
    assert guards.k3s_refusal(hosts["s1"], patched, targets, derived["s1"]) is None  # a patch back, same line
