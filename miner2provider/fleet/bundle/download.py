"""``m2p bundle DIR``: download what convert installs, once, on a connected machine.

- k3s: ``<release site>/<version>/k3s``, checked against the release's own
  ``sha256sum-amd64.txt`` (the list k3s publishes with every release, the same one the
  k3s_install role checks online installs against).
- k3s's own images (pause, coredns, local-path, metrics-server): the same release's
  ``k3s-airgap-images-<arch>.tar.zst``, checked against the same list; and every image m2p's
  manifests name (the device plugin), pulled from its registry into an OCI archive
  (``images.py``).  A rig without internet imports both at k3s's start.
- NVIDIA container toolkit: NVIDIA's apt repository is a flat repository
  (``deb <url> /``), so its ``Packages`` index lies at ``<url>/Packages``; every package
  the role installs is taken at the pinned version, and each ``.deb`` is checked
  against the index's ``SHA256`` field.  (The index itself comes over HTTPS; its GPG
  signature is not verified here.)

- The marketplace's provider (``charts.py``): its chart archives and manifests, each refused unless its
  sha256 is the one its publisher lists (where one could be read: the pin says where not), into
  ``charts/`` for ``m2p provider apply --charts``; and every image those charts run, pulled as above.

Versions default to the roles' pins; the sites to the vendors'.  Everything is written
to a temporary directory next to DIR and moved into place only when every file has
been checked, so a failed download never leaves a half bundle that looks complete.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from miner2provider.core.errors import BundleError
from miner2provider.fleet.bundle import charts
from miner2provider.fleet.bundle import images as oci
from miner2provider.fleet.bundle.manifest import AIRGAP_IMAGES, sha256_of, write_manifest
from miner2provider.fleet.bundle.pins import (
    IMAGES,
    K3S_RELEASE_URL,
    K3S_VERSION,
    TOOLKIT_PACKAGES,
    TOOLKIT_REPO_URL,
    TOOLKIT_VERSION,
)

TIMEOUT = 60.0
MAX_PROVIDER_FILE = 8 << 20  # chart archives and CRD files are kilobytes to a few megabytes


def _open(url: str) -> Any:
    try:
        return urllib.request.urlopen(url, timeout=TIMEOUT)  # noqa: S310 - http(s) URLs the operator chose
    except urllib.error.HTTPError as exc:
        raise BundleError(f"downloading {url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise BundleError(f"downloading {url}: {reason}") from None


def fetch_text(url: str) -> str:
    with _open(url) as response:
        return str(response.read().decode("utf-8", errors="replace"))


def fetch_file(url: str, dest: Path, sha256: str) -> None:
    """Stream ``url`` into ``dest`` and refuse it unless its sha256 is ``sha256``."""
    digest = hashlib.sha256()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _open(url) as response, dest.open("wb") as out:
        try:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
        except OSError as exc:
            raise BundleError(f"downloading {url}: {exc}") from None
    if digest.hexdigest() != sha256.lower():
        dest.unlink()
        raise BundleError(f"downloading {url}: sha256 {digest.hexdigest()} but the publisher lists {sha256} "
                          "(damaged or tampered download); nothing was kept")


def fetch_bytes(url: str, limit: int = MAX_PROVIDER_FILE) -> bytes:
    """A small file, whole (at most ``limit`` bytes)."""
    with _open(url) as response:
        try:
            data = response.read(limit + 1)
        except OSError as exc:
            raise BundleError(f"downloading {url}: {exc}") from None
    if len(data) > limit:
        raise BundleError(f"downloading {url}: more than {limit} bytes, more than a chart or manifest is")
    return bytes(data)


def fetch_provider_files(pins: Sequence[charts.Pinned], folder: Path, *, chart_urls: dict[str, str],
                         registry_urls: dict[str, str] | None) -> tuple[list[dict[str, str]], list[str]]:
    """Each pinned file into ``folder``, checked first; their manifest entries, and the images their charts run."""
    unknown = sorted(set(chart_urls) - {p.file for p in pins})
    if unknown:
        raise BundleError(f"--chart-url {', '.join(unknown)}: not a file of the provider's "
                          f"({', '.join(p.file for p in pins) or 'it has none'})")
    entries: list[dict[str, str]] = []
    run: list[str] = []
    for pin in pins:
        url = chart_urls.get(pin.file, pin.url)
        if url.startswith("oci://"):
            ref = url.removeprefix("oci://")
            if charts.REGISTRY in ref:
                ref = ref.replace(charts.REGISTRY, charts.registry_of(pin, fetch_bytes(pin.values_url)))
            url = f"oci://{ref}"
            data, _ = oci.pull_chart(ref, registry_urls=registry_urls)
        else:
            data = fetch_bytes(url)
        charts.check(pin, data, url)
        if pin.values_sha256:
            charts.check_values(pin, charts.chart_values(data, pin.file), f"the values.yaml of {url}")
        if pin.file.endswith(".tgz"):
            run += [image for image in charts.chart_images(data, pin.file) if image not in run]
        folder.mkdir(exist_ok=True)
        (folder / pin.file).write_bytes(data)
        entries.append({"name": pin.file, "version": pin.version, "file": f"{folder.name}/{pin.file}",
                        "sha256": charts.sha256(data), "checked": pin.caveat or f"the sha256 {pin.source} lists"})
    return entries, run


def k3s_sha256(sums: str, asset: str, where: str) -> str:
    """The line ``<sha256>  <asset>`` of a k3s release's sha256sum-<arch>.txt."""
    for line in sums.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("*") == asset and len(parts[0]) == 64:
            return parts[0]
    raise BundleError(f"{where} lists no sha256 for {asset}")


def stanzas(index: str) -> Iterator[dict[str, str]]:
    """The paragraphs of an apt ``Packages`` index (deb822): ``Field: value`` lines, blank-line separated."""
    fields: dict[str, str] = {}
    last = ""
    for line in index.splitlines():
        if not line.strip():
            if fields:
                yield fields
            fields, last = {}, ""
        elif line[0] in " \t" and last:
            fields[last] += "\n" + line.strip()
        elif ":" in line:
            last, _, value = line.partition(":")
            fields[last] = value.strip()
    if fields:
        yield fields


def pick_packages(index: str, names: list[str], version: str, arch: str, where: str) -> list[dict[str, str]]:
    """The stanza of each package at exactly ``version`` for ``arch`` (or all), in ``names`` order."""
    found: dict[str, dict[str, str]] = {}
    seen: dict[str, set[str]] = {n: set() for n in names}
    for st in stanzas(index):
        name = st.get("Package", "")
        if name in seen:
            seen[name].add(st.get("Version", "?"))
            if st.get("Version") == version and st.get("Architecture") in {arch, "all"}:
                found[name] = st
    missing = [n for n in names if n not in found]
    if missing:
        offered = "; ".join(f"{n}: {', '.join(sorted(seen[n])[-5:]) or 'none'}" for n in missing)
        raise BundleError(f"{where} has no {version} ({arch}) of {', '.join(missing)} (offered: {offered})")
    for name, st in found.items():
        if not st.get("Filename") or len(st.get("SHA256", "")) != 64:
            raise BundleError(f"{where}: the entry of {name} {version} lacks Filename or SHA256")
    return [found[n] for n in names]


def make_charts_folder(root: Path | str, provider_files: Sequence[charts.Pinned], *,
                       chart_urls: dict[str, str] | None = None,
                       registry_urls: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The provider's pinned files alone into ``root`` (absent or empty), for a controller with internet whose rigs
    have it too: what `provider apply --charts` reads, without k3s, the toolkit or images.  Staged beside ``root``
    and renamed only once every file checks out, so a refusal leaves nothing."""
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise BundleError(f"{root} is not empty: give a new directory (files already there are never overwritten)")
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".m2p-charts-", dir=root.parent))
    try:
        entries, _ = fetch_provider_files(provider_files, staging / charts.FOLDER, chart_urls=chart_urls or {},
                                          registry_urls=registry_urls)
        if root.exists():
            root.rmdir()
        (staging / charts.FOLDER).rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return entries


def make_bundle(root: Path | str, *, k3s_version: str = K3S_VERSION, toolkit_version: str = TOOLKIT_VERSION,
                k3s_release_url: str = K3S_RELEASE_URL, toolkit_repo_url: str = TOOLKIT_REPO_URL,
                images: list[str] | None = None, registry_urls: dict[str, str] | None = None,
                provider_files: Sequence[charts.Pinned] = (), chart_urls: dict[str, str] | None = None,
                arch: str = "amd64") -> Path:
    """Download, check and write a bundle into ``root`` (absent or empty); returns the manifest's path.
    ``provider_files``: the marketplace provider's pinned files (``charts.marketplace_files``), fetched first."""
    root = Path(root)
    if root.exists() and any(root.iterdir()):
        raise BundleError(f"{root} is not empty: give a new directory (an existing bundle is never overwritten)")
    if arch != "amd64":
        raise BundleError(f"arch {arch}: m2p's roles install amd64 rigs only")
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".m2p-bundle-", dir=root.parent))
    try:
        chart_entries, chart_images = fetch_provider_files(provider_files, staging / charts.FOLDER,
                                                           chart_urls=chart_urls or {}, registry_urls=registry_urls)
        release = f"{k3s_release_url.rstrip('/')}/{urllib.parse.quote(k3s_version, safe='')}"
        sums_url = f"{release}/sha256sum-{arch}.txt"
        sums = fetch_text(sums_url)
        k3s_sum = k3s_sha256(sums, "k3s", sums_url)
        fetch_file(f"{release}/k3s", staging / "k3s" / "k3s", k3s_sum)
        (staging / "k3s" / "k3s").chmod(0o755)
        airgap = f"k3s-airgap-images-{arch}.tar.zst"
        airgap_sum = k3s_sha256(sums, airgap, sums_url)
        fetch_file(f"{release}/{airgap}", staging / "images" / airgap, airgap_sum)
        image_entries = [{"name": AIRGAP_IMAGES, "version": k3s_version, "file": f"images/{airgap}",
                          "sha256": airgap_sum}]
        wanted = list(IMAGES if images is None else images)
        for ref_text in wanted + [image for image in chart_images if image not in wanted]:
            ref = oci.parse_ref(ref_text)
            oci.pull(ref_text, staging / "images" / ref.file_name, registry_urls=registry_urls, arch=arch)
            image_entries.append({"name": ref_text, "version": ref.reference, "file": f"images/{ref.file_name}",
                                  "sha256": sha256_of(staging / "images" / ref.file_name)})

        repo = toolkit_repo_url.replace("$(ARCH)", arch).rstrip("/")
        index_url = f"{repo}/Packages"
        packages = []
        for st in pick_packages(fetch_text(index_url), TOOLKIT_PACKAGES, f"{toolkit_version}-1", arch, index_url):
            filename = st["Filename"].removeprefix("./")
            deb = staging / "debs" / Path(filename).name
            fetch_file(f"{repo}/{filename}", deb, st["SHA256"])
            packages.append({"name": st["Package"], "version": st["Version"],
                             "file": f"debs/{deb.name}", "sha256": st["SHA256"].lower()})
        write_manifest(staging, standin=False, toolkit_version=toolkit_version, packages=packages,
                       images=image_entries, charts=chart_entries,
                       k3s={"name": "k3s", "version": k3s_version, "file": "k3s/k3s", "sha256": k3s_sum},
                       comment=f"m2p offline bundle: k3s from {release}, NVIDIA container toolkit from {repo}")
        if root.exists():
            root.rmdir()
        staging.rename(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root / "manifest.yml"
