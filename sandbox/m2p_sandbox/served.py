"""What every stand-in served over HTTP on loopback shares: its server thread, address and end."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
