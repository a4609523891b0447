"""The GPU database: schema, unique ids, slug format, and Akash's list fully covered."""

import re
from pathlib import Path

import yaml

from miner2provider.detect.facts.gpu import Gpu
from miner2provider.market import cards as database
from miner2provider.market.akash.gpus_json import entry_line

HERE = Path(__file__).parent


def akash_entries():
    for line in (HERE / "akash_nvidia_2d04f4f.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            device, slug, iface, memory = line.split()
            yield device, slug, iface, memory


def test_schema_and_formats():
    raw = yaml.safe_load(database.DATABASE.read_text())
    devices = raw["vendors"]["10de"]["devices"]
    fields = {"slug", "name", "memory", "interface", "architecture", "compute_capability", "listed", "source"}
    for device, entry in devices.items():
        assert re.fullmatch(r"[0-9a-f]{4}", device), device
        assert set(entry) == fields, device
        assert database.SLUG.match(entry["slug"]), entry["slug"]
        assert database.MEMORY.match(entry["memory"]), entry["memory"]
        assert entry["interface"] in {"pcie", "sxm"}
        assert re.fullmatch(r"\d+\.\d", entry["compute_capability"])
        assert entry["source"].strip()


def test_ids_are_unique_in_the_file():
    # YAML would silently keep the last of two equal keys: count them in the text.
    ids = re.findall(r'^      "([0-9a-f]{4})":', database.DATABASE.read_text(), re.M)
    assert len(ids) == len(set(ids)) == len(database.load())


def test_every_akash_entry_is_covered_with_its_slug_and_memory():
    cards = database.load()
    entries = list(akash_entries())
    assert len(entries) == 96
    for device, slug, iface, memory in entries:
        card = cards[f"10de:{device}"]
        assert (card.slug, card.memory, card.listed) == (slug, memory, True), device
        assert card.interface == ("sxm" if iface.lower().startswith("sxm") else "pcie")
    assert sum(c.listed for c in cards.values()) == 96


def test_mining_cards_akash_lacks_are_present():
    cards = database.load()
    wanted = {"2206": "rtx3080", "2208": "rtx3080ti", "2482": "rtx3070ti", "2207": "rtx3070ti",
              "2414": "rtx3060ti", "21c4": "gtx1660s", "1c07": "p106100", "1b87": "p104100",
              "220d": "cmp90hx", "248a": "cmp70hx", "2082": "cmp170hx", "20c2": "cmp170hx", "1e09": "cmp50hx",
              "1f0b": "cmp40hx", "2189": "cmp30hx"}
    for device, slug in wanted.items():
        card = cards[f"10de:{device}"]
        assert card.slug == slug and not card.listed, device


def test_unknown_card_gets_a_derived_flagged_slug_and_upstream_entry():
    gpu = Gpu(0, "NVIDIA GeForce RTX 5060 Ti", "GPU-x", "00000000:01:00.0", "10de", "2d04", "0x0", 16311, "575.57")
    card = database.card_for(gpu)
    assert (card.slug, card.memory, card.known) == ("rtx5060ti", "16Gi", False)
    assert entry_line(card) == '"2d04": {"name": "rtx5060ti", "interface": "PCIe", "memory_size": "16Gi"}'
