"""Akash's chart archives and CRDs, as the farm installs them: read from a folder the owner (or `m2p
bundle`) filled, each checked for what it claims to be before it goes anywhere.

k3s's Helm controller installs a chart from ``spec.chartContent`` (the archive, base64), so an offline
farm needs the archives themselves, never a chart repository.  m2p carries no copy of Akash's charts;
it reads what the folder holds:

    <folder>/provider-19.0.2.tgz                   # `helm package` names: <chart>-<version>.tgz
    <folder>/akash-hostname-operator-19.0.2.tgz
    <folder>/akash-inventory-operator-19.0.2.tgz
    <folder>/akash-gateway-1.2.1.tgz
    <folder>/nginx-gateway-fabric-2.5.1.tgz        # NGINX Gateway Fabric, the ingress Akash's charts need
    <folder>/akash-crd.yaml                        # akash-network/provider pkg/apis/akash.network/crd.yaml
    <folder>/gateway-api-crds.yaml                 # kubernetes-sigs/gateway-api v1.5.1 experimental-install.yaml
    <folder>/nginx-gateway-fabric-crds.yaml        # nginx/nginx-gateway-fabric deploy/crds.yaml (gateway.nginx.org)

The Gateway API's CRDs are needed before any chart installs: NGF's chart makes a GatewayClass, the provider
chart an HTTPRoute (its Let's Encrypt challenge) and akash-gateway a Gateway and TCPRoutes; k3s has none of
them, and TCPRoute is in the experimental channel only.  The release file also holds a
ValidatingAdmissionPolicy and its binding (``safe-upgrades.gateway.networking.k8s.io``, new in v1.5.0), which
k3s applies with it; nothing else is let through.  NGF's own CRDs (NginxProxy, NginxGateway, and the
ClientSettingsPolicy and ProxySettingsPolicy akash-gateway makes) go as a manifest of their own: Helm installs a
chart's ``crds/`` on first install only and never upgrades them.  Every archive must be a gzip'd tar whose
``<chart>/Chart.yaml`` names that chart and version, within k3s's limit for chartContent (the Helm controller
copies it into a ConfigMap: about 1 MiB).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from miner2provider.core import textfiles
from miner2provider.core.errors import ProviderError

CRDS_FILE = "akash-crd.yaml"
GATEWAY_CRDS_FILE = "gateway-api-crds.yaml"
GATEWAY_GROUP = "gateway.networking.k8s.io"
GATEWAY_KINDS = ("GatewayClass", "Gateway", "HTTPRoute", "TCPRoute")  # what NGF's and Akash's charts make
# The only other objects the Gateway API's release file holds (v1.5.0 on): its upgrade guard.
GATEWAY_POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
INGRESS_CHART = "nginx-gateway-fabric"
INGRESS_CRDS_FILE = "nginx-gateway-fabric-crds.yaml"
INGRESS_GROUP = "gateway.nginx.org"
# What NGF's chart (NginxGateway, NginxProxy) and akash-gateway (the two policies) make of NGF's kinds.
INGRESS_KINDS = ("NginxGateway", "NginxProxy", "ClientSettingsPolicy", "ProxySettingsPolicy")
PRICE_SCRIPT = "scripts/price_script_generic.sh"  # inside the provider chart: Akash's own bid script
MAX_ARCHIVE = 700 * 1024  # base64 grows it by 4/3; a ConfigMap holds at most 1 MiB
MAX_CRDS = 4 * 1024 * 1024  # the Gateway API's experimental install file is about 1 MB


@dataclass(frozen=True)
class ChartArchive:
    name: str
    version: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def image(self) -> str:
        """The image the chart runs, as its own values and Chart.yaml name it (repository:appVersion)."""
        values = yaml.safe_load(self.member("values.yaml") or "{}") or {}
        meta = yaml.safe_load(self.member("Chart.yaml") or "{}") or {}
        repository = str((values.get("image") or {}).get("repository") or "")
        tag = str((values.get("image") or {}).get("tag") or meta.get("appVersion") or "")
        if not repository or not tag:
            raise ProviderError(f"the {self.name} chart names no image (values image.repository, appVersion)")
        return f"{repository}:{tag}"

    def member(self, path: str) -> str:
        """A text file of the chart (``scripts/...``), or "" when the chart has none."""
        with tarfile.open(fileobj=io.BytesIO(self.data), mode="r:gz") as tar:
            try:
                found = tar.extractfile(f"{self.name}/{path}")
            except KeyError:
                return ""
            return found.read().decode() if found else ""


@dataclass(frozen=True)
class AkashCharts:
    charts: dict[str, ChartArchive]
    crds: str  # Akash's CRDs, YAML
    gateway_crds: str  # the Gateway API's CRDs (and its upgrade guard policy), YAML
    ingress_crds: str  # NGINX Gateway Fabric's gateway.nginx.org CRDs, YAML

    @property
    def price_script(self) -> str:
        return self.charts["provider"].member(PRICE_SCRIPT)


def archive_name(chart: str, version: str) -> str:
    return f"{chart}-{version}.tgz"


def load(folder: str | Path, versions: dict[str, str]) -> AkashCharts:
    """The archives of ``versions`` (chart -> version) and the CRDs from ``folder``."""
    root = Path(folder)
    if not root.is_dir():
        raise ProviderError(f"no chart folder {textfiles.shown(str(root))}: put Akash's chart archives there "
                            f"({', '.join(archive_name(c, v) for c, v in versions.items())}) and {CRDS_FILE}, "
                            "or pass --charts DIR")
    charts = {name: _archive(root / archive_name(name, version), name, version) for name, version in versions.items()}
    crds_text, crds = _crds(root / CRDS_FILE, "Akash's CRDs: akash-network/provider pkg/apis/akash.network/crd.yaml")
    if not [d for d in crds if str(d["spec"].get("group", "")).endswith("akash.network")]:
        raise ProviderError(f"{root / CRDS_FILE}: no CustomResourceDefinition of akash.network in it")
    gateway_text, gateway = _crds(root / GATEWAY_CRDS_FILE, "the Gateway API's CRDs: kubernetes-sigs/gateway-api's "
                                                            "release experimental-install.yaml (TCPRoute is "
                                                            "experimental only)", GATEWAY_POLICY_KINDS)
    _served(root / GATEWAY_CRDS_FILE, gateway, GATEWAY_GROUP, GATEWAY_KINDS,
            "the experimental channel's install file has them all")
    ingress_text, ingress = _crds(root / INGRESS_CRDS_FILE, "NGINX Gateway Fabric's CRDs: nginx/nginx-gateway-fabric "
                                                            "deploy/crds.yaml of the chart's version")
    _served(root / INGRESS_CRDS_FILE, ingress, INGRESS_GROUP, INGRESS_KINDS, "NGF's deploy/crds.yaml has them all")
    return AkashCharts(charts, crds_text, gateway_text, ingress_text)


def _served(path: Path, docs: list[dict[str, Any]], group: str, wanted: tuple[str, ...], hint: str) -> None:
    kinds = {d["spec"].get("names", {}).get("kind") for d in docs
             if d.get("kind") == "CustomResourceDefinition" and d["spec"].get("group") == group}
    lacking = [k for k in wanted if k not in kinds]
    if lacking:
        raise ProviderError(f"{path}: no CRD for {', '.join(lacking)} of {group} ({hint})")


def _archive(path: Path, name: str, version: str) -> ChartArchive:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProviderError(f"cannot read chart archive {textfiles.shown(str(path))}: {exc.strerror} "
                            f"(the {name} chart, version {version}; `helm pull` it or let m2p bundle fetch it)"
                            ) from None
    if len(data) > MAX_ARCHIVE:
        raise ProviderError(f"{path}: {len(data)} bytes; k3s's Helm controller takes chart archives up to "
                            f"{MAX_ARCHIVE} bytes")
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            found = tar.extractfile(f"{name}/Chart.yaml")
            meta = yaml.safe_load(found.read()) if found else None
    except (tarfile.TarError, OSError, KeyError, EOFError, yaml.YAMLError):
        raise ProviderError(f"{path}: not a chart archive with {name}/Chart.yaml") from None
    if not isinstance(meta, dict) or (meta.get("name"), str(meta.get("version"))) != (name, version):
        got = (meta.get("name"), meta.get("version")) if isinstance(meta, dict) else None
        raise ProviderError(f"{path}: its Chart.yaml says {got}, not chart {name} version {version}")
    return ChartArchive(name, version, data)


def _crds(path: Path, what: str, also: tuple[str, ...] = ()) -> tuple[str, list[dict[str, Any]]]:
    """The text of ``path``, read once, and the CustomResourceDefinitions in it (and the kinds ``also`` names;
    nothing else: k3s applies the file as it is)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProviderError(f"cannot read {textfiles.shown(str(path))}: {exc.strerror} ({what})") from None
    if len(data) > MAX_CRDS:
        raise ProviderError(f"{path}: {len(data)} bytes, more than CRDs are")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ProviderError(f"{path}: not UTF-8 text") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        raise ProviderError(f"{path}: not YAML ({textfiles.shown(str(exc).splitlines()[0])})") from None
    allowed = ("CustomResourceDefinition", *also)
    stray = next((d for d in docs if not (isinstance(d, dict) and d.get("kind") in allowed
                                          and isinstance(d.get("spec"), dict))), None)
    if stray is not None:
        kind = textfiles.shown(str(stray.get("kind"))) if isinstance(stray, dict) else "a non-object"
        raise ProviderError(f"{path}: holds {kind}; only {', '.join(allowed)} belong there ({what})")
    return text, docs
