"""The script that serves m2p's card list inside the cluster (market/akash/gpu_list.py SERVE), run for real
with bash and netcat-traditional (the nc of Akash's provider image: its Dockerfile installs
netcat-traditional on ubuntu:noble) on loopback, asked as Akash's inventory operator asks
(``GET <url>/devices/gpus``, one request every few minutes; here several in a row)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from miner2provider.market.akash import gpu_list


@pytest.fixture
def served(tmp_path):
    nc = shutil.which("nc.traditional")
    assert nc, "netcat-traditional is missing: scripts/install installs it (the provider image's nc)"
    listed = {"10de": {"name": "nvidia", "devices": {"220d": {"name": "cmp90hx", "interface": "PCIe",
                                                              "memory_size": "10Gi"}}}}
    (tmp_path / "gpus").write_text(json.dumps(listed))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = (gpu_list.SERVE.replace("/list/gpus", str(tmp_path / "gpus"))
              .replace(f"-p {gpu_list.PORT}", f"-p {port}").replace("nc -l", f"{nc} -l"))
    assert script != gpu_list.SERVE
    proc = subprocess.Popen(["/bin/bash", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", listed
    finally:
        proc.kill()  # bash; its nc child (same session) goes with the session below
        subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)
        proc.wait()


def test_the_operator_gets_the_list_at_devices_gpus_again_and_again(served):
    url, listed = served
    time.sleep(0.3)  # the probe's connection took the first answer
    for _ in range(5):
        with urllib.request.urlopen(url + "/devices/gpus", timeout=5) as reply:
            assert reply.status == 200 and reply.headers["Content-Type"] == "application/json"
            assert json.loads(reply.read()) == listed
        time.sleep(0.2)
