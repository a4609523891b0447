"""The marketplace seam (market/base.py): every caller asks for the rig's or the farm's marketplace, a
marketplace's rules come from it, and the provider installer is a capability callers ask about."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from ansible.plugins.action import ActionBase
from test_readiness import GPU_ROW, facts  # tests/unit is on sys.path (no package)

from ansible_collections.m2p.rigs.plugins.action import m2p_facts
from miner2provider import market
from miner2provider.core.errors import ProviderError
from miner2provider.detect.readiness import Thresholds, assess
from miner2provider.fleet.bundle import charts
from miner2provider.market import AKASH, of_farm, of_rig
from miner2provider.market.base import Marketplace, OfflineFiles, ProviderInstaller, PublicTarget, provider_installer

MIXED = GPU_ROW + GPU_ROW.replace("0, NVIDIA GeForce RTX 3090", "1, NVIDIA GeForce RTX 3060")


@dataclasses.dataclass(frozen=True)
class Listed:
    """A marketplace that lists rigs by their labels and installs no provider: the listing part alone."""

    name: str = "listed"
    label: str = "Listed"
    system_namespaces: tuple[str, ...] = ()
    lease_label: str = "listed.example/lease"
    one_model_per_node: str = ""

    def unlisted_card(self, pci_id: str) -> str:
        return ""

    def region_problem(self, region: str) -> str:
        return ""

    def node_labels(self, gpus: Any, cuda: str, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {}

    def fleet_attributes(self, rigs: Any, region: str | None = None) -> Any:
        return None

    def card_list(self, rigs: Any) -> tuple[dict[str, Any], list[str]]:
        return {}, []

    def price_mappings(self, floors: Any) -> str:
        return ""


def test_a_rig_s_marketplace_is_its_own_and_none_is_no_marketplace():
    assert of_rig({}) is AKASH  # unset: the setting's default
    assert of_rig({"m2p_marketplace": "akash"}) is AKASH
    assert of_rig({"m2p_marketplace": "none"}) is None


def test_a_farm_is_one_marketplace_s_provider():
    assert of_farm([{}, {"m2p_marketplace": "none"}]) is AKASH  # an owner's own rig beside offered ones
    with pytest.raises(ProviderError, match="every rig has m2p_marketplace: none"):
        of_farm([{"m2p_marketplace": "none"}])
    with pytest.raises(ProviderError, match=r"several marketplaces in m2p_marketplace \(akash, listed\)"):
        of_farm([{}, {"m2p_marketplace": "listed"}])


def test_the_provider_installer_is_a_capability_asked_about():
    listed: Marketplace = Listed()
    assert isinstance(AKASH, ProviderInstaller) and provider_installer(AKASH) is AKASH
    assert not isinstance(listed, ProviderInstaller)
    with pytest.raises(ProviderError, match="Listed has no provider m2p installs on the farm's server") as caught:
        provider_installer(listed)
    assert caught.value.exit_code == 8


def test_the_other_capabilities_are_asked_about_too():
    listed = Listed()
    assert isinstance(AKASH, OfflineFiles) and isinstance(AKASH, PublicTarget)
    assert not isinstance(listed, OfflineFiles) and not isinstance(listed, PublicTarget)
    assert charts.marketplace_files(listed) == [] and charts.marketplace_files(AKASH) == charts.marketplace_files()


def test_one_model_per_node_is_the_marketplace_s_rule():
    mixed = facts(gpus=MIXED)
    said = [f.sentence for f in assess(mixed, Thresholds(one_model_per_node=AKASH.one_model_per_node)).warnings
            if f.code == "mixed-gpus"]
    assert said == ["mixed GPU models on one node (NVIDIA GeForce RTX 3090, NVIDIA GeForce RTX 3060): Akash supports "
                    "one model per node"]
    assert "mixed-gpus" not in {f.code for f in assess(mixed, Thresholds(one_model_per_node="")).warnings}


def test_region_names_are_the_marketplace_s():
    assert AKASH.region_problem("eu-central") == ""
    assert AKASH.region_problem("eu central") == "letters, digits, '.', '_' and '-' only (such as eu-central)"


def run_m2p_facts(monkeypatch, task_vars: dict[str, Any], gpus: str = GPU_ROW) -> dict[str, Any]:
    """The action plugin on a rig whose probe says ``facts(gpus=...)``: its facts (no connection, no Ansible run)."""
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    monkeypatch.setattr(m2p_facts.probe, "gather", lambda stdout: facts(gpus=gpus))
    plugin = object.__new__(m2p_facts.ActionModule)
    plugin._task = SimpleNamespace(args={"label_extra": {"schedule": "night"}})  # type: ignore[assignment]
    plugin._low_level_execute_command = lambda *a, **k: {"rc": 0, "stdout": ""}  # type: ignore[method-assign]
    data: dict[str, Any] = plugin.run(task_vars=task_vars)["ansible_facts"]["m2p"]
    return data


def test_m2p_facts_writes_the_rig_s_marketplace_labels_and_none_on_none(monkeypatch):
    offered = run_m2p_facts(monkeypatch, {})
    assert offered["gpu_labels"] == AKASH.node_labels(facts().gpus, facts().cuda, {"schedule": "night"})
    assert any(key.startswith("akash.network/") for key in offered["gpu_labels"])
    own = run_m2p_facts(monkeypatch, {"m2p_marketplace": "none"})
    assert own["gpu_labels"] == {k: v for k, v in offered["gpu_labels"].items() if not k.startswith("akash.network/")}
    assert own["gpu_labels"]["m2p.io/schedule"] == "night" and own["market_warnings"] == []


def test_m2p_facts_applies_the_rig_s_marketplace_rules_only(monkeypatch):
    offered = run_m2p_facts(monkeypatch, {"m2p_marketplace": "akash"}, MIXED)
    assert "mixed-gpus" in offered["readiness"]["warning_codes"]
    assert "Akash supports one model per node" in " ".join(offered["readiness"]["warnings"])
    own = run_m2p_facts(monkeypatch, {"m2p_marketplace": "none"}, MIXED)
    assert "mixed-gpus" not in own["readiness"]["warning_codes"]


def test_m2p_facts_says_the_cards_the_rig_s_marketplace_does_not_list(monkeypatch):
    p102 = GPU_ROW.replace("NVIDIA GeForce RTX 3090", "NVIDIA P102-100").replace("0x220410DE", "0x1B0710DE")
    offered = run_m2p_facts(monkeypatch, {}, p102 + p102.replace("0, NVIDIA", "1, NVIDIA"))
    assert offered["market_warnings"] == ["GPU 10de:1b07 is not in Akash's database: the marketplace will not see it "
                                          "(m2p attributes prints the entry to add)"]
    assert run_m2p_facts(monkeypatch, {"m2p_marketplace": "none"}, p102)["market_warnings"] == []


def test_every_registered_marketplace_is_a_marketplace():
    for name, found in market.MARKETPLACES.items():
        assert found.name == name and market.marketplace(name) is found
