"""The ingress Akash's provider 19.0.2 needs, as m2p installs it: NGINX Gateway Fabric (NGF), its TLS Secrets and
where each piece runs.  Pure.

Akash's order and values (provider-playbooks 4e78f28 roles/provider/tasks/install.yml and
files/nginx-gateway-fabric-values.yaml; ../shared/akash/README.md): the Gateway API's experimental CRDs, then NGF
(release ``ngf`` in ``nginx-gateway``, GatewayClass ``nginx``, experimental features on for TCPRoute, the data
plane a DaemonSet with hostPorts behind a ClusterIP Service), the TLS Secrets ``wildcard-ingress-tls`` and
``akash-default-tls`` in ``akash-gateway``, then akash-gateway and the provider.  Where m2p differs, and why:

- The data plane runs on the ingress rig only: NGF 2.x makes its DaemonSet at run time from the NginxProxy the
  chart renders, whose pod nodeSelector comes from ``nginx.pod.nodeSelector``.  Akash's values put it on every
  node, so every rig would hold ports 80, 443, 8443 and 8444 and the wildcard certificate.
- It selects that rig, and the control plane and its certificate Job the server, by labels a kubelet cannot set
  on its own Node (NodeRestriction, KEP-279): ``node-role.kubernetes.io/control-plane`` (k3s puts it on its
  servers) and ``node-restriction.kubernetes.io/m2p-ingress`` (m2p puts it on the ingress rig with the admin's
  credential).  ``kubernetes.io/hostname`` is the kubelet's own to set: a taken rig could name itself the
  ingress and be handed the certificate.
- Requests sized for a rig (Akash's docs: 100m / 128Mi); the playbook's 1 CPU / 1 GiB would take a core from
  leases.  Memory is capped at the playbook's 1 GiB; CPU is not capped (a cap throttles TLS under load).
- Only 80, 443, 8443 and 8444 are host ports: the provider's ACME HTTP-01 port 5002 is reached through the
  Gateway's port 80 (the provider chart's HTTPRoute), never from outside.
- NGF's product telemetry is off: a farm's ingress reports nothing to a vendor.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "nginx-gateway"
RELEASE = "ngf"
CHART = "nginx-gateway-fabric"
GATEWAY_NAMESPACE = "akash-gateway"
GATEWAY_CLASS = "nginx"
PORTS = (80, 443, 8443, 8444)
# k3s labels every server so (and only servers); NodeRestriction refuses it to a kubelet.
SERVER = {"node-role.kubernetes.io/control-plane": "true"}
INGRESS_LABEL = "node-restriction.kubernetes.io/m2p-ingress"
INGRESS = {INGRESS_LABEL: "true"}
REQUESTS = {"cpu": "100m", "memory": "128Mi"}
LIMITS = {"memory": "1Gi"}
DEFAULT_TLS, WILDCARD_TLS = "akash-default-tls", "wildcard-ingress-tls"


def values() -> dict[str, Any]:
    """NGF's values: Akash's, with the differences above."""
    sized = {"requests": dict(REQUESTS), "limits": dict(LIMITS)}
    return {
        "nginxGateway": {"gatewayClassName": GATEWAY_CLASS, "gwAPIExperimentalFeatures": {"enable": True},
                         "leaderElection": {"enable": True}, "config": {"logging": {"level": "info"}},
                         "productTelemetry": {"enable": False}, "resources": sized, "nodeSelector": dict(SERVER)},
        "nginx": {"kind": "daemonSet", "service": {"type": "ClusterIP"},
                  "container": {"hostPorts": [{"port": p, "containerPort": p} for p in PORTS], "resources": sized},
                  "pod": {"nodeSelector": dict(INGRESS)}},
        "certGenerator": {"nodeSelector": dict(SERVER)},
    }


def tls_secrets(domain: str, wildcard: bool = True) -> list[dict[str, Any]]:
    """The self-signed placeholders Akash's playbook makes when no ACME DNS provider is set (its default): made on
    the server (role market_provider), once, so the keys never leave it nor sit in the manifests folder.  With an
    ACME DNS provider (acme.py) cert-manager fills the wildcard's Secret instead (``wildcard`` False)."""
    made = [{"name": DEFAULT_TLS, "namespace": GATEWAY_NAMESPACE, "names": ["default"]}]
    if wildcard:
        made.append({"name": WILDCARD_TLS, "namespace": GATEWAY_NAMESPACE,
                     "names": [f"*.ingress.{domain}", f"*.{domain}"]})
    return made


def node_labels(ingress_node: str) -> dict[str, str]:
    """Label -> the one node that carries it (every other node's is taken off)."""
    return {INGRESS_LABEL: ingress_node}
