"""Container images for rigs without internet: pulled once, on the connected machine, into
OCI image layout archives that k3s imports at start.

Facts this follows (read, not copied):
- k3s imports every image archive in ``<data-dir>/agent/images/`` when it starts, docker-archive
  or OCI layout, plain or compressed (k3s docs, "Air-Gap Install", "Manually Deploy Images");
  the release's own ``k3s-airgap-images-<arch>.tar.zst`` (listed in ``sha256sum-<arch>.txt``) holds
  what k3s itself runs (pause, coredns, local-path-provisioner, metrics-server).
- A registry answers the OCI distribution spec: ``GET /v2/<repository>/manifests/<reference>``
  and ``GET /v2/<repository>/blobs/<digest>``; a 401 names a token endpoint in its
  ``WWW-Authenticate: Bearer realm=...,service=...,scope=...`` header, which gives an anonymous
  pull token (Docker's token authentication spec; nvcr.io and Docker Hub both work this way).
- An image index (or Docker manifest list) names one manifest per platform; a manifest names
  its config and layers by sha256 digest, so every blob is checked as it arrives.
- The archive is an OCI image layout (``oci-layout``, ``index.json``, ``blobs/sha256/...``);
  containerd names an imported image by the ``io.containerd.image.name`` annotation of its
  ``index.json`` entry.  The tar is written with fixed times and owners, so the same image
  gives the same archive (and sha256) every time.
- A Helm chart kept in a registry (``helm push``) is one manifest whose config has the media type
  ``application/vnd.cncf.helm.config.v1+json`` and whose one chart layer is the ``.tgz`` itself
  (Helm's docs, "Use OCI-based registries"); ``pull_chart`` returns those bytes, checked against the
  layer's digest.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from miner2provider.core.errors import BundleError

TIMEOUT = 60.0
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
               "application/vnd.docker.distribution.manifest.list.v2+json")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")
DOCKER_HUB = "docker.io"
# What ``helm push`` writes (Helm's OCI support): the chart's Chart.yaml as config, the archive as the one layer.
HELM_CHART_CONFIG = "application/vnd.cncf.helm.config.v1+json"
HELM_CHART_LAYER = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"


@dataclass(frozen=True)
class ImageRef:
    registry: str  # host[:port] as written in the reference (docker.io for Docker Hub)
    repository: str
    reference: str  # a tag, or a digest (sha256:...)

    @property
    def name(self) -> str:
        """The full name containerd gives the image (what a pod's ``image:`` resolves to)."""
        sep = "@" if self.reference.startswith("sha256:") else ":"
        return f"{self.registry}/{self.repository}{sep}{self.reference}"

    @property
    def file_name(self) -> str:
        """A file name for its archive in a bundle's images/ folder."""
        base = self.repository.rsplit("/", 1)[-1]
        return f"{base}-{self.reference.replace(':', '-')}.oci.tar"


def parse_ref(ref: str) -> ImageRef:
    """An image reference as Kubernetes reads it: ``[registry/]repository[:tag][@digest]``;
    no registry means Docker Hub, and a one-part Docker Hub name lives under ``library/``."""
    if not ref or any(c.isspace() for c in ref):
        raise BundleError(f"{ref!r} is not an image reference")
    name, _, digest = ref.partition("@")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, name
    tag = ""
    if ":" in path.rsplit("/", 1)[-1]:
        path, _, tag = path.rpartition(":")
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if not re.fullmatch(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*", path):
        raise BundleError(f"{ref!r}: {path!r} is not a repository name")
    if digest and not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise BundleError(f"{ref!r}: {digest!r} is not a sha256 digest")
    return ImageRef(registry, path, digest or tag or "latest")


class _Registry:
    """One registry's v2 API, anonymous, with the bearer token it asks for."""

    def __init__(self, base_url: str, repository: str) -> None:
        self.base = base_url.rstrip("/")
        self.repository = repository
        self.token = ""

    def get(self, path: str, accept: tuple[str, ...] = ()) -> Any:
        url = f"{self.base}/v2/{self.repository}/{path}"
        for attempt in (1, 2):
            headers = {"Accept": ", ".join(accept)} if accept else {}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            request = urllib.request.Request(url, headers=headers)
            try:
                return urllib.request.urlopen(request, timeout=TIMEOUT)  # noqa: S310 - the registry the user named
            except urllib.error.HTTPError as exc:
                if exc.code == 401 and attempt == 1 and not self.token:
                    self.token = self._anonymous_token(exc.headers.get("WWW-Authenticate", ""), url)
                    continue
                raise BundleError(f"pulling {url}: HTTP {exc.code} {exc.reason}") from None
            except (urllib.error.URLError, OSError) as exc:
                raise BundleError(f"pulling {url}: {getattr(exc, 'reason', exc)}") from None
        raise BundleError(f"pulling {url}: the registry refused its own token")

    def _anonymous_token(self, challenge: str, url: str) -> str:
        scheme, _, params = challenge.partition(" ")
        fields = dict(re.findall(r'(\w+)="([^"]*)"', params))
        if scheme.lower() != "bearer" or "realm" not in fields:
            raise BundleError(f"pulling {url}: the registry wants a login m2p does not have "
                              f"({challenge or 'no challenge'})")
        query = {k: v for k, v in fields.items() if k in ("service", "scope")}
        query.setdefault("scope", f"repository:{self.repository}:pull")
        token_url = f"{fields['realm']}?{urllib.parse.urlencode(query)}"
        try:
            with urllib.request.urlopen(token_url, timeout=TIMEOUT) as response:  # noqa: S310 - the registry's realm
                doc = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise BundleError(f"pulling {url}: no anonymous token from {fields['realm']} ({exc})") from None
        token = doc.get("token") or doc.get("access_token") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token:
            raise BundleError(f"pulling {url}: {fields['realm']} gave no token")
        return token


def _read_checked(response: Any, digest: str, what: str, out: Any = None) -> bytes:
    """Read a blob or manifest, refusing it unless its sha256 is ``digest``; ``out`` streams it to a file."""
    algorithm, _, expected = digest.partition(":")
    if algorithm != "sha256":
        raise BundleError(f"{what}: digest {digest} is not sha256")
    h = hashlib.sha256()
    kept = bytearray()
    with response:
        for block in iter(lambda: response.read(1 << 20), b""):
            h.update(block)
            if out is None:
                kept += block
            else:
                out.write(block)
    if h.hexdigest() != expected:
        raise BundleError(f"{what}: sha256 {h.hexdigest()} but the registry named {expected} "
                          "(damaged or tampered download); nothing was kept")
    return bytes(kept)


def _platform_manifest(index: dict[str, Any], ref: ImageRef, arch: str) -> dict[str, Any]:
    for entry in index.get("manifests", []):
        platform = entry.get("platform", {})
        if platform.get("os") == "linux" and platform.get("architecture") == arch:
            return dict(entry)
    offered = sorted(f"{m.get('platform', {}).get('os')}/{m.get('platform', {}).get('architecture')}"
                     for m in index.get("manifests", []))
    raise BundleError(f"{ref.name} has no linux/{arch} image (offered: {', '.join(offered) or 'none'})")


def _registry_of(ref: ImageRef, registry_urls: dict[str, str] | None) -> _Registry:
    base = (registry_urls or {}).get(ref.registry)
    if base is None and ref.registry == DOCKER_HUB:
        # Docker Hub's API is not served under its image names' host: name it (or a mirror).
        raise BundleError(f"{ref.name}: give the registry's API address with --image-registry {DOCKER_HUB}=URL")
    return _Registry(base or f"https://{ref.registry}", ref.repository)


def pull_chart(ref_text: str, *, registry_urls: dict[str, str] | None = None) -> tuple[bytes, str]:
    """A Helm chart kept in an OCI registry (``helm push``: a manifest whose one chart layer is the archive):
    its ``.tgz`` bytes, checked against the layer digest the registry's manifest names, and that digest."""
    ref = parse_ref(ref_text)
    registry = _registry_of(ref, registry_urls)
    response = registry.get(f"manifests/{ref.reference}", MANIFEST_TYPES)
    if ref.reference.startswith("sha256:"):
        raw = _read_checked(response, ref.reference, ref.name)
    else:
        with response:
            raw = response.read()
    try:
        doc = json.loads(raw)
    except ValueError:
        raise BundleError(f"{ref.name}: the registry's manifest is not JSON") from None
    config = doc.get("config", {}).get("mediaType") if isinstance(doc, dict) else None
    layers = [x for x in doc.get("layers", []) if x.get("mediaType") == HELM_CHART_LAYER] if config else []
    if config != HELM_CHART_CONFIG or len(layers) != 1:
        raise BundleError(f"{ref.name} is not a Helm chart (a manifest with config {config or 'none'}; "
                          f"a chart has {HELM_CHART_CONFIG} and one {HELM_CHART_LAYER} layer)")
    digest = str(layers[0]["digest"])
    data = _read_checked(registry.get(f"blobs/{digest}"), digest, f"{ref.name} {digest}")
    return data, digest


def pull(ref_text: str, dest: Path, *, registry_urls: dict[str, str] | None = None, arch: str = "amd64") -> ImageRef:
    """Pull ``ref_text`` for linux/``arch`` into the OCI layout archive ``dest``."""
    ref = parse_ref(ref_text)
    registry = _registry_of(ref, registry_urls)
    accept = INDEX_TYPES + MANIFEST_TYPES
    response = registry.get(f"manifests/{ref.reference}", accept)
    media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
    if ref.reference.startswith("sha256:"):
        raw = _read_checked(response, ref.reference, ref.name)
    else:
        with response:
            raw = response.read()
    doc = json.loads(raw)
    media_type = doc.get("mediaType") or media_type
    if media_type in INDEX_TYPES:
        entry = _platform_manifest(doc, ref, arch)
        raw = _read_checked(registry.get(f"manifests/{entry['digest']}", MANIFEST_TYPES), entry["digest"], ref.name)
        doc = json.loads(raw)
        media_type = doc.get("mediaType") or entry.get("mediaType", "")
    if media_type not in MANIFEST_TYPES:
        raise BundleError(f"{ref.name}: a manifest of type {media_type or 'unknown'} "
                          "(m2p reads OCI and Docker v2 images)")
    manifest_digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    blobs = [doc["config"], *doc.get("layers", [])]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".m2p-image-", dir=dest.parent) as tmp:
        files: list[tuple[str, Path]] = []
        for blob in blobs:
            path = Path(tmp) / blob["digest"].replace(":", "-")
            with path.open("wb") as out:
                _read_checked(registry.get(f"blobs/{blob['digest']}"), blob["digest"],
                              f"{ref.name} {blob['digest']}", out)
            files.append((blob["digest"], path))
        index = {"schemaVersion": 2, "mediaType": INDEX_TYPES[0], "manifests": [{
            "mediaType": media_type, "digest": manifest_digest, "size": len(raw),
            "annotations": {"io.containerd.image.name": ref.name, "org.opencontainers.image.ref.name": ref.reference},
            "platform": {"os": "linux", "architecture": arch}}]}
        with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
            _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
            _add_bytes(tar, "index.json", json.dumps(index, sort_keys=True).encode())
            _add_bytes(tar, f"blobs/sha256/{manifest_digest.split(':')[1]}", raw)
            for digest, path in files:
                info = _info(f"blobs/sha256/{digest.split(':')[1]}", path.stat().st_size)
                with path.open("rb") as f:
                    tar.addfile(info, f)
    return ref


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime, info.uid, info.gid = size, 0o644, 0, 0, 0
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_info(name, len(data)), io.BytesIO(data))


def archive_image_names(archive: Path) -> list[str]:
    """The image names an OCI layout archive's index.json gives containerd (read back in checks)."""
    try:
        with tarfile.open(archive) as tar:
            member = tar.extractfile("index.json")
            index = json.loads(member.read()) if member else {}
    except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
        raise BundleError(f"{archive}: not an OCI image archive ({exc})") from None
    return [str(m.get("annotations", {}).get("io.containerd.image.name", "")) for m in index.get("manifests", [])]
