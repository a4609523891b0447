"""The farm's own card list in Akash's gpus.json shape: the entries Akash ships come out the same, the
fleet's cards Akash lacks are added, nothing else changes shape."""

from __future__ import annotations

import json
import re
from pathlib import Path

from miner2provider.detect.facts.amd import AmdGpu
from miner2provider.detect.facts.gpu import Gpu, Gpus
from miner2provider.market.akash.gpus_json import disputes, gpus_json
from miner2provider.market.akash.provider import fleet_attributes
from miner2provider.market.base import RigGpus

HERE = Path(__file__).parent
# Akash's shapes (provider-configs@2d04f4f devices/pcie/gpus.json; operator/inventory/registry.go)
SLUG, SIZE, INTERFACES = re.compile(r"^[a-z0-9-]+$"), re.compile(r"^[0-9]+Gi$"), {"PCIe", "SXM", "SXM2", "SXM3",
                                                                                "SXM4", "SXM5"}


def akash_entries() -> dict[str, tuple[str, str, str]]:
    rows = [line.split() for line in (HERE / "akash_nvidia_2d04f4f.txt").read_text().splitlines()
            if line and not line.startswith("#")]
    return {device: (name, interface, size) for device, name, interface, size in rows}


def gpu(device: str, name: str, mib: int) -> Gpu:
    return Gpu(0, name, "GPU-x", "00000000:01:00.0", "10de", device, "0x00000000", mib, "550.54")


def test_akashs_entries_come_out_the_same_and_the_fleets_missing_cards_are_added(tmp_path):
    fleet = [RigGpus("rig01", Gpus("ok", (gpu("2206", "NVIDIA GeForce RTX 3080", 10240),
                                          gpu("2204", "NVIDIA GeForce RTX 3090", 24576))), "12.4"),
             RigGpus("rig02", Gpus("ok", (gpu("abcd", "NVIDIA Mystery Card", 8192),)), "12.4",
                     amd=(AmdGpu("0000:03:00.0", "73bf", "c1", "1002:0e3a", 16 << 30),
                          AmdGpu("0000:04:00.0", "67df", "e7", "1da2:e366", 0)))]  # no amdgpu driver: no size
    card_list, lacking = gpus_json(fleet)
    nvidia = card_list["10de"]["devices"]
    assert card_list["10de"]["name"] == "nvidia" and card_list["1002"]["name"] == "amd"
    for device, (name, interface, size) in akash_entries().items():
        ours = nvidia[device]
        assert (ours["name"], ours["memory_size"]) == (name, size), device
        # the operator's labels fold SXM2..SXM5 to sxm, as m2p's database does
        assert ours["interface"] == interface or (interface.startswith("SXM") and ours["interface"] == "SXM")
    assert nvidia["2206"] == {"name": "rtx3080", "interface": "PCIe", "memory_size": "10Gi"}
    assert nvidia["abcd"] == {"name": "mysterycard", "interface": "PCIe", "memory_size": "8Gi"}
    # (73bf is RX 6800, 6800 XT and 6900 XT by revision; Akash matches the device ID only: one name per ID)
    assert card_list["1002"]["devices"] == {"73bf": {"name": "rx6800xt", "interface": "PCIe", "memory_size": "16Gi"}}
    assert "10de:2206 rtx3080" in lacking and "10de:abcd mysterycard" in lacking and "1002:73bf rx6800xt" in lacking
    assert not any(entry.startswith("10de:2204 ") for entry in lacking)
    for vendor in card_list.values():  # every entry in Akash's shape, exactly its keys
        for device, body in vendor["devices"].items():
            assert re.fullmatch(r"[0-9a-f]{4}", device) and set(body) == {"name", "interface", "memory_size"}
            assert SLUG.match(body["name"]) and SIZE.match(body["memory_size"]) and body["interface"] in INTERFACES


def test_the_command_writes_the_list(tmp_path, capsys, saved_report):
    from miner2provider.cli import main

    report = saved_report(("NVIDIA CMP 90HX", "2249", 10240))
    out = tmp_path / "gpus.json"
    code = main(["attributes", "--from", str(report), "--gpus-json", str(out)])
    assert code == 0, capsys.readouterr()
    written = json.loads(out.read_text())
    assert written["10de"]["devices"]["2249"]["name"] == "cmp90hx"
    assert f"wrote {out}:" in capsys.readouterr().err


def test_a_rig_cannot_name_another_rigs_unknown_card():
    """rig-b reports the card rig-a has (10de:2d04, an RTX 5060 Ti, not in m2p's database) under another name and size: an
    ATTACK from one rig on the others' labels, since the operator labels every node's 2d04 from one entry."""
    honest = RigGpus("rig-a", Gpus("ok", (gpu("2d04", "NVIDIA GeForce RTX 5060 Ti", 16311),)), "12.4")
    liar = RigGpus("rig-b", Gpus("ok", (gpu("2d04", "NVIDIA H100 80GB HBM3", 81920),)), "12.4")
    for fleet in ([liar, honest], [honest, liar]):  # whoever comes first
        card_list, lacking = gpus_json(fleet)
        assert "2d04" not in card_list["10de"]["devices"] and not any(e.startswith("10de:2d04") for e in lacking)
        (said,) = disputes(fleet)
        assert said.startswith("rigs name card 10de:2d04 differently (") and "rig-a: rtx5060ti 16Gi" in said
        assert re.search(r"rig-b: h10080[0-9a-f]{5} 80Gi", said) and "leaves it out" in said
        # The provider's attributes advertise each rig's own card as that rig names it.
        attributes = dict(fleet_attributes(fleet).attributes)
        assert "capabilities/gpu/vendor/nvidia/model/rtx5060ti/ram/16Gi" in attributes
        assert said in fleet_attributes(fleet).warnings
    # Rigs that agree give the entry; a known card is the database's whatever a rig calls it.
    twin = RigGpus("rig-c", Gpus("ok", (gpu("2d04", "NVIDIA GeForce RTX 5060 Ti", 16311), gpu("2204", "Fake Name", 1024))),
                   "12.4")
    card_list, _ = gpus_json([honest, twin])
    assert card_list["10de"]["devices"]["2d04"] == {"name": "rtx5060ti", "interface": "PCIe", "memory_size": "16Gi"}
    assert card_list["10de"]["devices"]["2204"]["name"] == "rtx3090" and disputes([honest, twin]) == []


def test_a_rig_cannot_size_another_rigs_amd_card():
    six = AmdGpu("0000:03:00.0", "73bf", "c1", "1002:0e3a", 16 << 30)
    big = AmdGpu("0000:03:00.0", "73bf", "c1", "1002:0e3a", 64 << 30)  # the same card, claimed with 64 GiB
    fleet = [RigGpus("rig-b", Gpus("ok", ()), "12.4", amd=(big,)), RigGpus("rig-a", Gpus("ok", ()), "12.4", amd=(six,))]
    card_list, _ = gpus_json(fleet)
    assert "1002" not in card_list and "1002:73bf" in disputes(fleet)[0]
