"""Where each file of the --charts folder (charts.py's names) is published, and the digest its publisher lists:
what `m2p bundle` fetches for a farm without internet (fleet/bundle/charts.py reads this table, through
``Akash.offline_files``).  Pure data.

- Akash's four chart archives: the ``digest:`` of Akash's chart repository index (akash-network/helm-charts,
  branch gh-pages @ 3cc0711, index.yaml), for the archives its release workflow (chart-releaser) uploaded.
- akash-crd.yaml: akash-network/provider's pkg/apis/akash.network/crd.yaml at commit afc4dd7, the file m2p's
  tests render against (unchanged since before v0.12.0); a raw file at a full commit cannot move.
- gateway-api-crds.yaml: the Gateway API v1.5.1 release's experimental-install.yaml (rebuilt from the v1.5.1
  tag; third-party pins of the release asset agree).
- nginx-gateway-fabric-crds.yaml: NGINX Gateway Fabric's deploy/crds.yaml at its v2.5.1 tag.
- NGINX Gateway Fabric's chart: kept only in NGF's OCI registry (its release workflow's ``helm push``), whose
  manifest holds the only digest, so none could be pinned; the chart must hold the v2.5.1 tag's values.yaml
  (pinned), which names the images it runs and the registry that keeps it.
- cert-manager (optional, for a DNS-01 wildcard certificate): jetstack's chart repository; third-party configs
  agree on its sha256, unconfirmed against jetstack's own index.
"""

from __future__ import annotations

CHARTS_RELEASES = "https://github.com/akash-network/helm-charts/releases/download"
CHARTS_INDEX = "Akash's chart repository index (helm-charts gh-pages @ 3cc0711)"
# chart -> (version, the index's digest)
CHARTS = {
    "provider": ("19.0.2", "fd4d5d8e7c1e5ef589d4c3ee3c1269b17f3a28a9ee3e73fc4197879d223e6a13"),
    "akash-hostname-operator": ("19.0.2", "babfd36e0b0f37cd6581c797fac0b6256c1c8572cf072c57ab25ee5737be80b4"),
    "akash-inventory-operator": ("19.0.2", "f777a5bf0dfebec76ece4cde483c7417623763b9b25bbf2ce6c66f1fb61beec1"),
    "akash-gateway": ("1.2.1", "18695126b6e818a60e235232bd6b4bebd00509a6a24e437e3667e420a58731e8"),
}
NGF_SOURCE = "https://raw.githubusercontent.com/nginx/nginx-gateway-fabric/v2.5.1"
FILES: list[dict[str, str]] = [
    *({"file": f"{chart}-{version}.tgz", "version": version, "sha256": digest, "source": CHARTS_INDEX,
       "url": f"{CHARTS_RELEASES}/{chart}-{version}/{chart}-{version}.tgz"}
      for chart, (version, digest) in CHARTS.items()),
    {"file": "akash-crd.yaml", "version": "afc4dd7",
     "url": "https://raw.githubusercontent.com/akash-network/provider/afc4dd7c30a2ba3bb79d471e6dc5fa6ee14018ff/"
            "pkg/apis/akash.network/crd.yaml",
     "sha256": "2a18d79a29f8438bbf9f1b983e8c6aa78cbd90ee70df3d7182f92ee3ceedbccd",
     "source": "akash-network/provider at afc4dd7"},
    {"file": "gateway-api-crds.yaml", "version": "v1.5.1",
     "url": "https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.5.1/experimental-install.yaml",
     "sha256": "64ec76609a6ac885e0405dea79ca509c229fa019d342f0857aa8b6bdc8b8ba92",
     "source": "the Gateway API v1.5.1 release"},
    {"file": "nginx-gateway-fabric-crds.yaml", "version": "2.5.1", "url": f"{NGF_SOURCE}/deploy/crds.yaml",
     "sha256": "31928b3980bc611db8cb5b40661c2c255998db616b2ddf9b7d4e04625113ff87",
     "source": "NGINX Gateway Fabric's v2.5.1 tag"},
    {"file": "nginx-gateway-fabric-2.5.1.tgz", "version": "2.5.1",
     "url": "oci://{registry}/nginx/charts/nginx-gateway-fabric:2.5.1",
     "values_url": f"{NGF_SOURCE}/charts/nginx-gateway-fabric/values.yaml",
     "values_sha256": "38c772e81c08717a94282408026429634cc498b5e3a74c77f35bac56587a977b",
     "caveat": "no published digest: NGINX Gateway Fabric keeps its chart only in its OCI registry, so it is "
               "checked against the digest the registry's manifest names, and its values.yaml (the images it "
               "runs) against the v2.5.1 release's"},
    {"file": "cert-manager-v1.19.1.tgz", "version": "v1.19.1", "extra": "cert-manager",
     "url": "https://charts.jetstack.io/charts/cert-manager-v1.19.1.tgz",
     "sha256": "f72a727b1749df3521e7a65af5f18505f93b572d758841890270b150344b2b41",
     "source": "third-party configs (unconfirmed against jetstack's index)",
     "caveat": "third-party configs agree on this sha256; it is unconfirmed against jetstack's own chart index"},
]
