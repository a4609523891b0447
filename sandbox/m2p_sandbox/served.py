"""What every stand-in served over HTTP on loopback shares: its server thread, address and end."""

from __future__ import annotations

import json
import socket
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    """Its open connections known, so that an end ends them too: a real server that goes away (kube-apiserver
    stopped, its machine gone) takes every connection with it, where ThreadingHTTPServer's close would leave
    each kept-alive connection's thread answering from the closed stand-in."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.open: set[socket.socket] = set()
        self.open_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Go's servers (kube-apiserver, Akash's provider and node) answer on TCP_NODELAY connections (Go's net sets
        # it on every TCP connection by default); http.server writes an answer's headers and body apart, and without
        # it the body waits for the client's delayed ACK: 40 ms an answer on a kept connection.
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.open_lock:
            self.open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.open_lock:
            self.open.discard(request)
        super().shutdown_request(request)

    def end_connections(self) -> None:
        with self.open_lock:
            ending, self.open = list(self.open), set()
        for conn in ending:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


# serve_forever looks for a shutdown every poll_interval (0.5 s by default): each stand-in's close waited that long,
# 65 s of a suite's unit tests.
SHUTDOWN_POLL_S = 0.05


def serve_in_background(server: socketserver.BaseServer) -> threading.Thread:
    """Run ``server``'s loop on a daemon thread that sees a ``shutdown()`` within SHUTDOWN_POLL_S."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True)
    thread.start()
    return thread


class Served:
    server: _Server

    def _serve_on(self, host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = _Server((host, port), handler)
        self.thread = serve_in_background(self.server)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.server.end_connections()


def reply_json(handler: BaseHTTPRequestHandler, code: int, body: Any) -> None:
    """Answer ``handler``'s request with ``body`` as JSON, its length said."""
    data = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
