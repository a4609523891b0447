"""A marketplace's provider on a farm without internet: its chart archives and manifests, each checked against
the digest its publisher lists, and the images those charts run.

The marketplace names the files (``offline_files()``, an optional capability of the seam, market/base.py:
plain mappings that ``Pinned.from_mapping`` reads).  ``m2p bundle`` fetches them into the bundle's ``charts/``,
the folder ``m2p provider apply --charts`` reads, and refuses any whose sha256 is not the pin before the
bundle exists.  Where no digest of the publisher's own could be read (a chart kept only in an OCI registry, or
one whose digest only third parties agree on), the pin says so in ``caveat`` and the bundle says it too.

A chart kept only in an OCI registry has the ``url`` ``oci://{registry}/<repository>:<version>``, where
``{registry}`` is the registry the chart's own values.yaml names for its images: ``values_url`` is that file at
the chart's release in its source repository, checked against ``values_sha256``.  The chart pulled must hold
that same values.yaml, so the images it runs are the pinned ones even where the archive's digest is not.

The images: every ``image`` mapping (``registry``, ``repository``, ``tag`` or ``digest``) of each chart's
values.yaml, the tag defaulting to the chart's appVersion as the charts' templates do, except under a part
whose ``enabled`` is false.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import yaml

from miner2provider import market
from miner2provider.core.errors import BundleError
from miner2provider.fleet.bundle.images import parse_ref
from miner2provider.market.base import Marketplace, OfflineFiles

FOLDER = "charts"  # in the bundle: what `m2p provider apply --charts <bundle>/charts` reads
REGISTRY = "{registry}"
SHORT = 12  # how much of a digest a refusal shows


@dataclass(frozen=True)
class Pinned:
    file: str  # its name in the charts folder
    version: str
    url: str  # https://..., or oci://[{registry}|host]/<repository>:<version>
    sha256: str = ""  # what its publisher lists; "" where none could be read (``caveat`` says why)
    source: str = ""  # where that digest was read (a refusal names it)
    caveat: str = ""  # what the check cannot promise: said in the bundle's output and manifest
    values_url: str = ""  # an OCI chart's values.yaml at its release, in its source repository
    values_sha256: str = ""
    extra: str = ""  # "": always carried; else the name --provider-extra asks for it by

    @classmethod
    def from_mapping(cls, entry: Mapping[str, Any]) -> Pinned:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in entry.items() if k in known}
        if set(entry) - known or not all(isinstance(v, str) for v in values.values()) \
                or not values.get("file") or not values.get("url") or "version" not in values:
            raise BundleError(f"the marketplace's offline file {dict(entry)!r} is not file, version, url "
                              f"[{', '.join(sorted(known - {'file', 'version', 'url'}))}] strings")
        pin = cls(**values)
        for digest in (pin.sha256, pin.values_sha256):
            if digest and (len(digest) != 64 or digest.strip("0123456789abcdef")):
                raise BundleError(f"the marketplace's pin of {pin.file}: {digest!r} is not a sha256")
        if not pin.sha256 and not pin.caveat:
            raise BundleError(f"the marketplace's pin of {pin.file} has no sha256 and says not why")
        if REGISTRY in pin.url and not (pin.values_url and pin.values_sha256):
            raise BundleError(f"the marketplace's pin of {pin.file} names no pinned values.yaml for {REGISTRY}")
        return pin


def marketplace_files(marketplace: Marketplace | None = None) -> list[Pinned]:
    """The files ``marketplace``'s provider needs on the farm (none where it names none).  Pass the farm's
    (market.of_farm); None is the registry's default, for a command that reads no inventory (`m2p bundle`,
    `m2p provider fetch`)."""
    chosen = marketplace or market.marketplace(market.DEFAULT)
    return [Pinned.from_mapping(entry) for entry in chosen.offline_files()] if isinstance(chosen, OfflineFiles) else []


def select(pins: Iterable[Pinned], extras: Iterable[str]) -> list[Pinned]:
    """The pins always carried, and the optional ones ``extras`` names (each must name one)."""
    pins = list(pins)
    offered = sorted({p.extra for p in pins if p.extra})
    unknown = sorted(set(extras) - set(offered))
    if unknown:
        raise BundleError(f"--provider-extra {', '.join(unknown)}: the marketplace's provider has no such part "
                          f"(it has: {', '.join(offered) or 'none'})")
    return [p for p in pins if not p.extra or p.extra in set(extras)]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check(pin: Pinned, data: bytes, url: str) -> None:
    """Refuse ``data`` (``pin``'s file, fetched from ``url``) unless its sha256 is the pin."""
    got = sha256(data)
    if pin.sha256 and got != pin.sha256:
        raise BundleError(f"{pin.file} from {url}: sha256 {got[:SHORT]}… but {pin.source or 'its publisher'} "
                          f"lists {pin.sha256[:SHORT]}…: not the published file (damaged, tampered or "
                          f"repackaged); nothing was written. Fetch it again, or from a mirror that keeps the "
                          f"publisher's own bytes (--chart-url {pin.file}=URL)")


def check_values(pin: Pinned, values: bytes, where: str) -> None:
    """Refuse a values.yaml (``where``: the file it was read from) that is not ``pin``'s pinned one."""
    got = sha256(values)
    if got != pin.values_sha256:
        raise BundleError(f"{pin.file}: {where} has sha256 {got[:SHORT]}… but its release's values.yaml, pinned, "
                          f"has {pin.values_sha256[:SHORT]}…: not the chart as released; nothing was written. Fetch "
                          "it again, or from a mirror (--image-registry HOST=URL)")


def registry_of(pin: Pinned, values: bytes) -> str:
    """The registry host an OCI chart's pinned values.yaml names for its images (where the chart is kept)."""
    check_values(pin, values, pin.values_url)
    found = images_of(_yaml(values, pin.values_url), "")
    if not found:
        raise BundleError(f"{pin.file}: {pin.values_url} names no image, so no registry to pull the chart from")
    return parse_ref(found[0]).registry


def chart_values(archive: bytes, where: str) -> bytes:
    """The values.yaml of ``archive`` (a chart's .tgz): ``<chart>/values.yaml``."""
    return _members(archive, where)[1]


def chart_images(archive: bytes, where: str) -> list[str]:
    """The images a chart archive's values.yaml names (its appVersion the default tag)."""
    meta_text, values_text = _members(archive, where)
    meta = _yaml(meta_text, f"{where} Chart.yaml")
    return images_of(_yaml(values_text, f"{where} values.yaml"), str(meta.get("appVersion") or ""))


def images_of(values: Any, app_version: str) -> list[str]:
    """Every image reference ``values`` names, in the order they appear, each once."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if not isinstance(node, dict) or node.get("enabled") is False:
            return
        image = node.get("image")
        if isinstance(image, dict) and isinstance(image.get("repository"), str) and image["repository"]:
            name = f"{image['registry']}/{image['repository']}" if image.get("registry") else image["repository"]
            tag = str(image.get("tag") or app_version)
            ref = f"{name}@{image['digest']}" if image.get("digest") else f"{name}:{tag}" if tag else name
            if ref not in found:
                found.append(ref)
        for child in node.values():
            walk(child)

    walk(values)
    return found


def _members(archive: bytes, where: str) -> tuple[bytes, bytes]:
    """(Chart.yaml, values.yaml) of a chart archive, whose top folder is the chart's name."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            names = tar.getnames()
            top = names[0].split("/")[0] if names else ""
            found = [tar.extractfile(f"{top}/{name}") for name in ("Chart.yaml", "values.yaml")]
            meta, values = (f.read() if f else b"" for f in found)
    except (tarfile.TarError, OSError, KeyError, EOFError):
        raise BundleError(f"{where}: not a chart archive (a gzip'd tar with <chart>/Chart.yaml and values.yaml)"
                          ) from None
    return meta, values


def _yaml(text: bytes, where: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        raise BundleError(f"{where}: not YAML") from None
    return doc if isinstance(doc, dict) else {}
