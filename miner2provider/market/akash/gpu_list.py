"""m2p's card list for Akash's inventory operator, served inside the cluster.  Pure.

Why: the inventory operator counts a node's GPUs from kubelet's allocatable, but names them (vendor,
model, VRAM, interface: what bids match on) only for cards found in the list at
``<provider-configs-url>/devices/gpus``; a card it does not find is skipped without a word
(akash-network/provider operator/inventory/node-discovery.go, parseGPUInfo: ``continue`` when the vendor
or device ID is missing).  So a CMP 90HX farm has GPUs that no order naming a model can win.  The URL is
the operator's flag ``--provider-configs-url`` (operator/inventory/cmd.go; default
https://provider-configs.akash.network), read through viper with the prefix ``AP``
(cmd/provider-services/main.go), so the environment variable ``AP_PROVIDER_CONFIGS_URL`` sets it.  No
chart value does, and the chart's env list is fixed.

How, so that it survives chart upgrades:
- the list (market/akash/gpus_json.py: Akash's entries as Akash names them, plus the cards m2p knows that
  Akash lacks) is a ConfigMap, served by a Deployment of the image the operator itself runs (so it is on
  the farm already, offline too: its netcat answers every request with the list, one at a time), behind a
  Service and a NetworkPolicy that lets only the operator's pods in;
- the operator's Deployment gets ``AP_PROVIDER_CONFIGS_URL`` through a server-side apply patch with
  m2p's own field manager: the field belongs to m2p, and Helm (server-side apply is k3s's default for
  HelmChart installs) neither removes nor fights a field it does not own, so an upgrade of Akash's chart
  keeps it.  A plain patch or an edit would be owned by whoever made it and lost or conflicted on
  upgrade; a HelmChartConfig cannot add an env var the chart does not template.
Not verified against a live kube-apiserver (none runs here): the stand-in applies the patch's env entry by
name, as the API's merge keys for containers and env do.
"""

from __future__ import annotations

import json
from typing import Any

NAME = "m2p-gpu-list"
PORT = 8080
OPERATOR = ("Deployment", "operator-inventory", "operator-inventory")  # kind, name, container (the chart's)
OPERATOR_POD = {"app.kubernetes.io/name": "inventory"}  # the chart's pod labels
ENV = "AP_PROVIDER_CONFIGS_URL"
# One request, one answer: HTTP/1.0 with the list and its length, then close (netcat-traditional's -q).
SERVE = ("while true; do { printf 'HTTP/1.0 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: %s\\r\\n"
         "Connection: close\\r\\n\\r\\n' \"$(wc -c < /list/gpus)\"; cat /list/gpus; } | nc -l -p "
         f"{PORT} -q 1 > /dev/null; done")


def url(namespace: str) -> str:
    """The base URL the operator is given; it asks ``<url>/devices/gpus``."""
    return f"http://{NAME}.{namespace}.svc.cluster.local"


def objects(namespace: str, card_list_json: str, image: str, node_selector: dict[str, str],
            labels: dict[str, str]) -> list[dict[str, Any]]:
    own = {"app.kubernetes.io/name": NAME, **labels}
    meta = {"name": NAME, "namespace": namespace, "labels": own}
    pod = {
        "automountServiceAccountToken": False,
        "nodeSelector": dict(node_selector),
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "serve", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/bash", "-c", SERVE],
            "ports": [{"containerPort": PORT, "name": "http"}],
            "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}, "limits": {"cpu": "50m", "memory": "32Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "list", "mountPath": "/list", "readOnly": True}]}],
        "volumes": [{"name": "list", "configMap": {"name": NAME, "items": [{"key": "gpus", "path": "gpus"}]}}],
    }
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"gpus": card_list_json}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                  "template": {"metadata": {"labels": own}, "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"selector": {"app.kubernetes.io/name": NAME},
                  "ports": [{"name": "http", "port": 80, "targetPort": PORT}]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta,
         "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": NAME}}, "policyTypes": ["Ingress"],
                  "ingress": [{"from": [{"podSelector": {"matchLabels": OPERATOR_POD}}],
                               "ports": [{"port": PORT, "protocol": "TCP"}]}]}},
    ]


def operator_patch(namespace: str) -> dict[str, str]:
    return env_patch(namespace, OPERATOR, ENV, url(namespace))


def env_patch(namespace: str, target: tuple[str, str, str], env: str, value: str) -> dict[str, str]:
    """A server-side apply patch giving one container of a chart's workload (kind, name, container) one env entry,
    owned by m2p's field manager (role market_provider sends it once the workload exists)."""
    kind, name, container = target
    body = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace},
            "spec": {"template": {"spec": {"containers": [
                {"name": container, "env": [{"name": env, "value": value}]}]}}}}
    return {"namespace": namespace, "kind": kind.lower(), "name": name, "body": json.dumps(body, sort_keys=True)}
