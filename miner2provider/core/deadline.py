"""A deadline for a whole exchange over one socket: a watchdog shuts the socket down when the time is up,
whatever the read or write is doing, so that a peer trickling a byte every half second cannot hold the caller
(a socket timeout counts from the last byte only).  Used by every outbound HTTP read or send that must not
stall the dashboard: the marketplace provider's status, the alert receivers."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading


class Watchdog:
    """Shuts the watched socket down ``seconds`` after it is entered: a blocked read then ends at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._timer.cancel()
        self.release()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if self.fired:
                raise TimeoutError("the deadline passed")
            self._sock = sock

    def release(self) -> None:
        with self._lock:
            self._sock = None

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            if self._sock is not None:
                try:  # the plain socket's shutdown (an SSLSocket's own would first drop its TLS state)
                    socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
                except OSError:
                    pass


class Connection(http.client.HTTPConnection):
    """One HTTP connection whose socket the watchdog holds from the first byte on (the TLS handshake included);
    ``tls``: the context to speak TLS with (None: plain HTTP)."""

    def __init__(self, host: str, port: int, watchdog: Watchdog, tls: ssl.SSLContext | None) -> None:
        super().__init__(host, port, timeout=watchdog.seconds)
        self.watchdog, self.tls = watchdog, tls

    def connect(self) -> None:
        raw = socket.create_connection((self.host, self.port), self.watchdog.seconds)
        self.sock = raw
        self.watchdog.watch(raw)
        if self.tls is not None:
            self.sock = wrapped = self.tls.wrap_socket(raw, server_hostname=self.host, do_handshake_on_connect=False)
            self.watchdog.watch(wrapped)  # wrapping took the descriptor from raw
            wrapped.do_handshake()
