"""What keeps one client from holding the dashboard down: body sizes checked before reading, a deadline for
a request's headers and body, and the server's connection cap.

Why each: the login form is a few hundred bytes and the API's JSON a few hundred more, but Starlette reads
whatever it is sent (a 400 MiB POST took the server from 54 to 464 MB); uvicorn times out idle keep-alive
connections but never a request whose headers do not finish, so a client sending a byte a second held a
connection (and, a thousand times over, the server) for as long as it liked.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from . import peer

LOGIN_BODY = 4 << 10
JSON_BODY = 64 << 10
HEADER_S = 10.0  # a request's headers, from connect (or the last response) on
BODY_S = 10.0  # a request's body, once its headers are in
MAX_CONNECTIONS = 64  # uvicorn answers 503 beyond this
KEEP_ALIVE_S = 5.0


def body_limit(path: str) -> int:
    return LOGIN_BODY if path == "/login" else JSON_BODY


class BodyLimit:
    """ASGI middleware: a body longer than its path's limit is refused by its Content-Length unread, or as
    soon as the bytes read pass the limit; a body slower than BODY_S is refused too.  What passes is read
    whole here (at most 64 KiB) and handed on, so nothing behind reads more."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit(scope["path"])
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            await refuse(send, 413, f"the request body is over {limit} bytes")
            return
        try:
            body = await asyncio.wait_for(read_body(receive, limit), BODY_S)
        except TimeoutError:
            await refuse(send, 408, f"the request body did not arrive within {BODY_S:g}s")
            return
        if body is None:
            await refuse(send, 413, f"the request body is over {limit} bytes")
            return
        given = False

        async def replay() -> Message:
            nonlocal given
            if given:
                return await receive()
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes ``limit`` bytes."""
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


async def refuse(send: Send, status: int, error: str) -> None:
    body = json.dumps({"error": error}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class HeaderDeadline(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, with a deadline for each request's headers (HEADER_S from the
    connection or the previous response): a connection still without a whole request then is closed."""

    _header_timer: asyncio.TimerHandle | None = None
    _peer: peer.Connection | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._peer = peer.opened(self.client, self.server)  # its local user is looked up once (peer.py)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        peer.closed(self._peer)
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(HEADER_S, self._late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _late(self) -> None:
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()
