"""The agent's Kubernetes client: plain HTTPS to the API server, only the calls the agent needs.

- ``pods_on_node``: ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>`` (a PodList).
- ``node`` / ``patch_node``: ``GET`` and ``PATCH`` (``application/merge-patch+json``) of its
  own Node: labels, the status annotation, ``spec.unschedulable`` (cordon).  A patch that
  changes the taints carries the ``resourceVersion`` it was computed from, so a concurrent
  writer (kubelet, an operator) makes it fail with 409 instead of being overwritten; the
  next tick reads again.

Its identity, where m2p built the cluster: the rig's own kubelet credential (``from_kubeconfig``: k3s's
``agent/kubelet.kubeconfig``, user ``system:node:<rig>``), which root on the rig holds anyway, so m2p
places no credential of its own.  The API's Node authorizer lets it list only the pods bound to its
node and read only its own Node; NodeRestriction lets it patch its own Node's labels (outside
``kubernetes.io``/``k8s.io``), annotations and ``spec.unschedulable``, never its taints.  For a cluster
outside the inventory, a bearer token the owner made (re-read on every call, so a rotated token is
picked up).  No client library: http.client (urllib.request would add 2 MB to the agent's resident memory
and follow redirects), the cluster's CA, a client certificate or the token.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
M2P_NAMESPACE = "m2p-system"
OLD_MINING_TAINT_KEY = "m2p.io/mining"
FINISHED = {"Succeeded", "Failed"}


class ApiError(Exception):
    """The API could not be read or written (unreachable, refused, conflict)."""


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom: the API server, and a bearer token file or a client certificate and key."""

    server: str
    token_file: str | None = None
    ca_file: str | None = None  # None: the system's CAs
    cert_file: str | None = None
    key_file: str | None = None


@dataclass(frozen=True)
class KubeClient:
    server: str  # https://HOST:6443
    token_file: str | None  # a bearer token file
    ca_file: str | None = None  # None: the system's CAs
    timeout_s: float = 5.0
    kubeconfig: str = ""  # instead of the three above: the kubeconfig k3s writes for the node's kubelet

    def endpoint(self) -> Endpoint:
        """Read on every call (cheap: a small file, cached by its mtime): k3s writes the kubelet's kubeconfig
        when it starts and renews its certificate, and a token may be rotated."""
        if not self.kubeconfig:
            return Endpoint(self.server, self.token_file, self.ca_file)
        return _kubeconfig_endpoint(self.kubeconfig)

    def _request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            # In the try: a kubeconfig, token, CA or certificate not there yet (k3s writes them when it first
            # starts) is an API error like any other, reported in the status; the agent keeps its mode.
            end = self.endpoint()
            if end.token_file:
                headers["Authorization"] = "Bearer " + Path(end.token_file).read_text().strip()
            status, payload = _exchange(end, method, path, data, headers, self.timeout_s)
        except (OSError, ValueError, KubeconfigError, http.client.HTTPException) as exc:
            # refused, timed out, TLS, no CA file, a broken answer
            raise ApiError(f"{method} {path}: {exc}") from None
        if not 200 <= status < 300:  # a redirect too: never followed (the token would go wherever it points)
            try:
                reason = str(json.loads(payload).get("message", ""))
            except (ValueError, AttributeError):
                reason = ""
            raise ApiError(f"{method} {path}: HTTP {status} {reason}".strip())
        try:
            return json.loads(payload or b"{}")
        except ValueError as exc:
            raise ApiError(f"{method} {path}: {exc}") from None

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node}"})
        return list(self._request("GET", f"/api/v1/pods?{query}").get("items", []))

    def node(self, name: str) -> dict[str, Any]:
        return dict(self._request("GET", f"/api/v1/nodes/{urllib.parse.quote(name)}"))

    def nodes(self, label_selector: str) -> list[dict[str, Any]]:
        """Every node with the label (the dashboard's one call for a pooled farm)."""
        query = urllib.parse.urlencode({"labelSelector": label_selector})
        return list(self._request("GET", f"/api/v1/nodes?{query}").get("items", []))

    def namespaces(self, label_selector: str) -> list[dict[str, Any]]:
        """Namespaces with the label (the farm's reclaimer: the marketplace's lease namespaces)."""
        query = urllib.parse.urlencode({"labelSelector": label_selector})
        return list(self._request("GET", f"/api/v1/namespaces?{query}").get("items", []))

    def pods(self, label_selector: str) -> list[dict[str, Any]]:
        """Pods with the label in every namespace (the farm's reclaimer: where each lease runs)."""
        query = urllib.parse.urlencode({"labelSelector": label_selector})
        return list(self._request("GET", f"/api/v1/pods?{query}").get("items", []))

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return dict(self._request("PATCH", f"/api/v1/nodes/{urllib.parse.quote(name)}", patch,
                                  "application/merge-patch+json"))


def gpu_limit(pod: dict[str, Any]) -> int:
    containers = pod.get("spec", {}).get("containers", []) + pod.get("spec", {}).get("initContainers", [])
    total = 0
    for c in containers:
        resources = c.get("resources", {})
        value = resources.get("limits", {}).get(GPU_RESOURCE) or resources.get("requests", {}).get(GPU_RESOURCE)
        total += int(value or 0)
    return total


# Namespaces of the cluster's own workloads (k3s, m2p): not leases.  The marketplace's own services'
# namespaces come in the agent's configuration (system_namespaces, from market/: the agent knows no
# marketplace by name).
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease", M2P_NAMESPACE})


@dataclass(frozen=True)
class LeaseRule:
    """Which pods are leases.  With the marketplace's ``label`` (a key only its lease pods carry, from
    market/), exactly the pods carrying it outside the system namespaces; without one (no marketplace),
    every pod outside them that no DaemonSet runs.  A monitoring DaemonSet given
    GPUs in ``kube-system`` is never a lease: it neither stops the miner for good nor blocks a convert."""

    label: str = ""
    marketplace_namespaces: tuple[str, ...] = ()

    def is_lease(self, pod: dict[str, Any]) -> bool:
        meta = pod.get("metadata", {})
        if meta.get("namespace") in SYSTEM_NAMESPACES | set(self.marketplace_namespaces):
            return False
        if self.label:
            return self.label in (meta.get("labels") or {})
        return not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])

    def leases(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Pods on this node that restarting k3s would kill under a tenant (GPUs or not: a CPU-only
        lease is a lease too), unfinished."""
        return [p for p in pods if self.is_lease(p) and p.get("status", {}).get("phase") not in FINISHED]

    def gpu_leases(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Leases that hold (or will hold) GPUs on this node.  A terminating lease still counts: its
        containers hold the GPUs until they are gone."""
        return [p for p in self.leases(pods) if gpu_limit(p) > 0]


def pod_name(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def lease_summary(pod: dict[str, Any]) -> dict[str, Any]:
    """What the agent reports of a lease: its identity, start and GPUs, no tenant data."""
    meta = pod.get("metadata", {})
    since = pod.get("status", {}).get("startTime") or meta.get("creationTimestamp") or ""
    return {"pod": pod_name(pod), "since": str(since), "gpus": gpu_limit(pod)}


def has_old_taint(node: dict[str, Any]) -> bool:
    return any(t.get("key") == OLD_MINING_TAINT_KEY for t in node.get("spec", {}).get("taints") or [])


def without_old_taint(node: dict[str, Any]) -> dict[str, Any]:
    """A merge patch that removes the mining taint of m2p's first time-share (the marketplace's inventory
    ignores taints, so it never took a rig off the market) and keeps every other taint; it carries the
    ``resourceVersion`` it was computed from, so a concurrent writer wins and the agent re-reads."""
    others = [t for t in node.get("spec", {}).get("taints") or [] if t.get("key") != OLD_MINING_TAINT_KEY]
    return {"metadata": {"resourceVersion": node.get("metadata", {}).get("resourceVersion")},
            "spec": {"taints": others}}


_shared = threading.local()  # .connections: {(scheme, host, port, TLS context): connection} inside one_connection()


@contextlib.contextmanager
def one_connection(kept: dict[Any, http.client.HTTPConnection] | None = None) -> Iterator[None]:
    """The requests inside share one connection per API server (HTTP/1.1 keep-alive): an agent's tick makes
    two or three calls, and each new TLS connection costs a handshake's CPU (about 2 ms here, every tick of
    every idle rig).  ``kept``: the caller's own pool, left open at the end for its next block (the agent's
    ticks, every 2 s: one handshake while the server keeps the connection, not one a tick); without it the
    connections close at the end.  Outside it, every request has a connection of its own."""
    _shared.connections = {} if kept is None else kept
    try:
        yield
    finally:
        if kept is None:
            for conn in _shared.connections.values():
                conn.close()
        _shared.connections = None


def _exchange(end: Endpoint, method: str, path: str, data: bytes | None, headers: dict[str, str],
              timeout_s: float) -> tuple[int, bytes]:
    """One request: (status, body).  A kept connection the server has closed meanwhile (an idle timeout) is
    opened again once; a kube-apiserver patch is the same whichever connection carries it."""
    url = urllib.parse.urlsplit(end.server.rstrip("/"))
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"not an API server URL: {end.server[:100]}")
    context = _tls(end) if url.scheme == "https" else None
    kept: dict[Any, http.client.HTTPConnection] | None = getattr(_shared, "connections", None)
    key = (url.scheme, url.hostname, url.port, id(context))
    target = url.path + path
    conn = kept.get(key) if kept is not None else None
    if conn is not None:
        try:
            return _send(conn, method, target, data, headers, kept, key)
        except TimeoutError:
            raise  # the server does not answer: a new connection would wait as long again
        except (OSError, http.client.HTTPException):
            pass  # closed by the server while kept (a reset, a TLS close, no status line): once more, anew
    if kept is not None:  # a kept connection of a context no longer current (k3s renewed its certificate): closed
        for other in [k for k in kept if k[:3] == key[:3] and k != key]:
            kept.pop(other).close()
    conn = (http.client.HTTPSConnection(url.hostname, url.port or 443, timeout=timeout_s, context=context)
            if context is not None else http.client.HTTPConnection(url.hostname, url.port or 80, timeout=timeout_s))
    return _send(conn, method, target, data, headers, kept, key)


def _send(conn: http.client.HTTPConnection, method: str, target: str, data: bytes | None, headers: dict[str, str],
          kept: dict[Any, http.client.HTTPConnection] | None, key: Any) -> tuple[int, bytes]:
    """The request on ``conn``; the connection kept (in ``kept``) when the server keeps it open, else closed."""
    keep = False
    try:
        conn.request(method, target, body=data, headers=headers)
        response = conn.getresponse()
        answer = response.status, response.read()
        keep = kept is not None and not response.will_close
        return answer
    finally:
        if kept is not None:
            if keep:
                kept[key] = conn
            else:
                kept.pop(key, None)
        if not keep:
            conn.close()


_contexts: dict[tuple[Any, ...], ssl.SSLContext] = {}  # one TLS context per CA and certificate, as the files are now


def _tls(end: Endpoint) -> ssl.SSLContext:
    """The CA and the client certificate, loaded once (each load parses the files: CPU on every call of every
    tick) and again when k3s renews a file (its mtime and size change)."""
    files = (end.ca_file, end.cert_file, end.key_file)
    key = tuple((f, *_stamp(f)) for f in files)
    context = _contexts.get(key)
    if context is None:
        context = ssl.create_default_context(cafile=end.ca_file)
        if end.cert_file:
            context.load_cert_chain(end.cert_file, end.key_file)
        _contexts.clear()  # only the current files' context is kept
        _contexts[key] = context
    return context


def _stamp(path: str | None) -> tuple[float, int]:
    """A file as it is now (mtime, size): k3s rewrites its kubeconfig and certificates when it renews them."""
    if not path:
        return (0.0, 0)
    info = os.stat(path)
    return (info.st_mtime, info.st_size)


class KubeconfigError(Exception):
    """A kubeconfig the agent cannot use (unreadable, or not the shape k3s writes)."""


_read: dict[str, tuple[tuple[float, int], Endpoint]] = {}  # path -> ((mtime, size), what it said)


def _kubeconfig_endpoint(path: str) -> Endpoint:
    """What a kubeconfig says, as k3s writes ``agent/kubelet.kubeconfig``: its current context's server,
    CA file and client certificate and key files (relative paths from the kubeconfig's folder, as kubectl
    reads them), or a ``tokenFile``.  Inline ``-data`` fields are not read: k3s does not write them."""
    import yaml  # in the zipapp; imported here so that the gate, which needs no API, starts faster

    try:
        stamp = _stamp(path)
        cached = _read.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        doc = yaml.safe_load(Path(path).read_text())
        contexts = {c["name"]: c["context"] for c in doc.get("contexts") or []}
        current = contexts.get(doc.get("current-context")) or next(iter(contexts.values()))
        cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == current["cluster"])
        user = next(u["user"] for u in doc["users"] if u["name"] == current["user"])
    except (OSError, ValueError, yaml.YAMLError, KeyError, TypeError, StopIteration, AttributeError) as exc:
        raise KubeconfigError(f"{path}: not a kubeconfig the agent can use ({type(exc).__name__}: {exc})") from None
    base = Path(path).parent

    def file(value: Any) -> str | None:
        return str(base / value) if isinstance(value, str) and value else None

    found = Endpoint(str(cluster.get("server", "")), file(user.get("tokenFile")),
                     file(cluster.get("certificate-authority")), file(user.get("client-certificate")),
                     file(user.get("client-key")))
    _read[path] = (stamp, found)
    return found
