"""STAND-IN Kubernetes API server for the agent's tests (no kube-apiserver can run here).

It serves only what m2p's agent calls, with objects shaped as the Kubernetes API documents
them (v1 Pod, PodList, Node, Status):
- ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``
- ``GET /api/v1/nodes/<name>``, ``PATCH /api/v1/nodes/<name>`` (``application/merge-patch+json``,
  RFC 7386; a ``metadata.resourceVersion`` in the patch must match, else 409 Conflict)
- bearer tokens, each allowed to patch one node (the agent's RBAC), else 401 / 403.
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

import copy
import json
import threading
import urllib.parse
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GPU = "nvidia.com/gpu"


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


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class KubeApiStandin:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.lock = threading.Lock()
        self.version = 1
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.tokens: dict[str, str] = {}  # token -> the node it may patch
        self.requests: list[tuple[str, str]] = []  # (method, path) served, for tests
        self.down = False  # answer nothing useful (503), as an unreachable API would fail
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                standin._serve(self, "GET")

            def do_PATCH(self) -> None:
                standin._serve(self, "PATCH")

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

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

    def add_pod(self, name: str, node: str, gpus: int, namespace: str = "lease", phase: str = "Running",
                labels: dict[str, str] | None = None) -> None:
        with self.lock:
            self._add_pod(name, node, gpus, namespace, phase, labels or {})

    def _add_pod(self, name: str, node: str, gpus: int, namespace: str, phase: str, labels: dict[str, str]) -> None:
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                            "labels": labels, "creationTimestamp": _now()},
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
        code, body = self._answer(handler, method, url)
        data = json.dumps(body).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _answer(self, handler: BaseHTTPRequestHandler, method: str, url: urllib.parse.SplitResult) -> tuple[int, Any]:
        if self.down:
            return 503, _status(503, "ServiceUnavailable", "the stand-in API is down (test)")
        auth = handler.headers.get("Authorization", "")
        allowed = self.tokens.get(auth.removeprefix("Bearer ")) if auth.startswith("Bearer ") else None
        if allowed is None:
            return 401, _status(401, "Unauthorized", "Unauthorized")
        with self.lock:
            if method == "GET" and url.path == "/api/v1/pods":
                selector = urllib.parse.parse_qs(url.query).get("fieldSelector", [""])[0]
                field, _, value = selector.partition("=")
                if field != "spec.nodeName":
                    return 400, _status(400, "BadRequest",
                                        "the stand-in serves only fieldSelector=spec.nodeName=<node>")
                items = [p for p in self.pods.values() if p["spec"].get("nodeName") == value]
                return 200, {"kind": "PodList", "apiVersion": "v1",
                             "metadata": {"resourceVersion": str(self.version)}, "items": copy.deepcopy(items)}
            prefix = "/api/v1/nodes/"
            if url.path.startswith(prefix):
                name = urllib.parse.unquote(url.path[len(prefix):])
                node = self.nodes.get(name)
                if node is None:
                    return 404, _status(404, "NotFound", f'nodes "{name}" not found')
                if method == "GET":
                    return 200, copy.deepcopy(node)
                if allowed != name:
                    return 403, _status(403, "Forbidden", f'cannot patch resource "nodes" "{name}"')
                if handler.headers.get("Content-Type") != "application/merge-patch+json":
                    return 415, _status(415, "UnsupportedMediaType", "the stand-in takes merge patches only")
                patch = json.loads(handler.rfile.read(int(handler.headers.get("Content-Length", 0))))
                wanted = (patch.get("metadata") or {}).get("resourceVersion")
                if wanted is not None and wanted != node["metadata"]["resourceVersion"]:
                    return 409, _status(409, "Conflict", "the object has been modified; please apply your "
                                        "changes to the latest version and try again")
                patched = merge_patch(node, patch)
                self._bump(patched)
                self.nodes[name] = patched
                return 200, copy.deepcopy(patched)
        return 404, _status(404, "NotFound", "the stand-in serves only pods on a node and nodes")


def _allocated(pod: dict[str, Any]) -> bool:
    """isPodAllocated: scheduled, and Pending or Running."""
    scheduled = any(c.get("type") == "PodScheduled" and c.get("status") == "True"
                    for c in pod.get("status", {}).get("conditions", []))
    return scheduled and pod.get("status", {}).get("phase") in {"Pending", "Running"}


def _requests(pod: dict[str, Any]) -> int:
    return sum(int(c.get("resources", {}).get("requests", {}).get(GPU, 0))
               for c in pod["spec"].get("containers", []))
