"""Fleet attributes: the lowest CUDA, region handling, unknown cards; `m2p attributes --from`."""

import json

from miner2provider import cli
from miner2provider.attributes.provider import RigGpus, fleet_attributes
from miner2provider.facts.base import Output
from miner2provider.facts.gpu import GpusFact

ROW_3090 = "0, NVIDIA GeForce RTX 3090, GPU-1, 00000000:01:00.0, 0x220410DE, 0x38801462, 24576, {drv}"
ROW_NEW = "0, NVIDIA GeForce RTX 5060 Ti, GPU-2, 00000000:01:00.0, 0x2D0410DE, 0x00000000, 16311, 575.57.08"


def rig(name, row, cuda, driver="550.127.05", region=None):
    return RigGpus(name, GpusFact.parse(Output(row.format(drv=driver) + "\n", 0)), cuda, region)


def test_cuda_is_the_lowest_any_rig_supports_and_differences_are_warned():
    fleet = fleet_attributes([rig("a", ROW_3090, "12.4"), rig("b", ROW_3090, "11.8", "520.61.05"),
                              rig("c", ROW_3090, "12.10")])
    assert ("cuda", "11.8") in fleet.attributes
    assert any("advertising cuda 11.8" in w for w in fleet.warnings)
    # 12.10 is newer than 12.4: versions compare as numbers, not text.
    assert dict(fleet_attributes([rig("a", ROW_3090, "12.10"), rig("b", ROW_3090, "12.4")]).attributes)["cuda"] == "12.4"


def test_region_from_rigs_or_option_and_conflicts():
    same = fleet_attributes([rig("a", ROW_3090, "12.4", region="eu-central"), rig("b", ROW_3090, "12.4", region="eu-central")])
    assert ("location-region", "eu-central") in same.attributes
    split = fleet_attributes([rig("a", ROW_3090, "12.4", region="eu"), rig("b", ROW_3090, "12.4", region="us")])
    assert "location-region" not in dict(split.attributes)
    assert any("different m2p_location_region" in w for w in split.warnings)
    forced = fleet_attributes([rig("a", ROW_3090, "12.4", region="eu")], region="us-west")
    assert ("location-region", "us-west") in forced.attributes
    assert all(k != "region" for k, _ in forced.attributes)  # the legacy key is never used


def test_unknown_card_is_labelled_flagged_and_has_an_upstream_entry():
    fleet = fleet_attributes([rig("x", ROW_NEW, "12.9")])
    labels = fleet.rigs[0].labels
    assert labels["akash.network/capabilities.gpu.vendor.nvidia.model.rtx5060ti"] == "1"
    assert labels["m2p.io/gpu-db"] == "unknown-card"
    assert any("unknown card 10de:2d04" in w for w in fleet.rigs[0].warnings)
    assert fleet.unknown_entries == ('"2d04": {"name": "rtx5060ti", "interface": "PCIe", "memory_size": "16Gi"}',)


def test_attributes_from_a_saved_report(tmp_path, capsys):
    report = [
        {"name": "hive1", "address": "10.0.0.1", "failure": None, "facts": {
            "gpus": {"state": "ok", "error": "", "gpus": [
                {"index": 0, "name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-1", "pci_bus_id": "00000000:01:00.0",
                 "vendor_id": "10de", "device_id": "2204", "subsystem_id": "0x38801462", "memory_mib": 24576,
                 "driver_version": "550.127.05"}]},
            "cuda": "12.4"}},
        {"name": "dead1", "address": "10.0.0.2", "failure": "timeout", "facts": None},
    ]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    code = cli.main(["attributes", "--from", str(path), "--json", "--region", "eu-central"])
    out = json.loads(capsys.readouterr().out)
    assert code == 11  # dead1 had failed when the report was made
    assert out["failed"] == ["dead1"]
    assert out["rigs"]["hive1"]["labels"]["akash.network/capabilities.gpu.vendor.nvidia.model.rtx3090"] == "1"
    assert {"key": "location-region", "value": "eu-central"} in out["attributes"]
    bad = tmp_path / "bad.json"
    bad.write_text('[\n{"name": 1,\n')
    assert cli.main(["attributes", "--from", str(bad)]) == 2
    assert f"{bad}:3: not JSON" in capsys.readouterr().err
