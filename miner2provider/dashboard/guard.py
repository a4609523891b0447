"""Every request passes here first: the Host header (DNS rebinding), the session or bearer token, on every
POST the request's origin, and on every answer the headers that keep the page's content inert.

Cross-site requests: a POST signed in by its cookie must come from the dashboard's own page: its
``Origin`` is the dashboard's and, where the browser says it, ``Sec-Fetch-Site`` is ``same-origin``.  The
session cookie is also ``SameSite=Strict`` and ``HttpOnly``, so no token sits in the page for a script to
read.  A request with ``Authorization: Bearer`` carries no ambient credential and skips the origin check;
a wrong one counts against the same limit as a wrong login (sessions.py).

A non-browser client can send any ``Origin`` it likes, so the origin check stops only browsers; such a
client still needs the session, which is bound to the local user (or address) that opened it and to the
dashboard's port: a cookie it read somewhere is refused (sessions.py, peer.py).
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from .peer import client_of, listening_port
from .sessions import Sessions
from .state import state_of

SESSION = "m2p-session"  # then "-PORT"; "__Host-" before it over HTTPS (session_cookie)
OPEN = {"/login"}  # served without a session
# Referrer-Policy same-origin, not no-referrer: under no-referrer Chromium sends "Origin: null" with the
# page's own form POSTs, which the origin check must refuse.
# Pages get a nonce for their own script and style; everything else may run nothing at all.
PAGE_POLICY = ("default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; img-src 'self'; "
               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
           "Cache-Control": "no-store", "Cross-Origin-Opener-Policy": "same-origin"}


async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    request.state.nonce = secrets.token_urlsafe(16)
    response = await _checked(request, call_next)
    response.headers["Content-Security-Policy"] = PAGE_POLICY.format(nonce=request.state.nonce)
    response.headers.update(HEADERS)
    return response


async def _checked(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    state = state_of(request)
    config = state.config
    if config.hosts_allowed is not None and host_name(request) not in config.hosts_allowed:
        return JSONResponse({"error": "this dashboard answers to 127.0.0.1 and localhost only"}, 421)
    bearer = request.headers.get("authorization", "")
    if bearer:
        client = client_of(request)
        if wait := state.limiter.wait_s(client):
            return too_many(wait)
        if not (bearer.startswith("Bearer ") and state.is_token(bearer[7:])):
            state.limiter.failed(client)
            return JSONResponse({"error": "the bearer token is not the dashboard's token"}, 401)
        return await call_next(request)
    if request.method not in ("GET", "HEAD") and not same_origin(request):
        return JSONResponse({"error": "a request from another site (or with no Origin header) is refused: "
                             "use the dashboard's own page, or Authorization: Bearer TOKEN"}, 403)
    bound = state.sessions.bound_to(request.cookies.get(session_cookie(request), ""))
    if request.url.path not in OPEN and (bound is None or bound != session_binding(request)):
        if request.url.path.startswith("/api/") or request.url.path == "/metrics":  # machines: 401, no login page
            return JSONResponse({"error": "sign in: the session cookie or Authorization: Bearer TOKEN"}, 401)
        return RedirectResponse("/login", 303)
    return await call_next(request)


def too_many(wait_s: float) -> Response:
    seconds = int(wait_s) + 1
    return JSONResponse({"error": f"too many wrong tokens: try again in {seconds} s"}, 429,
                        headers={"Retry-After": str(seconds)})


def session_cookie(request: Request) -> str:
    """The session cookie's name.  A browser sends a host's cookies to every port of it (RFC 6265 8.5), so
    the name carries the dashboard's port: two dashboards on one machine keep their own.  Over HTTPS it
    starts with ``__Host-``, which a browser takes only from a secure origin with Path=/ and no Domain
    (RFC 6265bis 4.1.3.2): a plain-HTTP page on another port cannot set or replace it."""
    name = f"{SESSION}-{listening_port(request)}"
    return f"__Host-{name}" if request.url.scheme == "https" else name


def session_binding(request: Request) -> str:
    return Sessions.binding(client_of(request), listening_port(request))


def same_origin(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    return site in (None, "same-origin") and origin is not None and hmac.compare_digest(origin.encode(), own.encode())


def host_name(request: Request) -> str:
    host = request.headers.get("host", "")
    if host.startswith("["):  # [::1]:8477
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host
