"""A deadline for a whole exchange over one socket: a watchdog shuts the socket down when the time is up,
whatever the read or write is doing, so that a peer trickling a byte every half second cannot hold the caller
(a socket timeout counts from the last byte only).  Used by every outbound HTTP read or send that must not
stall the dashboard or `m2p provider check`: the marketplace provider's status, the RPC node's, the alert receivers.

``exchange`` is the one HTTP read built on it: one request, no redirect followed (urllib follows a 30x to any URL,
so whoever answers could send m2p to one this machine reaches, its loopback included), at most ``max_bytes`` read,
and every failure a ``NoAnswer`` whose text quotes nothing the server sent."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from urllib.parse import urlsplit


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

    def tls(self, context: ssl.SSLContext, sock: socket.socket, server_hostname: str | None) -> ssl.SSLSocket:
        """``sock`` wrapped in TLS, the handshake under the deadline: wrapping takes the descriptor from ``sock``, so
        the wrapped socket is watched before it shakes hands (Python's own handshake deadline counts from its start)."""
        wrapped = context.wrap_socket(sock, server_hostname=server_hostname, do_handshake_on_connect=False)
        self.watch(wrapped)
        wrapped.do_handshake()
        return wrapped

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
            self.sock = self.watchdog.tls(self.tls, raw, self.host)


class NoAnswer(Exception):
    """No usable answer; ``str()`` says why in a few words, none of them the server's."""


def exchange(url: str, timeout_s: float, max_bytes: int, *, method: str = "GET", body: bytes | None = None,
             headers: dict[str, str] | None = None, tls: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """The status and body of a 2xx answer to one request to ``url`` (http:// or https://, verified against the
    system's CAs unless ``tls`` is another context), whole within ``timeout_s``, or NoAnswer."""
    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise NoAnswer("not a URL with a port number") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NoAnswer("not an http:// or https:// URL")
    context = (tls or ssl.create_default_context()) if parts.scheme == "https" else None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    watchdog, reason = Watchdog(timeout_s), ""
    try:
        with watchdog:
            status, answer = _one(Connection(parts.hostname, port, watchdog, context), method, path, body,
                                  {"Accept": "application/json", "User-Agent": "m2p", **(headers or {})}, max_bytes)
    except ssl.SSLCertVerificationError as exc:  # this machine's verdict on the certificate, not the server's text
        reason = f"its TLS certificate is not trusted ({exc.verify_message or 'unverified'})"
    except http.client.InvalidURL:
        reason = "not a URL that can be sent (a space or control character)"
    except http.client.HTTPException as exc:  # its text is the server's bytes: only its kind is said
        reason = f"not an HTTP answer ({type(exc).__name__})"
    except TimeoutError:  # the socket's own timeout, the deadline's twin: under load it may fire before the watchdog
        reason = f"no whole answer within {timeout_s:g} s"
    except OSError as exc:
        reason = f"no answer ({exc.strerror or type(exc).__name__})"
    except ValueError as exc:  # a host name IDNA refuses, and the like
        reason = f"no answer ({type(exc).__name__})"
    if watchdog.fired:  # whatever the cut exchange made of it (an error, or an answer cut short)
        raise NoAnswer(f"no whole answer within {timeout_s:g} s")
    if reason:
        raise NoAnswer(reason)
    if 300 <= status < 400:
        raise NoAnswer(f"HTTP {status} (a redirect: not followed)")
    if not 200 <= status < 300:
        raise NoAnswer(f"HTTP {status}")
    if len(answer) > max_bytes:
        raise NoAnswer(f"the answer is larger than {max_bytes:,} bytes")
    return status, answer


def _one(connection: Connection, method: str, path: str, body: bytes | None, headers: dict[str, str],
         max_bytes: int) -> tuple[int, bytes]:
    """One request and its answer's status and first ``max_bytes + 1`` bytes (one more tells a longer answer)."""
    try:
        connection.request(method, path, body=body, headers={**headers, "Connection": "close"})
        reply = connection.getresponse()
        return reply.status, reply.read(max_bytes + 1)
    finally:
        connection.watchdog.release()  # before the close: the watchdog never shuts down a descriptor reused since
        connection.close()
