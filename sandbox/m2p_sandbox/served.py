"""What every stand-in served over HTTP on loopback shares: its server thread, address and end."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Served:
    server: ThreadingHTTPServer

    def _serve_on(self, host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer((host, port), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def reply_json(handler: BaseHTTPRequestHandler, code: int, body: Any) -> None:
    """Answer ``handler``'s request with ``body`` as JSON, its length said."""
    data = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
