"""Fixtures the unit tests share."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def saved_report(tmp_path: Path) -> Callable[..., Path]:
    """A saved `m2p detect --json` report of one rig with these NVIDIA cards: (name, device id, MiB)."""

    def write(*cards: tuple[str, str, int]) -> Path:
        gpus = [{"index": n, "name": name, "uuid": f"GPU-{n}", "pci_bus_id": f"00000000:0{n + 1}:00.0",
                 "vendor_id": "10de", "device_id": device, "subsystem_id": "0x00000000", "memory_mib": mib,
                 "driver_version": "550.54"} for n, (name, device, mib) in enumerate(cards)]
        path = tmp_path / "report.json"
        path.write_text(json.dumps([{"name": "rig01", "address": "10.0.0.1", "status": "ready", "facts": {
            "gpus": {"state": "ok", "gpus": gpus}, "cuda": "12.4", "amd_gpus": []}}]))
        return path

    return write
