"""The TEST bundle: stand-in k3s and NVIDIA container toolkit packages for sandbox rigs.

CI cannot reach k3s's release site or NVIDIA's apt repository, so the tests and
``m2p demo`` install from a bundle whose binaries are m2p's stand-ins (``bundle_files/``):
real ``.deb`` packages built with ``dpkg-deb`` (the same package names, dependencies,
paths and conffile as NVIDIA's) holding scripts that answer only what m2p asks, and a
stand-in ``k3s`` that runs as a service.  The manifest says ``standin: true``, and the
CLI says so whenever it uses such a bundle.  ``push_chart`` keeps a chart in the STAND-IN
registry the way ``helm push`` does, for the tests of ``m2p bundle``'s provider charts.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

import yaml

from m2p_sandbox.registry import OCI_MANIFEST, RegistryStandin
from miner2provider.core.errors import BundleError
from miner2provider.fleet.bundle import images
from miner2provider.fleet.bundle.manifest import AIRGAP_IMAGES, sha256_of, write_manifest
from miner2provider.fleet.bundle.pins import DEVICE_PLUGIN_IMAGE, K3S_VERSION, TOOLKIT_VERSION

SOURCES = Path(__file__).parent / "bundle_files"
# name -> (files: {path in package: (source, mode)}, depends, conffiles)
_PACKAGES: dict[str, tuple[dict[str, tuple[str, int]], str, list[str]]] = {
    "libnvidia-container1": ({}, "", []),
    "libnvidia-container-tools": ({"usr/bin/nvidia-container-cli": ("runtime", 0o755)},
                                  "libnvidia-container1 (>= {v})", []),
    "nvidia-container-toolkit-base": ({
        "usr/bin/nvidia-ctk": ("nvidia-ctk", 0o755),
        "usr/bin/nvidia-container-runtime": ("runtime", 0o755),
        "usr/bin/nvidia-container-runtime.cdi": ("runtime", 0o755),
        "etc/nvidia-container-runtime/config.toml": ("config.toml", 0o644),
    }, "", ["/etc/nvidia-container-runtime/config.toml"]),
    "nvidia-container-toolkit": ({"usr/bin/nvidia-container-runtime-hook": ("runtime", 0o755)},
                                 "nvidia-container-toolkit-base (= {v}-1), libnvidia-container-tools (>= {v}-1)", []),
}


def build_test_bundle(root: Path | str, *, k3s_version: str = K3S_VERSION,
                      toolkit_version: str = TOOLKIT_VERSION, k3s_fails_at_start: bool = False) -> Path:
    """Write a complete stand-in bundle into ``root``; returns the manifest's path.
    ``k3s_fails_at_start``: its k3s exits at once as a server or agent (a release that does not come up)."""
    if shutil.which("dpkg-deb") is None:
        raise BundleError("dpkg-deb is needed to build the test bundle (Debian package dpkg)")
    root = Path(root)
    (root / "k3s").mkdir(parents=True, exist_ok=True)
    (root / "debs").mkdir(exist_ok=True)
    k3s = root / "k3s" / "k3s"
    _render("k3s", k3s, k3s_version, 0o755)
    k3s.write_text(k3s.read_text().replace("@FAILS_AT_START@", "yes" if k3s_fails_at_start else "no"))
    packages = []
    for name, (files, depends, conffiles) in _PACKAGES.items():
        deb = build_deb(root / "debs", name, f"{toolkit_version}-1", files=files,
                        depends=depends.format(v=toolkit_version), conffiles=conffiles, upstream=toolkit_version,
                        description=f"m2p STAND-IN for NVIDIA's {name} (test bundle; not the real package)")
        packages.append({"name": name, "version": f"{toolkit_version}-1",
                         "file": str(deb.relative_to(root)), "sha256": sha256_of(deb)})
    return write_manifest(
        root, standin=True, toolkit_version=toolkit_version, packages=packages, images=_images(root, k3s_version),
        k3s={"name": "k3s", "version": k3s_version, "file": "k3s/k3s", "sha256": sha256_of(k3s)},
        comment="m2p TEST bundle: every binary in it is an m2p STAND-IN (see m2p_sandbox/bundle.py)")


def _images(root: Path, k3s_version: str) -> list[dict[str, str]]:
    """k3s's air-gap archive (a STAND-IN file: no release site here, and the stand-in k3s imports
    nothing) and the device plugin's image, pulled by m2p's own code from the STAND-IN registry."""
    (root / "images").mkdir(exist_ok=True)
    airgap = root / "images" / "k3s-airgap-images-amd64.tar.zst"
    airgap.write_text(f"m2p STAND-IN for the air-gap image archive of k3s {k3s_version}; not a real archive\n")
    entries = [{"name": AIRGAP_IMAGES, "version": k3s_version, "file": "images/" + airgap.name,
                "sha256": sha256_of(airgap)}]
    ref = images.parse_ref(DEVICE_PLUGIN_IMAGE)
    registry = RegistryStandin([f"{ref.repository}:{ref.reference}"])
    try:
        images.pull(DEVICE_PLUGIN_IMAGE, root / "images" / ref.file_name, registry_urls={ref.registry: registry.url})
    finally:
        registry.close()
    return entries + [{"name": DEVICE_PLUGIN_IMAGE, "version": ref.reference, "file": "images/" + ref.file_name,
                       "sha256": sha256_of(root / "images" / ref.file_name)}]


def push_chart(registry: RegistryStandin, repository: str, archive: bytes) -> str:
    """Keep a chart archive in the STAND-IN registry as ``helm push`` lays one out (its Chart.yaml as the
    config, the archive as the one chart layer), tagged with the chart's version; returns the layer digest."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        top = tar.getnames()[0].split("/")[0]
        found = tar.extractfile(f"{top}/Chart.yaml")
        meta = yaml.safe_load(found.read()) if found else {}
    config = json.dumps(meta, sort_keys=True).encode()
    blobs = [(images.HELM_CHART_CONFIG, config), (images.HELM_CHART_LAYER, archive)]
    described = []
    for media_type, data in blobs:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        registry.blobs[digest] = data
        described.append({"mediaType": media_type, "digest": digest, "size": len(data)})
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": described[0],
                           "layers": described[1:]}).encode()
    registry.manifests[(repository, str(meta["version"]))] = (OCI_MANIFEST, manifest)
    return str(described[1]["digest"])


def _render(source: str, dest: Path, version: str, mode: int) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text((SOURCES / source).read_text().replace("@VERSION@", version))
    dest.chmod(mode)


def build_deb(out: Path, name: str, version: str, *, description: str, files: dict[str, tuple[str, int]] | None = None,
              depends: str = "", conffiles: Sequence[str] = (), upstream: str = "", section: str = "utils",
              postinst: str = "") -> Path:
    """A reproducible stand-in ``.deb`` in ``out``: ``files`` maps a path in the package to a file of
    ``bundle_files/`` (``@VERSION@`` becomes ``upstream``) and its mode."""
    with tempfile.TemporaryDirectory(prefix="m2p-deb-") as tmp:
        tree = Path(tmp) / name
        (tree / "DEBIAN").mkdir(parents=True)
        for target, (source, mode) in (files or {}).items():
            _render(source, tree / target, upstream, mode)
        control = [f"Package: {name}", f"Version: {version}", "Architecture: amd64",
                   "Maintainer: m2p test harness <m2p@localhost>", f"Section: {section}", "Priority: optional"]
        if depends:
            control.append(f"Depends: {depends}")
        control.append(f"Description: {description}")
        (tree / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
        if conffiles:
            (tree / "DEBIAN" / "conffiles").write_text("\n".join(conffiles) + "\n")
        if postinst:
            (tree / "DEBIAN" / "postinst").write_text(postinst)
            (tree / "DEBIAN" / "postinst").chmod(0o755)
        deb = out / f"{name}_{version}_amd64.deb"
        # Fixed mtimes and root ownership make the package byte-identical from build to build.
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(tree), str(deb)],
                       check=True, capture_output=True,
                       env={"SOURCE_DATE_EPOCH": "1700000000", "PATH": "/usr/bin:/bin"})
    return deb


if __name__ == "__main__":  # python -m m2p_sandbox.bundle DIR (Molecule's create step)
    import sys

    print(build_test_bundle(sys.argv[1]))
