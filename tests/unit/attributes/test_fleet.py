"""Fleet attributes: the lowest CUDA, region handling, unknown cards; `m2p attributes --from`."""

import json

from miner2provider import cli
from miner2provider.detect.facts.base import Output
from miner2provider.detect.facts.gpu import GpusFact
from miner2provider.market.akash.provider import fleet_attributes
from miner2provider.market.base import RigGpus

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


def test_amd_cards_get_akash_labels_with_vendor_amd_from_a_report_and_are_never_converted(tmp_path, capsys):
    """Issue 15: AMD cards read from sysfs (an RX 7900 XTX rig and a two-RX 580 rig beside an NVIDIA one)."""
    def amd(slot, device, revision, vram):
        return {"pci_slot": slot, "device_id": device, "revision": revision, "subsystem_id": "1da2:e471",
                "vram_bytes": vram}
    none = {"state": "no-nvidia-smi", "error": "", "gpus": []}
    report = [
        {"name": "red1", "facts": {"gpus": none, "cuda": "", "amd_gpus": [amd("0000:0b:00.0", "744c", "c8", 24 << 30)]}},
        {"name": "red2", "facts": {"gpus": none, "cuda": "", "amd_gpus": [
            amd("0000:01:00.0", "67df", "e7", 8 << 30), amd("0000:02:00.0", "67df", "e7", 8 << 30),
            amd("0000:03:00.0", "7550", "c0", 16 << 30)]}},  # a card m2p's list lacks
    ]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    assert cli.main(["attributes", "--from", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    red1 = out["rigs"]["red1"]
    assert red1["labels"] == {
        "akash.network/capabilities.gpu.vendor.amd.model.rx7900xtx": "1",
        "akash.network/capabilities.gpu.vendor.amd.model.rx7900xtx.ram.24Gi": "1",
        "akash.network/capabilities.gpu.vendor.amd.model.rx7900xtx.interface.pcie": "1",
        "m2p.io/amd-gpus": "1"}
    assert any("not converted yet" in w for w in red1["warnings"])
    assert out["rigs"]["red2"]["labels"]["akash.network/capabilities.gpu.vendor.amd.model.rx580"] == "2"
    assert any("unknown AMD card 1002:7550 revision c0" in w for w in out["rigs"]["red2"]["warnings"])
    keys = [a["key"] for a in out["attributes"]]
    assert {"key": "capabilities/gpu", "value": "amd"} in out["attributes"]
    assert "capabilities/gpu/vendor/amd/model/rx7900xtx/ram/24Gi/interface/pcie" in keys
    assert "capabilities/gpu/vendor/amd/model/rx580/ram/8Gi" in keys
    path.write_text(json.dumps([{"name": "red1", "facts": {"gpus": none, "amd_gpus": [amd("x", "744c", "c8", 1)]}}]))
    assert cli.main(["attributes", "--from", str(path)]) == 2
    assert "red1: AMD GPU 0 pci_slot must be a PCI slot" in capsys.readouterr().err
