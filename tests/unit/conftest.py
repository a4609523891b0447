"""Fixtures the unit tests share."""

from __future__ import annotations

import http.server
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from m2p_sandbox.served import serve_in_background


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


@pytest.fixture
def trex_api() -> Iterator[Callable[[Callable[[], str]], tuple[int, list[str]]]]:
    """A STAND-IN T-Rex HTTP API on loopback: ``start(body)`` serves ``body()`` for every GET (the /summary fields
    measure.py and adopt_on_rig.py read) and returns its port and the paths asked, in order."""
    servers: list[http.server.HTTPServer] = []

    def start(body: Callable[[], str]) -> tuple[int, list[str]]:
        asked: list[str] = []

        class Summary(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                asked.append(self.path)
                text = body().encode()
                self.send_response(200)
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.HTTPServer(("127.0.0.1", 0), Summary)
        servers.append(server)
        serve_in_background(server)
        return server.server_port, asked

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
