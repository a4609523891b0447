"""Every request passes here first: the Host header (DNS rebinding), the session (with --token-file), and
on every POST the page's CSRF token, double-submitted against its cookie."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from .pages import CSRF, SESSION, form
from .state import state_of

OPEN = {"/login"}  # served without a session


async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    state = state_of(request)
    config = state.config
    if config.hosts_allowed is not None and host_name(request) not in config.hosts_allowed:
        return JSONResponse({"error": "this dashboard answers to 127.0.0.1 and localhost only"}, 421)
    if config.token and request.url.path not in OPEN and not signed_in(request, config.token, state.session):
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": "sign in: the m2p-session cookie or Authorization: Bearer TOKEN"}, 401)
        return RedirectResponse("/login", 303)
    if request.method == "POST":
        sent = request.headers.get("x-csrf-token") or ""
        if request.url.path == "/login":
            sent = (await form(request)).get("csrf", "")
        if not (hmac.compare_digest(sent.encode(), state.csrf_token.encode())
                and hmac.compare_digest(request.cookies.get(CSRF, "").encode(), state.csrf_token.encode())):
            return JSONResponse({"error": "CSRF token missing or wrong: reload the page"}, 403)
    return await call_next(request)


def host_name(request: Request) -> str:
    host = request.headers.get("host", "")
    if host.startswith("["):  # [::1]:8477
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def signed_in(request: Request, token: str, session: str) -> bool:
    bearer = request.headers.get("authorization", "")
    if bearer.startswith("Bearer "):
        return hmac.compare_digest(bearer[7:].encode(), token.encode())
    return hmac.compare_digest(request.cookies.get(SESSION, "").encode(), session.encode())
