"""STAND-INS for what Akash runs outside m2p, served on loopback for `m2p provider check` and `status`
(no Akash chain or provider can run here).

- ``RpcStandin``: an Akash node's CometBFT RPC ``GET /status`` only, shaped as CometBFT documents it
  (``{"jsonrpc": "2.0", "id": -1, "result": {"node_info": {"network": ...}, "sync_info":
  {"latest_block_height": "<decimal string>", "catching_up": false, ...}}}``; heights are strings, as
  CometBFT encodes int64).  Anything else is 404, as the RPC answers an unknown route.
- ``ProviderStatusStandin``: the Akash provider's ``GET /status`` on its gateway port 8443 (provider
  gateway/rest router ``/status``: ``cluster.leases.active``, ``cluster.inventory``, ``bidengine.orders``,
  ``manifest.deployments``, ``cluster_public_hostname``, ``address``), over HTTPS with a self-signed
  certificate as the provider's own (the caller cannot verify it against a CA: Akash's provider certificates
  are on-chain, not from a CA).
"""

from __future__ import annotations

import ssl
import tempfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from m2p_sandbox import pki
from m2p_sandbox.served import Served, reply_json


def _handler(owner: Any) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            reply_json(self, *owner.answer(self.path))

    return Handler


class RpcStandin(Served):
    def __init__(self, network: str = "akashnet-2", height: int = 23_456_789, catching_up: bool = False,
                 host: str = "127.0.0.1") -> None:
        self.network, self.height, self.catching_up = network, height, catching_up
        self.paths: list[str] = []
        self._serve_on(host, 0, _handler(self))

    def answer(self, path: str) -> tuple[int, Any]:
        self.paths.append(path)
        if path.split("?")[0] != "/status":
            return 404, {"jsonrpc": "2.0", "id": -1, "error": {"code": -32601, "message": "Method not found"}}
        return 200, {"jsonrpc": "2.0", "id": -1, "result": {
            "node_info": {"network": self.network, "version": "0.38.17", "moniker": "m2p-standin"},
            "sync_info": {"latest_block_height": str(self.height), "catching_up": self.catching_up}}}


class ProviderStatusStandin(Served):
    def __init__(self, status: dict[str, Any], host: str = "127.0.0.1") -> None:
        self.status = status
        self._serve_on(host, 0, _handler(self))
        authority = pki.Authority()
        cert, key = authority.issue("akash-provider", address=host)
        folder = Path(tempfile.mkdtemp(prefix="m2p-provider-status-"))
        (folder / "cert.pem").write_bytes(cert)
        (folder / "key.pem").write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"https://{host!s}:{port}"

    def answer(self, path: str) -> tuple[int, Any]:
        if path.split("?")[0] != "/status":
            return 404, {"message": "not found"}
        return 200, self.status
