"""The dashboard's web app: a Starlette app over the history, the pages a thin view of ``/api/``.

Safety: served on 127.0.0.1 unless told otherwise; with ``--token-file`` every request needs the
login cookie (an HMAC of the token, compared in constant time) or ``Authorization: Bearer TOKEN``;
every POST needs the CSRF token of the page (``X-CSRF-Token``, double-submitted against its cookie).
Nothing from the inventory's secrets is ever put in a response: the history holds detect reports
(no passwords in them) and action output passes ssh.redact.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import math
import secrets
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from miner2provider.core.inventory import Host
from miner2provider.dashboard.history import History, Window
from miner2provider.timeshare.economics import Economics

from . import views
from .actions import ACTIONS, Actions, Refused

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
SESSION, CSRF = "m2p-session", "m2p-csrf"
OPEN = {"/login"}
SORT_KEYS = ("rig", "mode", "mining_os", "state", "gpu_count", "since")  # served without a session
API_DOC = {
    "GET /api/rigs?days=7&group=G&mode=M": "the fleet: summary, and per rig mode, since, next change, GPUs, "
                                          "readiness, drift, agent error, hours per mode and earnings over DAYS",
    "GET /api/rigs/{rig}": "one rig's row",
    "GET /api/rigs/{rig}/timeline?days=7|30": "the rig's modes as spans, hours per UTC day, earnings",
    "POST /api/rigs/{rig}/actions {action, kind}": f"action: {', '.join(ACTIONS)}; kind: plan (first) or run; "
                                                   "X-CSRF-Token header; answers the job",
    "POST /api/actions {rigs, action, kind}": "the same for a selection of rigs: one job (--limit a,b,...)",
    "GET /api/jobs/{id}?since=N": "an action's state, exit code and output lines from line N",
    "GET /api/economics": "the prices earnings are estimated with",
}


@dataclass
class DashboardConfig:
    db: Path
    hosts: list[Host]
    economics: Economics
    actions: Actions
    sweep: Callable[[list[Host]], object]  # reads rigs into the history (SSH)
    sweep_api: Callable[[list[Host]], object]  # reads the farm's Kubernetes API into it (or nothing)
    interval_s: float  # 0: no sweeps in the background
    token: str | None
    # The names the page may be asked for under (the Host header): on loopback only loopback names, so
    # a web page elsewhere cannot reach it by pointing its own DNS name at 127.0.0.1 (DNS rebinding).
    # None: any (a --bind beyond loopback, which needs the token anyway).
    hosts_allowed: frozenset[str] | None = frozenset({"127.0.0.1", "localhost", "::1"})


def create_app(settings: DashboardConfig) -> Starlette:
    csrf_token = secrets.token_urlsafe(24)
    session = _session_value(settings.token) if settings.token else ""
    stop = threading.Event()

    def sweeper() -> None:
        while True:
            for collect in (settings.sweep_api, settings.sweep):
                try:
                    collect(settings.hosts)
                except Exception:  # retried at the next interval; the page shows what it last had
                    pass
            if not settings.interval_s or stop.wait(settings.interval_s):
                return

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        thread = threading.Thread(target=sweeper, name="m2p-sweep", daemon=True)
        thread.start()
        yield
        stop.set()

    def rig_inputs(days: int, now: float) -> list[views.RigInput]:
        with History(settings.db) as history:
            latest = history.latest_snapshots()
            windows = history.windows(now - days * views.DAY, now)
            nodes = history.nodes()
        return [dataclasses.replace(_input(h, latest[h.name][1] if h.name in latest else None, [], nodes),
                                    window=windows.get(h.name, Window((), None)))
                for h in settings.hosts]

    def one(name: str, days: int, now: float) -> views.RigInput | None:
        host = next((h for h in settings.hosts if h.name == name), None)
        if host is None:
            return None
        with History(settings.db) as history:
            start = now - (days + 1) * views.DAY  # timelines start at a UTC midnight, up to a day earlier
            # every line from start on: a line after now (a rig's clock ahead) still ends the one before
            return _input(host, history.latest_snapshot(name), history.ledger(name, start, math.inf), history.nodes())

    def fleet_view(request: Request) -> dict[str, Any]:
        days = _days(request)
        now = time.time()
        data = views.fleet(rig_inputs(days, now), settings.economics, now, days)
        group, mode = request.query_params.get("group", ""), request.query_params.get("mode", "")
        data["rigs"] = [r for r in data["rigs"]
                        if (not group or group in r["groups"]) and (not mode or r["mode"] == mode)]
        key = request.query_params.get("sort", "rig")
        if key in SORT_KEYS:
            data["rigs"].sort(key=lambda r: (r[key], r["rig"]))
        data["busy"] = settings.actions.running()
        return data

    async def api_rigs(request: Request) -> Response:
        return JSONResponse(fleet_view(request))

    async def api_rig(request: Request) -> Response:
        now = time.time()
        rig = one(request.path_params["rig"], 1, now)
        if rig is None:
            return _not_found(request.path_params["rig"])
        return JSONResponse(views.fleet_row(rig, settings.economics, now, _days(request)))

    async def api_timeline(request: Request) -> Response:
        now, days = time.time(), _days(request)
        rig = one(request.path_params["rig"], days, now)
        if rig is None:
            return _not_found(request.path_params["rig"])
        return JSONResponse(views.timeline(rig, settings.economics, now, days))

    async def start_action(names: list[str], body: Any) -> Response:
        try:
            action, kind = str(body.get("action", "")), str(body.get("kind", "plan"))
        except AttributeError:
            return JSONResponse({"error": "send JSON: {\"action\": ..., \"kind\": \"plan\" | \"run\"}"}, 400)
        if kind not in {"plan", "run"}:
            return JSONResponse({"error": f"kind {kind!r}: plan or run"}, 400)
        now = time.time()
        leases = {}
        for name in dict.fromkeys(names):
            rig = one(name, 1, now)
            if rig is None:
                return _not_found(name)
            leases[name] = views.fleet_row(rig, settings.economics, now, 1)["leases"]
        try:
            job = settings.actions.start(leases, action, kind)
        except Refused as exc:
            return JSONResponse({"error": exc.message}, 409)
        return JSONResponse(job.view(), 202)

    async def api_action(request: Request) -> Response:
        return await start_action([request.path_params["rig"]], await _json(request))

    async def api_actions(request: Request) -> Response:
        body = await _json(request)
        rigs = body.get("rigs") if isinstance(body, dict) else None
        if not isinstance(rigs, list) or not all(isinstance(r, str) for r in rigs):
            return JSONResponse({"error": "send JSON: {\"rigs\": [names], \"action\": ..., \"kind\": ...}"}, 400)
        return await start_action(rigs, body)

    async def api_job(request: Request) -> Response:
        job = settings.actions.jobs.get(request.path_params["job"])
        if job is None:
            return JSONResponse({"error": "no such job"}, 404)
        since = request.query_params.get("since", "0")
        return JSONResponse(job.view(int(since) if since.isdigit() else 0))

    async def api_economics(request: Request) -> Response:
        e = settings.economics
        return JSONResponse({"source": e.source, "currency": e.currency,
                             "lease_price_per_gpu_hour": e.lease_per_gpu_hour,
                             "mining_revenue_per_gpu_day": e.mining_per_gpu_day})

    async def api_index(request: Request) -> Response:
        return JSONResponse(API_DOC)

    async def page_fleet(request: Request) -> Response:
        query = dict(request.query_params)
        links = {key: urlencode({**query, "sort": key}) for key in SORT_KEYS}
        return _page(request, "fleet.html.j2", {"fleet": fleet_view(request), "query": query, "sort_links": links,
                                                "actions": ACTIONS})

    async def page_rig(request: Request) -> Response:
        now, days = time.time(), _days(request)
        rig = one(request.path_params["rig"], days, now)
        if rig is None:
            return _not_found(request.path_params["rig"])
        line = views.timeline(rig, settings.economics, now, days)
        return _page(request, "rig.html.j2", {"row": views.fleet_row(rig, settings.economics, now, days),
                                              "timeline": line, "chart": _chart(line), "actions": ACTIONS})

    async def login(request: Request) -> Response:
        if request.method == "POST":
            given = (await _form(request)).get("token", "")
            if settings.token and hmac.compare_digest(given.encode(), settings.token.encode()):
                response = RedirectResponse("/", 303)
                response.set_cookie(SESSION, session, httponly=True, samesite="strict")
                return response
            return _page(request, "login.html.j2", {"failed": True}, 401)
        return _page(request, "login.html.j2", {"failed": False})

    def _page(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
        response = TEMPLATES.TemplateResponse(request, template, {**context, "csrf": csrf_token}, status_code=status)
        response.set_cookie(CSRF, csrf_token, samesite="strict")
        return response

    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if settings.hosts_allowed is not None and _host_name(request) not in settings.hosts_allowed:
            return JSONResponse({"error": "this dashboard answers to 127.0.0.1 and localhost only"}, 421)
        if settings.token and request.url.path not in OPEN and not _signed_in(request, settings.token, session):
            if request.url.path.startswith("/api/"):
                return JSONResponse({"error": "sign in: the m2p-session cookie or Authorization: Bearer TOKEN"}, 401)
            return RedirectResponse("/login", 303)
        if request.method == "POST":
            sent = request.headers.get("x-csrf-token") or ""
            if request.url.path == "/login":
                sent = (await _form(request)).get("csrf", "")
            if not (hmac.compare_digest(sent.encode(), csrf_token.encode())
                    and hmac.compare_digest(request.cookies.get(CSRF, "").encode(), csrf_token.encode())):
                return JSONResponse({"error": "CSRF token missing or wrong: reload the page"}, 403)
        return await call_next(request)

    app = Starlette(routes=[
        Route("/", page_fleet), Route("/rigs/{rig}", page_rig), Route("/login", login, methods=["GET", "POST"]),
        Route("/api", api_index), Route("/api/rigs", api_rigs), Route("/api/rigs/{rig}", api_rig),
        Route("/api/rigs/{rig}/timeline", api_timeline),
        Route("/api/rigs/{rig}/actions", api_action, methods=["POST"]),
        Route("/api/actions", api_actions, methods=["POST"]),
        Route("/api/jobs/{job}", api_job), Route("/api/economics", api_economics),
    ], middleware=[Middleware(BaseHTTPMiddleware, dispatch=guard)], lifespan=lifespan)
    return app


async def _json(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        return None


async def _form(request: Request) -> dict[str, str]:
    """The login form's fields (urlencoded, a few hundred bytes; anything longer is no login)."""
    body = await request.body()
    if len(body) > 4 << 10:
        return {}
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


def _input(host: Host, snap: dict[str, Any] | None, ledger: list[Any],
           nodes: dict[str, tuple[float, str, dict[str, Any]]]) -> views.RigInput:
    return views.RigInput(host.name, host.groups, (snap or {}).get("read_at"), snap, tuple(ledger),
                          nodes.get(views.node_name(host.name, snap)))


def _days(request: Request) -> int:
    value = request.query_params.get("days", "7")
    return min(int(value), 400) if value.isdigit() and int(value) > 0 else 7


def _not_found(name: str) -> Response:
    return JSONResponse({"error": f"no rig {name!r} in the inventory"}, 404)


def _host_name(request: Request) -> str:
    host = request.headers.get("host", "")
    if host.startswith("["):  # [::1]:8477
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _session_value(token: str) -> str:
    return hmac.new(token.encode(), b"m2p dashboard session", hashlib.sha256).hexdigest()


def _signed_in(request: Request, token: str, session: str) -> bool:
    bearer = request.headers.get("authorization", "")
    if bearer.startswith("Bearer "):
        return hmac.compare_digest(bearer[7:].encode(), token.encode())
    return hmac.compare_digest(request.cookies.get(SESSION, "").encode(), session.encode())


COLOURS = {"mining": "#d98e04", "idle-mining": "#f2c14e", "leasing": "#2a9d8f", "draining": "#8d99ae"}
CHART_W, ROW_H = 720, 14


def _chart(line: dict[str, Any]) -> dict[str, Any]:
    """Server-side SVG geometry: one row per day, a rect per span piece, coloured by mode."""
    rects = []
    for span in line["spans"]:
        start, left = span["from_start_s"], span["seconds"]
        while left > 0:
            day, offset = divmod(start, int(views.DAY))
            piece = min(left, int(views.DAY) - offset)
            rects.append({"x": round(offset / views.DAY * CHART_W, 1), "y": day * (ROW_H + 4),
                          "w": max(round(piece / views.DAY * CHART_W, 1), 0.5), "h": ROW_H,
                          "fill": "#bbbbbb" if span["blind"] else COLOURS.get(span["mode"], "#999999"),
                          "title": f"{span['mode']} {span['start']} to {span['end']}"
                                   + (f" ({', '.join(span['leases'])})" if span["leases"] else "")})
            start, left = start + piece, left - piece
    return {"width": CHART_W, "height": line["days"] * (ROW_H + 4), "rects": rects, "colours": COLOURS}
