"""A real wildcard certificate for the ingress, when the owner asks for one: cert-manager v1.19.1 with a DNS-01
issuer (Cloudflare or Google Cloud DNS), as Akash's provider-playbooks makes it (4e78f28 roles/provider,
``acme_dns_provider``: a ClusterIssuer ``letsencrypt-prod`` and a Certificate ``wildcard-https`` in
``akash-gateway`` for ``*.<domain>`` and ``*.ingress.<domain>`` into the Secret ``wildcard-ingress-tls``).  Pure.

Without it the ingress serves the self-signed placeholder Akash's playbook makes by default (ingress.py).

- The DNS provider's credential (a Cloudflare API token; a Google service account's JSON key) comes from the
  environment variable the provider file names, never from a file m2p reads or writes: it goes into one Secret,
  ``m2p-acme-dns``, in cert-manager's namespace (where a ClusterIssuer's secret references are read: cert-manager's
  cluster resource namespace), sent to the API with the wallet, on stdin.
- cert-manager's CRDs come with its chart (``crds.enabled``); the ClusterIssuer and the Certificate are a manifest
  of their own, after the chart's, which k3s's deploy controller applies again until those CRDs exist.
- Every cert-manager pod runs on the server (it holds the DNS credential).
Sources: cert-manager v1.19.1's chart values (``crds.enabled``, ``nodeSelector`` per component) and its ACME
DNS-01 solvers (``cloudflare.apiTokenSecretRef``, ``cloudDNS.project`` and ``serviceAccountSecretRef``).
"""

from __future__ import annotations

from typing import Any

from miner2provider.market.akash import ingress

CHART = "cert-manager"
VERSION = "v1.19.1"
NAMESPACE = "cert-manager"
RELEASE = "m2p-cert-manager"  # not an owner's own cert-manager HelmChart: remove deletes only this one
ISSUER = "letsencrypt-prod"
CERTIFICATE = "wildcard-https"
SECRET = "m2p-acme-dns"
SECRET_KEY = "credential"
ACME_SERVER = "https://acme-v02.api.letsencrypt.org/directory"  # Let's Encrypt's production directory
PROVIDERS = ("cloudflare", "google")


def values(server: dict[str, str]) -> dict[str, Any]:
    """cert-manager's values: its CRDs installed with it, every component on the server, sized for a rig."""
    sized = {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
    component = {"nodeSelector": dict(server), "resources": sized}
    return {"crds": {"enabled": True, "keep": True}, "nodeSelector": dict(server), "resources": sized,
            "webhook": dict(component), "cainjector": dict(component), "startupapicheck": dict(component)}


def secret(credential: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": SECRET, "namespace": NAMESPACE, "labels": dict(labels)},
            "stringData": {SECRET_KEY: credential}}


def objects(domain: str, email: str, provider: str, project: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The ClusterIssuer and the Certificate that fill ``wildcard-ingress-tls``."""
    ref = {"name": SECRET, "key": SECRET_KEY}
    solver = ({"cloudflare": {"apiTokenSecretRef": ref}} if provider == "cloudflare"
              else {"cloudDNS": {"project": project, "serviceAccountSecretRef": ref}})
    return [
        {"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer", "metadata": {"name": ISSUER, "labels": labels},
         "spec": {"acme": {"server": ACME_SERVER, "email": email, "privateKeySecretRef": {"name": f"{ISSUER}-account"},
                           "solvers": [{"dns01": solver}]}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
         "metadata": {"name": CERTIFICATE, "namespace": ingress.GATEWAY_NAMESPACE, "labels": labels},
         "spec": {"secretName": ingress.WILDCARD_TLS, "issuerRef": {"name": ISSUER, "kind": "ClusterIssuer"},
                  "dnsNames": [f"*.{domain}", f"*.ingress.{domain}"]}},
    ]
