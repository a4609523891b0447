"""Role k3s_install: the bundle's binary, byte for byte, executable, the pinned version."""

import hashlib
import os
from pathlib import Path

import yaml


def test_binary_is_the_bundles_byte_for_byte(host):
    root = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "bundle"
    k3s = yaml.safe_load((root / "manifest.yml").read_text())["k3s"]
    binary = host.file("/usr/local/bin/k3s")
    assert binary.mode == 0o755 and binary.user == "root"
    assert binary.sha256sum == k3s["sha256"] == hashlib.sha256((root / k3s["file"]).read_bytes()).hexdigest()
    assert f"k3s version {k3s['version']}" in host.check_output("/usr/local/bin/k3s --version")
