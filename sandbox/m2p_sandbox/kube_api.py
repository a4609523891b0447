"""STAND-IN Kubernetes API server for the agent's tests (no kube-apiserver can run here).

It speaks HTTPS with its own test CA (``authority``; its PEM is what a caller gives m2p as the cluster's CA), as
kube-apiserver serves only TLS (m2p refuses an http:// API); ``tls=False`` is only for a test whose client cannot
speak TLS.  It serves only what m2p's agent calls, with objects shaped as the Kubernetes API documents
them (v1 Pod, PodList, Node, Status):
- ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``
- ``GET /api/v1/nodes/<name>``, ``PATCH /api/v1/nodes/<name>`` (``application/merge-patch+json``,
  RFC 7386; a ``metadata.resourceVersion`` in the patch must match, else 409 Conflict)
- bearer tokens, each allowed to patch one node (the agent's RBAC), else 401 / 403; a token
  bound to its ServiceAccount's Secret (``bind_token``) is refused (401) once that Secret is
  gone, as the API refuses a deleted Secret's token;
- for the admin (``k3s kubectl`` on a server, through the stand-in k3s): ``GET`` of a Secret and
  ``DELETE`` of nodes, namespaces (with everything in them), secrets, serviceaccounts,
  clusterroles, clusterrolebindings, priorityclasses and k3s HelmCharts; ``PUT`` of a Secret (kubectl's
  server-side apply; ``stringData`` is folded into base64 ``data`` as the API does, never kept) and of a
  Deployment patch (env entries merged by name); ``GET`` of a Deployment.
  ``apply`` puts a manifest's objects in, standing for k3s's deploy controller; nothing happens
  when a manifest file goes (k3s does not delete what a removed manifest made), since nothing here watches the files.
- for the farm's reclaimer (``add_reclaimer``: a ServiceAccount token bound to m2p's reclaimer roles, as
  roles/market_provider grants them): ``GET`` lists of nodes, namespaces and pods by ``labelSelector=<key>``
  and ``POST .../pods/<pod>/exec`` on the one pod its Role names; anything else 403.  The exec runs what the
  test registered for that pod (``exec_in``: the STAND-IN provider pod, akash_chain.ProviderPod).  The real
  API upgrades exec to a streaming protocol (SPDY / websocket, which kubectl speaks); the stand-in answers
  the same URL (``command``, ``container`` query parameters) with one JSON reply
  ``{"exitCode", "stdout", "stderr"}``, which the stand-in kubectl prints as kubectl would.
  Its token lives by the Secret that holds it, as every ServiceAccount token Secret's does: deleted, the token
  is refused (401); a ``kubernetes.io/service-account-token`` Secret made without a token (PUT or ``apply``) is
  filled with a new one, as the API's token controller fills it, and that token has the rights of the
  ServiceAccount the Secret names (kubernetes ``pkg/controller/serviceaccount/tokens_controller.go``; the
  authenticator's Secret look-up, ``pkg/serviceaccount/legacy.go``).
- for a kubelet (a client certificate ``system:node:<node>``, TLS only): its own node's pods and Node, as the
  Node authorizer and NodeRestriction allow, and ``POST /api/v1/namespaces/<ns>/pods`` of a mirror pod, admitted
  only as NodeRestriction admits one (kube_api_mirror).
No watch, no other verbs.  The test drives the rest: ``add_pod``, ``set_phase``,
``delete_pod`` (a pod is bound where the test says: no scheduler runs here, so the tests
bind only to nodes that are offered, as the scheduler would).

``akash_view`` answers what Akash's provider would offer of a node, computed the way its
inventory operator does (akash-network/provider, ``operator/inventory/node-discovery.go``):
a pod's requests count as allocated when its ``PodScheduled`` condition is True and its
phase is Pending or Running (``isPodAllocated``), in every namespace and at every priority
(``addPodAllocatedResources``); a node that is not Ready or is unschedulable (cordoned) is
left out of the inventory; taints are not looked at.  The bidder then needs the GPUs a
lease asks for among allocatable minus allocated
(``cluster/kube/operators/clients/inventory/inventory.go``, ``tryAdjustGPU``).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import ssl
import tempfile
import threading
import urllib.parse
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any

from m2p_sandbox import pki
from m2p_sandbox.kube_api_mirror import mirror_pod_refusal
from m2p_sandbox.served import Served, reply_json

GPU = "nvidia.com/gpu"
BUILT_IN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")  # every cluster has them


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _legal_label(key: str, value: Any) -> bool:
    """A label as the API validates it (Kubernetes docs, "Labels and Selectors"): an optional DNS-subdomain
    prefix of at most 253 characters and a slash, a name of at most 63; a value of at most 63, empty or
    alphanumeric at both ends with ``-_.`` inside."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return (isinstance(value, str) and _LABEL_NAME.match(name) is not None
            and (value == "" or _LABEL_NAME.match(value) is not None))


# NodeRestriction's label rules (kubernetes/kubernetes @01467da7 plugin/pkg/admission/noderestriction/admission.go
# getForbiddenLabels; @1c7b3d91 staging/src/k8s.io/kubelet/pkg/apis/well_known_labels.go IsKubeletLabel): a kubelet
# may never set a label under node-restriction.kubernetes.io; under kubernetes.io / k8s.io only these keys and the
# namespaces kubelet.kubernetes.io and node.kubernetes.io.
KUBELET_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")
RESTRICTED_NAMESPACE = "node-restriction.kubernetes.io"
KUBELET_LABELS = {"kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "beta.kubernetes.io/arch",
                  "beta.kubernetes.io/os", "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
                  "failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
                  "topology.kubernetes.io/region", "topology.kubernetes.io/zone"}


def _in(prefix: str, *domains: str) -> bool:
    return any(prefix == d or prefix.endswith("." + d) for d in domains)


def kubelet_may_not_set(key: str) -> bool:
    """NodeRestriction's verdict on a label a kubelet adds, changes or removes on its own Node."""
    prefix = key.rpartition("/")[0]
    if _in(prefix, RESTRICTED_NAMESPACE):
        return True
    return _in(prefix, "kubernetes.io", "k8s.io") and key not in KUBELET_LABELS and not _in(prefix, *KUBELET_NAMESPACES)


def _kubelet_of(handler: BaseHTTPRequestHandler) -> str | None:
    """The node whose kubelet certificate the client showed (TLS only), or None."""
    peer = getattr(handler.connection, "getpeercert", lambda: None)()
    if not peer:
        return None
    subject = {key: value for rdn in peer.get("subject", ()) for key, value in rdn}
    name = subject.get("commonName", "")
    if subject.get("organizationName") != "system:nodes" or not name.startswith("system:node:"):
        return None
    return str(name)[len("system:node:"):]


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"  # a Secret type, and its annotation below
SERVICE_ACCOUNT_NAME = "kubernetes.io/service-account.name"


class NodePasswordRejected(Exception):
    """k3s refused a node registration (see ``KubeApiStandin.join``)."""


class KubeApiStandin(Served):
    def __init__(self, host: str = "127.0.0.1", port: int = 0, tls: bool = True) -> None:
        self.lock = threading.Lock()
        self.version = 1
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.tokens: dict[str, str] = {}  # token -> the node it may patch
        self.admin_tokens: set[str] = set()
        self.token_secrets: dict[str, tuple[str, str]] = {}  # token -> (namespace, Secret) it lives by
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, namespace, name) -> object
        self.requests: list[tuple[str, str]] = []  # (method, path) served, for tests
        self.reclaimers: dict[str, tuple[str, str]] = {}  # token -> the (namespace, pod) it may exec into
        self.account_pods: dict[tuple[str, str], tuple[str, str]] = {}  # reclaimer ServiceAccount -> its pod
        self.exec_in: dict[tuple[str, str, str], Any] = {}  # (namespace, pod, container) -> argv -> (rc, out, err)
        self.down = False  # answer nothing useful (503), as an unreachable API would fail
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as kube-apiserver (every answer says its length)

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                standin._serve(self, "GET")

            def do_PATCH(self) -> None:
                standin._serve(self, "PATCH")

            def do_DELETE(self) -> None:
                standin._serve(self, "DELETE")

            def do_PUT(self) -> None:
                standin._serve(self, "PUT")

            def do_POST(self) -> None:
                standin._serve(self, "POST")

        self._serve_on(host, port, Handler)
        self.authority: pki.Authority | None = None
        if tls:  # HTTPS; a client certificate is optional (admins use tokens) and names a node's kubelet
            self.authority = pki.Authority()
            cert, key = self.authority.issue("kube-apiserver", address=host)
            self.files = tempfile.mkdtemp(prefix="m2p-kube-api-")
            paths = {}
            for name, data in (("ca.crt", self.authority.pem), ("server.crt", cert), ("server.key", key)):
                paths[name] = os.path.join(self.files, name)
                with open(paths[name], "wb") as f:
                    f.write(data)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(paths["server.crt"], paths["server.key"])
            context.load_verify_locations(paths["ca.crt"])
            context.verify_mode = ssl.CERT_OPTIONAL
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)

    @property
    def url(self) -> str:
        return super().url.replace("http://", "https://", 1) if self.authority else super().url

    def close(self) -> None:
        super().close()
        if self.authority is not None:  # its CA, certificate and key: one folder per stand-in, gone with it
            shutil.rmtree(self.files, ignore_errors=True)

    def kubelet_credential(self, node: str) -> tuple[bytes, bytes, bytes]:
        """(CA, certificate, key) PEMs as k3s gives a node's kubelet: ``CN=system:node:<node>,
        O=system:nodes`` (k3s writes them as agent/server-ca.crt, client-kubelet.crt and .key)."""
        assert self.authority is not None, "KubeApiStandin(tls=True) issues kubelet credentials"
        cert, key = self.authority.issue(f"system:node:{node}", organization="system:nodes")
        return self.authority.pem, cert, key

    # -- objects the test creates ------------------------------------------------------
    def _bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    def add_node(self, name: str, token: str, labels: dict[str, str] | None = None, gpus: int = 0) -> None:
        with self.lock:
            resources = {GPU: str(gpus)} if gpus else {}
            node = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "uid": str(uuid.uuid4()), "labels": dict(labels or {}),
                                 "annotations": {}, "creationTimestamp": _now()},
                    "spec": {}, "status": {"capacity": dict(resources), "allocatable": dict(resources),
                                           "conditions": [{"type": "Ready", "status": "True"}]}}
            self._bump(node)
            self.nodes[name] = node
            self.tokens[token] = name

    def join(self, name: str, password: str) -> None:
        """A k3s node registering, standing in for k3s's node-password check: the server keeps each
        node's password in the Secret ``<node>.node-password.k3s`` (kube-system) and refuses a
        node of the same name with another password ("Node password rejected, duplicate
        hostname"), so a re-installed rig (a new /etc/rancher/node/password) joins only once
        that Secret is gone.  Source: k3s docs, architecture, "How Agent Node Registration Works"."""
        digest = hashlib.sha256(password.encode()).hexdigest()
        key = ("Secret", "kube-system", f"{name}.node-password.k3s")
        with self.lock:
            kept = self.objects.get(key, {}).get("data", {}).get("hash")
            if kept is not None and kept != digest:
                raise NodePasswordRejected(f"{name}: Node password rejected, duplicate hostname or contents "
                                           "of '/etc/rancher/node/password' may not match server node-passwd entry")
        self.apply([{"kind": "Secret", "metadata": {"name": key[2], "namespace": key[1]}, "data": {"hash": digest}}])
        if not self.has("Node", name):
            self.add_node(name, secrets.token_urlsafe(16))

    def apply(self, docs: list[dict[str, Any]]) -> None:
        """A manifest's objects, as k3s's deploy controller creates them."""
        with self.lock:
            for doc in docs:
                meta = doc["metadata"]
                obj = copy.deepcopy(doc)
                key = (doc["kind"], meta.get("namespace", ""), meta["name"])
                if "data" not in obj and "data" in self.objects.get(key, {}):
                    obj["data"] = self.objects[key]["data"]  # the token controller's filling stays
                self._bump(obj)
                self.objects[key] = obj
                self._fill_token(obj)

    def _fill_token(self, secret: dict[str, Any]) -> None:
        """The token controller: a ServiceAccount token Secret with no token gets a new one, with the rights of the
        ServiceAccount it names (a reclaimer's, where that account's tokens are).  Called with the lock held."""
        meta = secret.get("metadata", {})
        if secret.get("kind") != "Secret" or secret.get("type") != SERVICE_ACCOUNT_TOKEN or (
                secret.get("data") or {}).get("token"):
            return
        token = secrets.token_urlsafe(24)
        secret["data"] = {**(secret.get("data") or {}), "token": base64.b64encode(token.encode()).decode()}
        namespace = meta.get("namespace", "")
        self.token_secrets[token] = (namespace, meta["name"])
        pod = self.account_pods.get((namespace, meta.get("annotations", {}).get(SERVICE_ACCOUNT_NAME, "")))
        if pod is not None:
            self.reclaimers[token] = pod

    def bind_token(self, token: str, node: str, namespace: str, secret: str) -> None:
        """The token the token controller put in ``secret``: it may patch ``node`` while the Secret lives."""
        with self.lock:
            self.tokens[token] = node
            self.token_secrets[token] = (namespace, secret)

    def token_kubeconfig(self, token_file: str) -> str:
        """A kubeconfig (JSON) for a bearer token in ``token_file`` at this API, as m2p writes the reclaimer's
        (roles/market_provider) and the stand-in kubectl and the agent's client read it."""
        cluster = {"server": self.url} | ({"certificate-authority": os.path.join(self.files, "ca.crt")}
                                          if self.authority else {})
        return json.dumps({"apiVersion": "v1", "kind": "Config", "current-context": "m2p",
                           "clusters": [{"name": "k3s", "cluster": cluster}],
                           "users": [{"name": "m2p", "user": {"tokenFile": token_file}}],
                           "contexts": [{"name": "m2p", "context": {"cluster": "k3s", "user": "m2p"}}]})

    def add_reclaimer(self, token: str, pod: tuple[str, str] = ("akash-services", "akash-provider-0")) -> None:
        """The reclaimer's ServiceAccount token: list nodes, namespaces and pods; exec into ``pod`` only."""
        encoded = base64.b64encode(token.encode()).decode()
        with self.lock:
            self.reclaimers[token] = pod
            for (kind, namespace, name), obj in self.objects.items():  # the Secret it lives by, if the test made one
                if kind == "Secret" and (obj.get("data") or {}).get("token") == encoded:
                    self.token_secrets[token] = (namespace, name)
                    account = obj.get("metadata", {}).get("annotations", {}).get(SERVICE_ACCOUNT_NAME, "")
                    self.account_pods[(namespace, account)] = pod

    def has(self, kind: str, name: str, namespace: str = "") -> bool:
        with self.lock:
            if kind == "Node":
                return name in self.nodes
            return (kind, namespace, name) in self.objects

    def add_pod(self, name: str, node: str, gpus: int, namespace: str = "lease", phase: str = "Running",
                labels: dict[str, str] | None = None, owner: str | None = None) -> None:
        """A pod bound to ``node``, owned by a controller of kind ``owner`` (apps/v1; "": none).  Without
        ``labels``, a marketplace lease's pod outside the cluster's own namespaces: labelled as Akash's provider
        labels a lease's workload pods (provider cluster/kube/builder: akash.network=true,
        akash.network/manifest-service=<service>) and, without ``owner``, owned as the pods of the Deployment it
        makes for a service are, by that Deployment's ReplicaSet (builder/deployment.go @010080f3; a service with
        persistent storage gets a StatefulSet instead, builder/statefulset.go @ab942eee)."""
        system = namespace in {"kube-system", "kube-public", "kube-node-lease", "m2p-system", "akash-services"}
        if labels is None:
            labels = {} if system else {"akash.network": "true", "akash.network/manifest-service": name}
            owner = ("" if system else "ReplicaSet") if owner is None else owner
        with self.lock:
            self._add_pod(name, node, gpus, namespace, phase, labels, owner or "")

    def _add_pod(self, name: str, node: str, gpus: int, namespace: str, phase: str, labels: dict[str, str],
                 owner: str = "") -> None:
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
        owned_by = f"{name}-5d8f7c9b6" if owner == "ReplicaSet" else name  # a ReplicaSet: <deployment>-<hash>
        owners = [{"apiVersion": "apps/v1", "kind": owner, "name": owned_by, "uid": str(uuid.uuid4()),
                   "controller": True, "blockOwnerDeletion": True}] if owner else []
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                            "labels": labels, "creationTimestamp": _now(), "ownerReferences": owners},
               "spec": {"nodeName": node, "containers": [
                   {"name": "main", "image": "busybox:1.36", "resources": {"limits": limits, "requests": limits}}]},
               "status": {"phase": phase, "conditions": [{"type": "PodScheduled", "status": "True"}]}}
        self._bump(pod)
        self.pods[(namespace, name)] = pod

    def set_phase(self, name: str, phase: str, namespace: str = "lease") -> None:
        with self.lock:
            pod = self.pods[(namespace, name)]
            pod["status"]["phase"] = phase
            self._bump(pod)

    def delete_pod(self, name: str, namespace: str = "lease") -> None:
        with self.lock:
            self.pods.pop((namespace, name), None)

    def mark_terminating(self, name: str, namespace: str) -> None:
        with self.lock:
            pod = self.pods[(namespace, name)]
            pod["metadata"]["deletionTimestamp"] = _now()
            self._bump(pod)

    def akash_view(self, name: str) -> dict[str, Any]:
        """What Akash's inventory makes of the node (see the module's docstring for the source):
        ``excluded`` (why it is not offered at all, or None) and its GPUs allocatable,
        allocated and available."""
        with self.lock:
            node = self.nodes[name]
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in node["status"].get("conditions", []))
            excluded = ("unschedulable" if node["spec"].get("unschedulable")
                        else None if ready else "not ready")
            allocatable = int(node["status"].get("allocatable", {}).get(GPU, 0))
            allocated = sum(_requests(p) for p in self.pods.values()
                            if p["spec"].get("nodeName") == name and _allocated(p))
        return {"excluded": excluded, "gpus_allocatable": allocatable, "gpus_allocated": allocated,
                "gpus_available": 0 if excluded else max(allocatable - allocated, 0)}

    # -- HTTP ----------------------------------------------------------------------------
    def _serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(handler.path)
        self.requests.append((method, url.path))
        # HTTP/1.1 keeps the connection for the next request, as kube-apiserver does: the body is read whole
        # first, so an answer given without reading it (a refusal) leaves no bytes behind on the connection.
        length = int(handler.headers.get("Content-Length") or 0)
        stream = handler.rfile
        handler.rfile = io.BytesIO(stream.read(length) if length > 0 else b"")
        try:
            answer = self._answer(handler, method, url)
        finally:
            handler.rfile = stream
        reply_json(handler, *answer)

    def _answer(self, handler: BaseHTTPRequestHandler, method: str, url: urllib.parse.SplitResult) -> tuple[int, Any]:
        if self.down:
            return 503, _status(503, "ServiceUnavailable", "the stand-in API is down (test)")
        auth = handler.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else ""
        kubelet = _kubelet_of(handler)
        if kubelet is not None:
            with self.lock:
                return self._as_node(kubelet, handler, method, url)
        if token in self.reclaimers:
            with self.lock:
                bound = self.token_secrets.get(token)
                secret = self.objects.get(("Secret", *bound)) if bound is not None else None
                if bound is not None and (secret is None or (secret.get("data") or {}).get("token")
                                          != base64.b64encode(token.encode()).decode()):
                    return 401, _status(401, "Unauthorized", "Unauthorized")  # its Secret is gone: so is the token
            return self._as_reclaimer(self.reclaimers[token], handler, method, url)
        with self.lock:
            if token in self.admin_tokens:
                admin = self._admin(method, url.path, handler)
                if admin is not None:
                    return admin
            allowed = "*" if token in self.admin_tokens else self.tokens.get(token)
            bound = self.token_secrets.get(token)
            if bound is not None and ("Secret", *bound) not in self.objects:
                allowed = None  # its Secret is gone: so is the token
            if allowed is None:
                return 401, _status(401, "Unauthorized", "Unauthorized")
            if method == "DELETE":
                return 403, _status(403, "Forbidden", "the agent's identity may not delete")
            if method == "GET" and url.path == "/api/v1/pods":
                selector = urllib.parse.parse_qs(url.query).get("fieldSelector", [""])[0]
                field, _, value = selector.partition("=")
                if field != "spec.nodeName":
                    return 400, _status(400, "BadRequest",
                                        "the stand-in serves only fieldSelector=spec.nodeName=<node>")
                return 200, self._pod_list(value)
            if method == "GET" and url.path == "/api/v1/nodes":
                return self._labelled(list(self.nodes.values()), url, "NodeList")
            prefix = "/api/v1/nodes/"
            if url.path.startswith(prefix):
                name = urllib.parse.unquote(url.path[len(prefix):])
                node = self.nodes.get(name)
                if node is None:
                    return 404, _status(404, "NotFound", f'nodes "{name}" not found')
                if allowed not in (name, "*"):  # the agent's RBAC: get and patch on its own node only
                    verb = "get" if method == "GET" else "patch"
                    return 403, _status(403, "Forbidden", f'cannot {verb} resource "nodes" "{name}"')
                if method == "GET":
                    return 200, copy.deepcopy(node)
                if handler.headers.get("Content-Type") != "application/merge-patch+json":
                    return 415, _status(415, "UnsupportedMediaType", "the stand-in takes merge patches only")
                patch = json.loads(handler.rfile.read(int(handler.headers.get("Content-Length", 0))))
                wanted = (patch.get("metadata") or {}).get("resourceVersion")
                if wanted is not None and wanted != node["metadata"]["resourceVersion"]:
                    return 409, _status(409, "Conflict", "the object has been modified; please apply your "
                                        "changes to the latest version and try again")
                return self._patched(name, merge_patch(node, patch))
        return 404, _status(404, "NotFound", "the stand-in serves only pods on a node and nodes")

    def _as_reclaimer(self, pod: tuple[str, str], handler: BaseHTTPRequestHandler, method: str,
                      url: urllib.parse.SplitResult) -> tuple[int, Any]:
        """The reclaimer's RBAC (roles/market_provider): a ClusterRole to get and list nodes, namespaces and pods,
        and a Role in the provider's namespace to create ``pods/exec`` on its one pod (resourceNames)."""
        user = 'User "system:serviceaccount:m2p-system:m2p-reclaimer"'
        query = urllib.parse.parse_qs(url.query)
        lists = {"/api/v1/nodes": "nodes", "/api/v1/namespaces": "namespaces", "/api/v1/pods": "pods"}
        if method == "GET" and url.path in lists:
            with self.lock:
                pool = {"nodes": list(self.nodes.values()), "pods": list(self.pods.values()),
                        "namespaces": [o for k, o in self.objects.items() if k[0] == "Namespace"]}[lists[url.path]]
                return self._labelled(pool, url, "List")
        parts = url.path.strip("/").split("/")
        if method == "POST" and len(parts) == 7 and parts[:3] == ["api", "v1", "namespaces"] \
                and parts[4] == "pods" and parts[6] == "exec":
            namespace, name = parts[3], parts[5]
            if (namespace, name) != pod:
                return 403, _status(403, "Forbidden", f'pods "{name}" is forbidden: {user} cannot create resource '
                                    f'"pods/exec" in API group "" in the namespace "{namespace}"')
            run = self.exec_in.get((namespace, name, query.get("container", [""])[0]))
            if run is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found (or no such container)')
            code, out, err = run(query.get("command", []))
            return 200, {"exitCode": code, "stdout": out, "stderr": err}
        return 403, _status(403, "Forbidden", f"{user} cannot {method.lower()} {url.path}")

    def _labelled(self, pool: list[dict[str, Any]], url: urllib.parse.SplitResult, kind: str) -> tuple[int, Any]:
        """The objects of ``pool`` that carry the label ``labelSelector`` names (a key only: the stand-in's one
        selector form)."""
        selector = urllib.parse.parse_qs(url.query).get("labelSelector", [""])[0]
        if not selector or any(ch in selector for ch in "=!,() "):
            return 400, _status(400, "BadRequest", "the stand-in serves only labelSelector=<label key>")
        items = [copy.deepcopy(o) for o in pool if selector in (o["metadata"].get("labels") or {})]
        return 200, {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(self.version)},
                     "items": items}

    def _as_node(self, node: str, handler: BaseHTTPRequestHandler, method: str,
                 url: urllib.parse.SplitResult) -> tuple[int, Any]:
        """A kubelet's request, as Kubernetes judges one (``system:node:<node>``).  The Node authorizer
        (with AuthorizeNodeWithSelectors, on by default since 1.32): pods listed only with the field
        selector of its own node, only its own Node read.  NodeRestriction admission (kubernetes
        plugin/pkg/admission/noderestriction, the Update branch): its own Node only; never its taints;
        labels under kubernetes.io / k8s.io only from the kubelet's own set, none under
        node-restriction.kubernetes.io (kubelet_may_not_set).  A pod created only as NodeRestriction's Create
        branch admits one: a mirror pod bound to itself (``_mirror_pod``).  Nothing deleted."""
        user = f'User "system:node:{node}"'
        if method == "GET" and url.path == "/api/v1/pods":
            selector = urllib.parse.parse_qs(url.query).get("fieldSelector", [""])[0]
            if selector != f"spec.nodeName={node}":
                return 403, _status(403, "Forbidden", f'pods is forbidden: {user} cannot list resource "pods": '
                                    "can only list/watch pods with spec.nodeName field selector")
            return 200, self._pod_list(node)
        parts = url.path.strip("/").split("/")
        if method == "POST" and len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            return self._mirror_pod(node, urllib.parse.unquote(parts[3]), handler)
        prefix = "/api/v1/nodes/"
        name = urllib.parse.unquote(url.path[len(prefix):]) if url.path.startswith(prefix) else ""
        if method not in ("GET", "PATCH") or name != node:
            return 403, _status(403, "Forbidden", f"{user} cannot {method.lower()} {url.path}: "
                                "a node may read and patch only its own Node")
        current = self.nodes.get(node)
        if current is None:
            return 404, _status(404, "NotFound", f'nodes "{node}" not found')
        if method == "GET":
            return 200, copy.deepcopy(current)
        patch = json.loads(handler.rfile.read(int(handler.headers.get("Content-Length", 0))))
        patched = merge_patch(current, patch)
        if patched["spec"].get("taints") != current["spec"].get("taints"):
            return 403, _status(403, "Forbidden", f'node "{node}" is not allowed to modify taints')
        old, new = current["metadata"].get("labels") or {}, patched["metadata"].get("labels") or {}
        changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
        forbidden = sorted(k for k in changed if kubelet_may_not_set(k))
        if forbidden:
            return 403, _status(403, "Forbidden", f"is not allowed to modify labels: {', '.join(forbidden)}")
        return self._patched(node, patched)

    def _mirror_pod(self, node: str, namespace: str, handler: BaseHTTPRequestHandler) -> tuple[int, Any]:
        """A kubelet creating a pod: in a namespace that exists (NamespaceLifecycle, which runs first), admitted only
        as NodeRestriction admits a mirror pod (kube_api_mirror), then kept as the API keeps a new pod: its status
        reset to Pending (the pod strategy's PrepareForCreate), for the kubelet to report."""
        try:
            pod = json.loads(handler.rfile.read(int(handler.headers.get("Content-Length") or 0)) or b"{}")
        except ValueError:
            return 400, _status(400, "BadRequest", "the body is not JSON")
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        if not isinstance(meta, dict) or not isinstance(pod.get("spec"), dict):
            return 400, _status(400, "BadRequest", "the body is not a Pod")
        if meta.get("namespace", namespace) != namespace:
            return 400, _status(400, "BadRequest", "the namespace of the provided object does not match the "
                                "namespace sent on the request")
        if ("Namespace", "", namespace) not in self.objects and namespace not in BUILT_IN_NAMESPACES:
            return 404, _status(404, "NotFound", f'namespaces "{namespace}" not found')
        name = str(meta.get("name") or "")
        current = self.nodes.get(node)
        refusal = mirror_pod_refusal(node, None if current is None else current["metadata"]["uid"], pod)
        if refusal:
            return 403, _status(403, "Forbidden", f'pods "{name}" is forbidden: {refusal}' if name
                                else f"pods is forbidden: {refusal}")
        invalid = [k for k, v in (meta.get("labels") or {}).items() if not _legal_label(k, v)]
        if not _DNS_SUBDOMAIN.match(name) or invalid:
            return 422, _status(422, "Invalid", f'Pod "{name}" is invalid: ' + (
                f"metadata.labels: Invalid value: {invalid[0]!r}" if invalid else "metadata.name: Invalid value"))
        if (namespace, name) in self.pods:
            return 409, _status(409, "AlreadyExists", f'pods "{name}" already exists')
        pod = copy.deepcopy(pod)
        pod["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now())
        pod["status"] = {"phase": "Pending"}
        self._bump(pod)
        self.pods[(namespace, name)] = pod
        return 201, copy.deepcopy(pod)

    def _pod_list(self, node: str) -> dict[str, Any]:
        items = [p for p in self.pods.values() if p["spec"].get("nodeName") == node]
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.version)},
                "items": copy.deepcopy(items)}

    def _patched(self, name: str, patched: dict[str, Any]) -> tuple[int, Any]:
        invalid = [k for k, v in (patched["metadata"].get("labels") or {}).items() if not _legal_label(k, v)]
        if invalid:  # the API validates the whole object: one bad label refuses the patch
            return 422, _status(422, "Invalid", f'Node "{name}" is invalid: metadata.labels: '
                                f"Invalid value: {invalid[0]!r}")
        self._bump(patched)
        self.nodes[name] = patched
        return 200, copy.deepcopy(patched)

    def _admin(self, method: str, path: str, handler: BaseHTTPRequestHandler) -> tuple[int, Any] | None:
        """The admin's GET and PUT of a Secret (PUT: a Deployment's or StatefulSet's patch too), GET of a Namespace,
        and its deletes; None: served like any other caller."""
        parts = path.strip("/").split("/")
        if method == "GET" and len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "secrets":
            return self._secrets_selected(parts[3], urllib.parse.urlsplit(handler.path).query)
        kind, namespace, name = _object_path(parts)
        if kind is None or method not in {"GET", "DELETE", "PUT"} or (
                method in {"GET", "PUT"} and kind not in {"Secret", "Deployment", "StatefulSet"}
                and not (method == "GET" and kind == "Namespace")):
            return None
        if method == "PUT" and kind in {"Deployment", "StatefulSet"}:
            return self._apply_to_deployment(namespace, name, handler, kind)
        if method == "PUT":
            return self._put_secret(namespace, name, handler)
        if kind == "Node":
            if method == "GET":
                return None
            if self.nodes.pop(name, None) is None:
                return 404, _status(404, "NotFound", f'nodes "{name}" not found')
            return 200, _status(200, "Success", "deleted") | {"status": "Success"}
        key = (kind, namespace, name)
        if key not in self.objects:
            return 404, _status(404, "NotFound", f'{kind.lower()}s "{name}" not found')
        if method == "GET":
            return 200, copy.deepcopy(self.objects[key])
        del self.objects[key]
        if kind == "Namespace":  # everything in it goes too
            for other in [k for k in self.objects if k[1] == name]:
                del self.objects[other]
        return 200, _status(200, "Success", "deleted") | {"status": "Success"}


    def _secrets_selected(self, namespace: str, query: str) -> tuple[int, Any]:
        """The Secrets of ``namespace`` whose labels match every ``key=value`` of labelSelector (the equality form
        kubectl's --selector sends)."""
        selector = urllib.parse.parse_qs(query).get("labelSelector", [""])[0]
        wanted = dict(term.split("=", 1) for term in selector.split(",") if "=" in term)
        if not wanted or any("=" not in term or "!" in term for term in selector.split(",")):
            return 400, _status(400, "BadRequest", "the stand-in serves only labelSelector=k=v[,k=v...] for Secrets")
        items = [copy.deepcopy(o) for (kind, ns, _), o in self.objects.items() if kind == "Secret" and ns == namespace
                 and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]
        return 200, {"kind": "SecretList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.version)},
                     "items": items}

    def _apply_to_deployment(self, namespace: str, name: str, handler: BaseHTTPRequestHandler,
                             kind: str = "Deployment") -> tuple[int, Any]:
        """A server-side apply patch to a Deployment (or StatefulSet) that exists: its containers' env entries
        merged in by name (the API's merge keys: containers by name, env by name); 404 when it does not exist (the
        real API would try to create one from the patch and refuse it as invalid)."""
        key = (kind, namespace, name)
        if key not in self.objects:
            return 404, _status(404, "NotFound", f'{kind.lower()}s.apps "{name}" not found')
        length = int(handler.headers.get("Content-Length") or 0)
        try:
            patch = json.loads(handler.rfile.read(length) or b"{}")
            wanted = patch["spec"]["template"]["spec"]["containers"]
        except (ValueError, KeyError, TypeError):
            return 400, _status(400, "BadRequest", "not a Deployment patch")
        obj = self.objects[key]
        containers = {c["name"]: c for c in obj["spec"]["template"]["spec"]["containers"]}
        for given in wanted:
            live = containers.get(given.get("name"))
            if live is None:
                return 422, _status(422, "Invalid", f'no container "{given.get("name")}" to patch (the stand-in '
                                                    "does not add containers)")
            env = {e["name"]: e for e in live.get("env", [])}
            env.update({e["name"]: e for e in given.get("env", [])})
            live["env"] = list(env.values())
        self._bump(obj)
        return 200, copy.deepcopy(obj)

    def _put_secret(self, namespace: str, name: str, handler: BaseHTTPRequestHandler) -> tuple[int, Any]:
        """Create or replace a Secret; 200 with ``"unchanged"`` in the status when its data is the same."""
        length = int(handler.headers.get("Content-Length") or 0)
        try:
            doc = json.loads(handler.rfile.read(length) or b"{}")
        except ValueError:
            return 400, _status(400, "BadRequest", "the body is not JSON")
        meta = doc.get("metadata", {}) if isinstance(doc, dict) else {}
        if doc.get("kind") != "Secret" or meta.get("name") != name or meta.get("namespace", namespace) != namespace:
            return 400, _status(400, "BadRequest", "the body is not this Secret")
        key = ("Secret", namespace, name)
        old = self.objects.get(key)
        # Server-side apply leaves the fields it is not given to their owners (the token controller's token).
        kept = (old or {}).get("data") if "data" not in doc and "stringData" not in doc else None
        data = dict(doc.get("data") or kept or {})
        for field, value in (doc.pop("stringData", None) or {}).items():  # the API keeps only base64 data
            data[field] = base64.b64encode(str(value).encode()).decode()
        doc["data"] = data
        if old is not None and old.get("data") == data and old.get("metadata", {}).get("labels") == meta.get("labels"):
            return 200, copy.deepcopy(old) | {"m2pStandin": "unchanged"}
        doc["metadata"] = {**meta, "namespace": namespace}
        self._bump(doc)
        self.objects[key] = doc
        self._fill_token(doc)
        return (201 if old is None else 200), copy.deepcopy(doc)


def _allocated(pod: dict[str, Any]) -> bool:
    """isPodAllocated: scheduled, and Pending or Running."""
    scheduled = any(c.get("type") == "PodScheduled" and c.get("status") == "True"
                    for c in pod.get("status", {}).get("conditions", []))
    return scheduled and pod.get("status", {}).get("phase") in {"Pending", "Running"}


def _requests(pod: dict[str, Any]) -> int:
    return sum(int(c.get("resources", {}).get("requests", {}).get(GPU, 0))
               for c in pod["spec"].get("containers", []))


_KINDS = {"nodes": "Node", "namespaces": "Namespace", "secrets": "Secret", "serviceaccounts": "ServiceAccount",
          "deployments": "Deployment", "statefulsets": "StatefulSet",
          "clusterroles": "ClusterRole", "clusterrolebindings": "ClusterRoleBinding",
          "priorityclasses": "PriorityClass", "helmcharts": "HelmChart"}


def _object_path(parts: list[str]) -> tuple[str | None, str, str]:
    """(kind, namespace, name) of an object's URL path, as the API lays them out."""
    if parts[:2] == ["api", "v1"] and len(parts) == 4:
        return _KINDS.get(parts[2]), "", parts[3]
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6:
        return _KINDS.get(parts[4]), parts[3], parts[5]
    if parts[:2] in (["apis", "rbac.authorization.k8s.io"], ["apis", "scheduling.k8s.io"]) \
            and parts[2] == "v1" and len(parts) == 5:
        return _KINDS.get(parts[3]), "", parts[4]
    if parts[:3] in (["apis", "helm.cattle.io", "v1"], ["apis", "apps", "v1"]) and len(parts) == 7 \
            and parts[3] == "namespaces":
        return _KINDS.get(parts[5]), parts[4], parts[6]
    return None, "", ""
