"""STAND-IN container registry on loopback (no registry can be reached from CI).

It serves what ``miner2provider.fleet.bundle.images.pull`` asks of a real one, the way the OCI
distribution spec and Docker's token authentication spec lay it out: ``GET
/v2/<repository>/manifests/<tag or digest>`` (an image index with one linux/amd64 and one
linux/arm64 manifest), ``GET /v2/<repository>/blobs/<digest>``, and a 401 with a
``WWW-Authenticate: Bearer realm=...`` challenge until the client brings the anonymous token
from ``/token``.  Its images are tiny and made up: one layer holding a text file that says so.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import secrets
import tarfile
import urllib.parse
from http.server import BaseHTTPRequestHandler
from typing import Any

from m2p_sandbox.served import Served

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _layer(text: str) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = text.encode()
        info = tarfile.TarInfo("m2p-standin-image.txt")
        info.size, info.mtime = len(data), 0
        tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


class RegistryStandin(Served):
    def __init__(self, images: list[str], host: str = "127.0.0.1") -> None:
        """``images``: ``repository:tag`` names it serves."""
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], tuple[str, bytes]] = {}  # (repo, tag or digest) -> (type, body)
        self.token = secrets.token_urlsafe(16)
        self.pulls: list[str] = []  # paths served with the token, for tests
        for image in images:
            repository, _, tag = image.rpartition(":")
            self._add(repository, tag)
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                standin._serve(self)

        self._serve_on(host, 0, Handler)

    def _blob(self, data: bytes) -> dict[str, Any]:
        digest = _digest(data)
        self.blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    def _add(self, repository: str, tag: str) -> None:
        entries = []
        for arch in ("amd64", "arm64"):
            layer = self._blob(_layer(f"m2p STAND-IN image {repository}:{tag} ({arch}); not a real image\n"))
            config = self._blob(json.dumps({"architecture": arch, "os": "linux",
                                            "rootfs": {"type": "layers", "diff_ids": []}}).encode())
            manifest = json.dumps({
                "schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **layer}]}).encode()
            self.manifests[(repository, _digest(manifest))] = (OCI_MANIFEST, manifest)
            entries.append({"mediaType": OCI_MANIFEST, "digest": _digest(manifest), "size": len(manifest),
                            "platform": {"os": "linux", "architecture": arch}})
        index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode()
        self.manifests[(repository, tag)] = (OCI_INDEX, index)
        self.manifests[(repository, _digest(index))] = (OCI_INDEX, index)

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        url = urllib.parse.urlsplit(handler.path)
        if url.path == "/token":
            self._send(handler, 200, "application/json", json.dumps({"token": self.token}).encode())
            return
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            handler.send_response(401)
            handler.send_header("WWW-Authenticate", f'Bearer realm="{self.url}/token",service="m2p-standin"')
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        self.pulls.append(url.path)
        parts = url.path.removeprefix("/v2/").rsplit("/", 2)
        if len(parts) == 3 and parts[1] == "manifests" and (parts[0], parts[2]) in self.manifests:
            media_type, body = self.manifests[(parts[0], parts[2])]
            self._send(handler, 200, media_type, body)
        elif len(parts) == 3 and parts[1] == "blobs" and parts[2] in self.blobs:
            self._send(handler, 200, "application/octet-stream", self.blobs[parts[2]])
        else:
            self._send(handler, 404, "application/json", b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, code: int, media_type: str, body: bytes) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", media_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
