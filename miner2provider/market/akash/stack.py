"""Akash's provider stack for one farm, as k3s installs it: the manifests m2p puts in the k3s server's
manifests folder and the one Secret that holds the wallet.  Pure: everything read comes in.

What goes where, in Akash's order (provider-playbooks roles/provider/tasks/install.yml; Akash's docs,
"provider installation prep"):

- ``m2p-akash-00-namespaces.yaml``: ``akash-services`` (labels ``akash.network=true`` and
  ``akash.network/name=akash-services``), ``lease`` and ``akash-gateway`` (``akash.network=true``);
- ``m2p-akash-01-crds.yaml``: Akash's CRDs, as given (charts.AkashCharts.crds);
- ``m2p-akash-02-gateway-api-crds.yaml``: the Gateway API's release file, as given: its CRDs and its upgrade
  guard policy (NGF's GatewayClass, the provider chart's HTTPRoute and akash-gateway's Gateway and TCPRoutes
  need them; k3s has none);
- ``m2p-akash-03-ingress-crds.yaml``: NGINX Gateway Fabric's CRDs, as given (a manifest: Helm never upgrades a
  chart's ``crds/``);
- ``m2p-akash-10-<release>.yaml``: one k3s HelmChart (helm.cattle.io/v1) per chart, in ``kube-system``,
  installing the archive itself (``chartContent``: works offline) into its namespace: NGF (ingress.py), the
  operators, akash-gateway and the provider.  The release names are the ones Akash's charts expect of each
  other (akash-gateway's TCPRoutes point at the Service ``akash-provider`` in akash-services; the chart names
  its objects after a release that contains its name).  Every install Job runs on the server only
  (``spec.bootstrap``: helm-controller's nodeSelector ``node-role.kubernetes.io/control-plane``): it mounts the
  wallet's values and runs as cluster-admin.

What runs where: the provider, the operators, the card list and NGF's control plane on the server, by the label
k3s gives servers and NodeRestriction keeps from kubelets (``node-role.kubernetes.io/control-plane``), never
by ``kubernetes.io/hostname``, which any kubelet sets on its own Node; NGF's data plane on the ingress rig only
(ingress.py).  The TLS Secrets and the ingress rig's label are made on the server by the role
(``tls``, ``node_labels`` of the stack), not written as manifests.  Helm keeps up to 10 revisions of a release
(k3s's Helm controller passes no ``--history-max``), each with a copy of its values: the role deletes the
provider release's superseded revisions at every apply (``prune_history``), so only the deployed one holds the
wallet.

Bids: the provider advertises ``capabilities/storage/1/class=ram`` (not persistent) with GPUs, as Akash's
playbook does: an order that asks for shared memory (``/dev/shm``, every GPU training image) names that class,
and a provider without it never bids.  The lease network policies are passed by the name the provider reads
(``AKASH_DEPLOYMENT_NETWORK_POLICIES_ENABLED``, a patch of the StatefulSet: the chart's value sets
``DEPLOYMENT_NETWORK_POLICIES_ENABLED``, which nothing reads), and the withdrawal period is Akash's documented
12 h, not the chart's 1 h.

The wallet (the exported key and its passphrase, base64 as the chart wants them) is only in the Secret
``m2p-akash-provider-wallet`` (kube-system, beside the HelmChart, as ``valuesSecrets`` requires), which
m2p sends to the API and never writes to the manifests folder.  Every value is checked here, because the
chart checks almost nothing (../shared/akash/README.md: an empty key renders, a bad base64 script
becomes the script, ``720`` renders as a non-duration).

Prices: ``price_target_gpu_mappings`` holds ``<model>.<vram>`` for every model and size the farm has,
and the bare ``<model>`` at the highest of its sizes' floors: Akash's bid script falls back from
``model.vram[.interface]`` to ``model`` and then to the highest price of the whole map
(helm-charts charts/akash-provider/scripts/price_script_generic.sh), so an order that names only the
model still bids at or above every floor, and no model ever falls through to another's price.  The
script itself is the provider chart's own (``bidpricescript``: base64 of scripts/price_script_generic.sh
from the archive installed), which turns the provider's bid strategy to ``shellScript``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import yaml

from miner2provider.core.errors import ProviderError
from miner2provider.market.akash import acme, gpu_list, ingress
from miner2provider.market.akash.charts import AkashCharts
from miner2provider.market.akash.provider_file import ProviderFile
from miner2provider.market.base import ProviderFarm, ProviderParts, ProviderStack
from miner2provider.market.pricing import Floor

NAMESPACE = "akash-services"
HELM_NAMESPACE = "kube-system"  # k3s's HelmCharts live here; a valuesSecrets Secret must sit beside its HelmChart
WALLET_SECRET = "m2p-akash-provider-wallet"
WALLET_KEY = "values.yaml"
MANAGED = {"app.kubernetes.io/managed-by": "m2p"}
# chart -> (release name, target namespace)
RELEASES = {ingress.CHART: (ingress.RELEASE, ingress.NAMESPACE),
            "akash-hostname-operator": ("akash-hostname-operator", NAMESPACE),
            "akash-inventory-operator": ("akash-inventory-operator", NAMESPACE),
            "akash-gateway": ("akash-gateway", ingress.GATEWAY_NAMESPACE),
            "provider": ("akash-provider", NAMESPACE),
            acme.CHART: (acme.RELEASE, acme.NAMESPACE)}
NAMESPACES = {NAMESPACE: {"akash.network": "true", "akash.network/name": NAMESPACE},
              "lease": {"akash.network": "true"}, ingress.GATEWAY_NAMESPACE: {"akash.network": "true"},
              ingress.NAMESPACE: {}}
SERVER = ingress.SERVER
# Akash's provider docs: the withdrawal period providers run (the chart's default is 1h).
WITHDRAWAL_PERIOD = "12h"
# The provider's flag --deployment-network-policies-enabled, read through viper with the prefix AKASH.
NETWORK_POLICIES_ENV = "AKASH_DEPLOYMENT_NETWORK_POLICIES_ENABLED"
PROVIDER_STATEFULSET = ("StatefulSet", "akash-provider", "provider")  # kind, name, container (the chart's)
# The storage class Akash's playbook advertises with GPUs: RAM-backed /dev/shm, not persistent.
RAM_STORAGE = (("capabilities/storage/1/class", "ram"), ("capabilities/storage/1/persistent", "false"))
FILE_PREFIX = "m2p-akash-"
# The farm's reclaimer (reclaimer.py): a ServiceAccount that may list nodes, namespaces and pods and exec into
# the provider's pod only (the chart's StatefulSet: release akash-provider, container named after the chart).
RECLAIMER = "m2p-reclaimer"
RECLAIMER_NAMESPACE = "m2p-system"
RECLAIMER_TOKEN = "m2p-reclaimer-token"
PROVIDER_POD, PROVIDER_CONTAINER = "akash-provider-0", "provider"
# What every install Job of the stack is told (helm-controller's HelmChart spec): run on a server only.
HELM_JOB: dict[str, Any] = {"bootstrap": True}
PARTS = ProviderParts(FILE_PREFIX, tuple(release for release, _ in RELEASES.values()), WALLET_SECRET,
                      "miner2provider.market.akash.reclaimer", (RECLAIMER_NAMESPACE, RECLAIMER_TOKEN),
                      (ingress.INGRESS_LABEL,), ((acme.NAMESPACE, acme.SECRET),))


def price_mappings(floors: Sequence[Floor]) -> str:
    """``model.vram=USD,...,model=USD`` (highest floor of its sizes); every model priced, never ``*``."""
    unpriced = sorted({f.key for f in floors if f.floor_per_month is None})
    if unpriced:
        raise ProviderError(f"no lease floor for {', '.join(unpriced)}: give their mining revenue in the "
                            "economics file (m2p pricing shows what is missing); m2p never bids a guessed price")
    if not floors:
        raise ProviderError("the farm has no GPU m2p can price: nothing to offer on Akash")
    prices: dict[str, float] = {}
    for f in floors:
        assert f.floor_per_month is not None
        prices[f.key] = f.floor_per_month
        prices[f.model] = max(prices.get(f.model, 0.0), f.floor_per_month)
    return ",".join(f"{key}={price:.2f}" for key, price in sorted(prices.items()))


def provider_values(provider: ProviderFile, farm: ProviderFarm, price_script: str) -> dict[str, Any]:
    if not price_script.startswith("#!"):
        raise ProviderError("the provider chart archive holds no price script (scripts/price_script_generic.sh): "
                            "is it Akash's provider chart?")
    attributes = [("host", "akash"), ("tier", "community")]
    if provider.organization:
        attributes.append(("organization", provider.organization))
    attributes += [(k, v) for k, v in farm.attributes if k not in dict(attributes)]
    if any(k == "capabilities/gpu" for k, _ in farm.attributes):
        attributes += [(k, v) for k, v in RAM_STORAGE if k not in dict(attributes)]
    values: dict[str, Any] = {
        "from": provider.wallet.address, "domain": provider.domain, "node": provider.rpc_node,
        "email": provider.email, "website": provider.website,
        "attributes": [{"key": k, "value": v} for k, v in attributes],
        "price_target_gpu_mappings": price_mappings(farm.floors),
        "bidpricescript": base64.b64encode(price_script.encode()).decode(),
        "nodeSelector": dict(SERVER), "withdrawalperiod": WITHDRAWAL_PERIOD,
        "deploymentnetworkpoliciesenabled": "true",  # said here too, though only the patch reaches the provider
    }
    if provider.reclamation_window:
        values["reclamationWindow"] = provider.reclamation_window  # checked as a Go duration, 1h-720h
    return values


def card_list_objects(card_list: dict[str, Any], image: str) -> list[dict[str, Any]]:
    """m2p's card list served inside the cluster for the inventory operator (see gpu_list.py)."""
    return gpu_list.objects(NAMESPACE, json.dumps(card_list, sort_keys=True), image, SERVER, MANAGED)


def network_policies_patch() -> dict[str, str]:
    """The provider's StatefulSet given the lease network-policy setting by the name the provider reads."""
    return gpu_list.env_patch(NAMESPACE, PROVIDER_STATEFULSET, NETWORK_POLICIES_ENV, "true")


def build(provider: ProviderFile, farm: ProviderFarm, charts: AkashCharts, wallet: dict[str, str],
          acme_credential: str = "") -> ProviderStack:
    """``acme_credential``: the DNS provider's credential when the provider file asks for a real wildcard certificate
    (``acme_dns``; it goes only into the Secret list, beside the wallet)."""
    if not farm.ingress_node:
        raise ProviderError(f"no ingress rig's node ({provider.where('ingress_rig')}): its data plane takes the farm's "
                            "traffic")
    server = {"nodeSelector": dict(SERVER)}
    values: dict[str, dict[str, Any]] = {
        ingress.CHART: ingress.values(),
        "akash-hostname-operator": dict(server), "akash-inventory-operator": dict(server),
        "akash-gateway": {"domain": provider.domain}, "provider": provider_values(provider, farm, charts.price_script),
        acme.CHART: acme.values(SERVER)}
    namespaces = {**NAMESPACES, **({acme.NAMESPACE: {}} if provider.acme_dns else {})}
    files = {f"{FILE_PREFIX}00-namespaces.yaml": _documents(_namespace(n, labels) for n, labels in namespaces.items()),
             f"{FILE_PREFIX}01-crds.yaml": charts.crds, f"{FILE_PREFIX}02-gateway-api-crds.yaml": charts.gateway_crds,
             f"{FILE_PREFIX}03-ingress-crds.yaml": charts.ingress_crds}
    for chart, archive in charts.charts.items():
        release, namespace = RELEASES[chart]
        spec: dict[str, Any] = {"chartContent": base64.b64encode(archive.data).decode(), "targetNamespace": namespace,
                                "valuesContent": yaml.safe_dump(values[chart], sort_keys=True),
                                **HELM_JOB}
        if chart == "provider":
            spec["valuesSecrets"] = [{"name": WALLET_SECRET, "keys": [WALLET_KEY]}]
        files[f"{FILE_PREFIX}10-{release}.yaml"] = _documents([{
            "apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": release, "namespace": HELM_NAMESPACE, "labels": dict(MANAGED)}, "spec": spec}])
    operator = charts.charts["akash-inventory-operator"]
    files[f"{FILE_PREFIX}20-gpu-list.yaml"] = _documents(card_list_objects(farm.card_list, operator.image))
    wallet_secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                     "metadata": {"name": WALLET_SECRET, "namespace": HELM_NAMESPACE, "labels": dict(MANAGED)},
                     "stringData": {WALLET_KEY: yaml.safe_dump(wallet, sort_keys=True)}}
    secret = json.dumps(wallet_secret, sort_keys=True)
    secret_env = [provider.wallet.passphrase_env]
    if provider.acme_dns:
        if not acme_credential:
            raise ProviderError(f"the environment variable {provider.acme_dns.credential_env} (acme_dns.credential_env "
                                f"in {provider.where('acme_dns')}) is empty or unset: it must hold the "
                                f"{provider.acme_dns.provider} credential cert-manager's DNS-01 solver uses")
        # One List on stdin: cert-manager's namespace first (k3s has not made it yet), then both Secrets.
        secret = json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            _namespace(acme.NAMESPACE, {}), wallet_secret, acme.secret(acme_credential, MANAGED)]}, sort_keys=True)
        secret_env.append(provider.acme_dns.credential_env)
        files[f"{FILE_PREFIX}25-certificate.yaml"] = _documents(acme.objects(
            provider.domain, provider.email, provider.acme_dns.provider, provider.acme_dns.project, dict(MANAGED)))
    reclaimer = ""
    if provider.reclamation_window:  # a window is offered only with the reclaimer that honours it
        files[f"{FILE_PREFIX}30-reclaimer.yaml"] = _documents(reclaimer_objects())
        reclaimer = json.dumps({"pod_namespace": NAMESPACE, "pod": PROVIDER_POD, "container": PROVIDER_CONTAINER,
                                "close_without_window": provider.close_leases_without_window,
                                "reclaim_spanning": provider.reclaim_leases_across_rigs}, sort_keys=True)
    server_side = json.dumps({"tls": ingress.tls_secrets(provider.domain, wildcard=provider.acme_dns is None),
                              "node_labels": ingress.node_labels(farm.ingress_node),
                              "prune_history": [{"namespace": NAMESPACE, "release": RELEASES["provider"][0]}]},
                             sort_keys=True)
    patches = (gpu_list.operator_patch(NAMESPACE), network_policies_patch())
    return ProviderStack(files, secret, fingerprint(files, secret, reclaimer + server_side),
                         {chart: values[chart] for chart in charts.charts}, tuple(secret_env), patches, reclaimer,
                         server_side)


def reclaimer_objects() -> list[dict[str, Any]]:
    """The reclaimer's identity and rights: read nodes, namespaces and pods; exec into the provider's pod only
    (``resourceNames``); nothing written.  Its token lives in a ServiceAccount token Secret the API fills."""
    meta = {"name": RECLAIMER, "labels": dict(MANAGED)}
    subject = [{"kind": "ServiceAccount", "name": RECLAIMER, "namespace": RECLAIMER_NAMESPACE}]
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        _namespace(RECLAIMER_NAMESPACE, {}),
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**meta, "namespace": RECLAIMER_NAMESPACE},
         "automountServiceAccountToken": False},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {"name": RECLAIMER_TOKEN, "namespace": RECLAIMER_NAMESPACE, "labels": dict(MANAGED),
                      "annotations": {"kubernetes.io/service-account.name": RECLAIMER}}},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": meta,
         "rules": [{"apiGroups": [""], "resources": ["nodes", "namespaces", "pods"], "verbs": ["get", "list"]}]},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": meta, "subjects": subject,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RECLAIMER}},
        {"apiVersion": rbac, "kind": "Role", "metadata": {**meta, "namespace": NAMESPACE},
         "rules": [{"apiGroups": [""], "resources": ["pods/exec"], "resourceNames": [PROVIDER_POD],
                    "verbs": ["create", "get"]}]},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": {**meta, "namespace": NAMESPACE}, "subjects": subject,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RECLAIMER}},
    ]


def fingerprint(files: dict[str, str], secret: str, reclaimer: str) -> str:
    """Changes with any manifest, the reclaimer's settings or the wallet.  The wallet part goes through scrypt,
    salted with the manifests' digest: the fingerprint file on the server must not be a fast way to try
    passphrases."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    digest.update(reclaimer.encode())
    salt = digest.digest()
    return digest.hexdigest()[:32] + hashlib.scrypt(secret.encode(), salt=salt, n=1 << 14, r=8, p=1, dklen=16).hex()


def _namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {**labels, **MANAGED}}}


def _documents(docs: Any) -> str:
    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in docs)
