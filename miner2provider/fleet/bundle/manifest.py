"""The offline bundle's manifest: what is in it, and the proof that nothing changed.

A bundle is a directory::

    manifest.yml          format, arch, standin, k3s, toolkit and images entries (below)
    k3s/k3s               the k3s binary
    debs/*.deb            NVIDIA container toolkit packages, in install order
    images/*              container images for rigs without internet: k3s's own air-gap
                          archive (k3s-airgap-images-amd64.tar.zst, of the k3s release) and an
                          OCI archive of every image m2p's manifests name (the device plugin) and
                          of every image the provider's charts run
    charts/*              the marketplace provider's chart archives and manifests, for
                          `m2p provider apply --charts <bundle>/charts` (absent in older bundles)

``load_bundle`` validates the manifest and re-hashes every file; the roles check the
hash again on the rig after copying, so a truncated copy over a bad link is caught.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from miner2provider.core.errors import BundleError

FORMAT = 1
MANIFEST = "manifest.yml"
# The name of k3s's own air-gap image archive in ``images`` (its version: the k3s release's).
AIRGAP_IMAGES = "k3s-airgap-images"


@dataclass(frozen=True)
class Artifact:
    name: str
    version: str
    path: Path  # absolute, inside the bundle
    sha256: str


@dataclass(frozen=True)
class Bundle:
    root: Path
    arch: str
    standin: bool  # True for the test bundle whose binaries are m2p's stand-ins
    k3s: Artifact
    toolkit_version: str
    toolkit_packages: tuple[Artifact, ...]
    images: tuple[Artifact, ...] = ()  # name: the image reference, or AIRGAP_IMAGES (version: k3s's)
    charts: tuple[Artifact, ...] = ()  # name: the file's name in charts/ (nothing convert installs)

    @property
    def digest(self) -> str:
        """What the bundle installs (names, versions, checksums), not where it lies on disk."""
        parts = [f"{self.arch} {self.k3s.version} {self.k3s.sha256} {self.toolkit_version}"]
        parts += [f"{a.name} {a.version} {a.sha256}" for a in (*self.toolkit_packages, *self.images)]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def missing_images(self, needed: list[str]) -> list[str]:
        """What of ``needed`` (image references) and k3s's own air-gap images this bundle lacks."""
        have = {(a.name, a.version) for a in self.images}
        missing = [] if (AIRGAP_IMAGES, self.k3s.version) in have else [f"{AIRGAP_IMAGES} {self.k3s.version}"]
        names = {a.name for a in self.images}
        return missing + sorted({ref for ref in needed if ref not in names})

    def role_vars(self) -> dict[str, Any]:
        """Role variables that make the roles install from this bundle."""
        return {
            "k3s_version": self.k3s.version,
            "k3s_binary_src": str(self.k3s.path),
            "k3s_binary_sha256": self.k3s.sha256,
            "nvidia_container_toolkit_version": self.toolkit_version,
            "nvidia_container_toolkit_debs": [
                {"name": a.name, "version": a.version, "src": str(a.path), "sha256": a.sha256}
                for a in self.toolkit_packages
            ],
            "k3s_images": [{"name": a.name, "src": str(a.path), "file": a.path.name, "sha256": a.sha256}
                           for a in self.images],
        }


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_bundle(root: Path | str) -> Bundle:
    root = Path(root).expanduser().resolve()
    manifest = root / MANIFEST
    if not manifest.is_file():
        raise BundleError(f"no {MANIFEST} here; make a bundle with `m2p bundle DIR`", where=str(root))
    try:
        doc = yaml.safe_load(manifest.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{manifest}:{mark.line + 1}" if mark else str(manifest)
        raise BundleError(f"not valid YAML ({getattr(e, 'problem', e)})", where=where) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BundleError(f"unknown bundle format (expected format: {FORMAT})", where=str(manifest))
    k3s = _artifact(root, manifest, "k3s", doc.get("k3s"))
    toolkit = doc.get("nvidia_container_toolkit")
    if not isinstance(toolkit, dict) or not isinstance(toolkit.get("packages"), list) or not toolkit["packages"]:
        raise BundleError("nvidia_container_toolkit.packages must be a non-empty list", where=str(manifest))
    packages = tuple(_artifact(root, manifest, f"nvidia_container_toolkit.packages[{i}]", p)
                     for i, p in enumerate(toolkit["packages"]))
    listed = doc.get("images", [])
    if not isinstance(listed, list):
        raise BundleError("images must be a list", where=str(manifest))
    images = tuple(_artifact(root, manifest, f"images[{i}]", entry) for i, entry in enumerate(listed))
    listed = doc.get("charts", [])
    if not isinstance(listed, list):
        raise BundleError("charts must be a list", where=str(manifest))
    chart_files = tuple(_artifact(root, manifest, f"charts[{i}]", entry) for i, entry in enumerate(listed))
    return Bundle(root=root, arch=str(doc.get("arch", "amd64")), standin=bool(doc.get("standin", False)),
                  k3s=k3s, toolkit_version=str(toolkit.get("version", "")), toolkit_packages=packages, images=images,
                  charts=chart_files)


def _artifact(root: Path, manifest: Path, key: str, entry: Any) -> Artifact:
    if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("file", "sha256", "version")):
        raise BundleError(f"{key} needs file, version and sha256", where=str(manifest))
    path = (root / entry["file"]).resolve()
    if root not in path.parents:
        raise BundleError(f"{key}: {entry['file']} points outside the bundle", where=str(manifest))
    if not path.is_file():
        raise BundleError(f"{key}: {entry['file']} is missing", where=str(root))
    actual = sha256_of(path)
    if actual != entry["sha256"]:
        raise BundleError(f"{entry['file']}: sha256 is {actual}, the manifest says {entry['sha256']} "
                          "(a truncated or altered file; download the bundle again)", where=str(root))
    return Artifact(name=str(entry.get("name", path.name)), version=entry["version"], path=path,
                    sha256=actual)


def write_manifest(root: Path, *, standin: bool, k3s: dict[str, str], toolkit_version: str,
                   packages: list[dict[str, str]], images: list[dict[str, str]], comment: str,
                   charts: list[dict[str, str]] | None = None) -> Path:
    doc: dict[str, Any] = {"format": FORMAT, "arch": "amd64", "standin": standin, "k3s": k3s,
                           "nvidia_container_toolkit": {"version": toolkit_version, "packages": packages},
                           "images": images}
    if charts:
        doc["charts"] = charts
    path = root / MANIFEST
    path.write_text(f"# {comment}\n" + yaml.safe_dump(doc, sort_keys=False))
    return path
