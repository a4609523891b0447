"""The dashboard's JSON API under ``/api/``: one module-level endpoint each, whose docstring's first line
is its entry in ``GET /api`` (the index is made from ROUTES).  The pages (pages.py) are views of it."""

from __future__ import annotations

import gzip
import time
from typing import Any

from prometheus_client.exposition import choose_encoder, gzip_accepted
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from . import views
from .actions import ACTIONS, Refused
from .state import days_of, fleet_view, income_view, number, one, open_inputs, per_of, state_of


async def api_rigs(request: Request) -> Response:
    """the fleet: summary, and per rig mode, since, next change, GPUs, readiness, drift, agent error, hours
    per mode and earnings over DAYS"""
    return JSONResponse(fleet_view(request))


async def api_rig(request: Request) -> Response:
    """one rig's row"""
    state, now = state_of(request), time.time()
    rig = one(state, request.path_params["rig"], 1, now)
    if rig is None:
        return not_found(request.path_params["rig"])
    return JSONResponse(views.fleet_row(rig, state.config.economics, now, days_of(request)))


async def api_timeline(request: Request) -> Response:
    """the rig's modes as spans, hours per UTC day, earnings"""
    state, now, days = state_of(request), time.time(), days_of(request)
    rig = one(state, request.path_params["rig"], days, now)
    if rig is None:
        return not_found(request.path_params["rig"])
    return JSONResponse(views.timeline(rig, state.config.economics, now, days))


async def api_income(request: Request) -> Response:
    """the fleet's income per UTC day, ISO week or month (PER): mining, leasing, what the leased hours would have
    mined, GPU-hours, each figure marked estimated or measured; and next month's forecast beside the last 30 days"""
    state, now = state_of(request), time.time()
    return JSONResponse(income_view(state, open_inputs(state, now), per_of(request), now))


async def api_rig_income(request: Request) -> Response:
    """the same for one rig"""
    state, now = state_of(request), time.time()
    rig = one(state, request.path_params["rig"], 1, now)
    if rig is None:
        return not_found(request.path_params["rig"])
    return JSONResponse(income_view(state, [rig], per_of(request), now))


async def api_action(request: Request) -> Response:
    """action: {actions}; kind: plan (first) or run (a changing action names its finished plan's job id as
    plan); answers the job"""
    return await _start_action(request, [request.path_params["rig"]], await json_body(request))


async def api_actions(request: Request) -> Response:
    """the same for a selection of rigs: one job (--limit a,b,...)"""
    body = await json_body(request)
    rigs = body.get("rigs") if isinstance(body, dict) else None
    if not isinstance(rigs, list) or not all(isinstance(r, str) for r in rigs):
        return JSONResponse({"error": "send JSON: {\"rigs\": [names], \"action\": ..., \"kind\": ...}"}, 400)
    return await _start_action(request, rigs, body)


async def api_job(request: Request) -> Response:
    """an action's state, exit code and output lines from line N"""
    job = state_of(request).config.actions.jobs.get(request.path_params["job"])
    if job is None:
        return JSONResponse({"error": "no such job"}, 404)
    return JSONResponse(job.view(number(request, "since", 0, 0, 10**9)))


async def api_economics(request: Request) -> Response:
    """the prices earnings are estimated with"""
    e = state_of(request).config.economics
    return JSONResponse({"source": e.source, "currency": e.currency,
                         "lease_price_per_gpu_hour": e.lease_per_gpu_hour,
                         "mining_revenue_per_gpu_day": e.mining_per_gpu_day})


def api_wallet(request: Request) -> Response:
    """the provider's wallet and leases as the chain last said, and its 7-day uptime"""
    # A plain def: the uptime's SQLite read may wait on the provider thread's write, never on the event loop.
    return JSONResponse(request.app.state.wallet.view(time.time()))


def metrics(request: Request) -> Response:
    """the fleet in Prometheus's text format, per rig and per card (docs/metrics.md)"""
    # A plain def: Starlette runs it in its thread pool, so the history's reads never hold the event loop.
    # The library's own negotiation: OpenMetrics where the scraper asks for it (Prometheus does), else text 0.0.4.
    # Gzipped where asked, as the library's own apps do: 1,000 rigs x 8 cards are ~12 MB of text.
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    body, headers = encode(request.app.state.metrics), {"Content-Type": content_type}
    if gzip_accepted(request.headers.get("accept-encoding", "")):
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    return Response(body, headers=headers)


async def api_index(request: Request) -> Response:
    """this index"""
    return JSONResponse(api_doc())


async def _start_action(request: Request, names: list[str], body: Any) -> Response:
    state = state_of(request)
    if not isinstance(body, dict) or not all(isinstance(body.get(k, ""), str) for k in ("action", "kind", "plan")):
        return JSONResponse({"error": "send JSON: {\"action\": ..., \"kind\": \"plan\" | \"run\", "
                                      "\"plan\": JOB (a run's plan)}"}, 400)
    action, kind, plan = body.get("action", ""), body.get("kind", "plan"), body.get("plan")
    if kind not in {"plan", "run"}:
        return JSONResponse({"error": f"kind {kind!r}: plan or run"}, 400)
    now = time.time()
    leases = {}
    for name in dict.fromkeys(names):
        rig = one(state, name, 1, now)
        if rig is None:
            return not_found(name)
        leases[name] = views.fleet_row(rig, state.config.economics, now, 1)["leases"]
    try:
        job = state.config.actions.start(leases, action, kind, plan)
    except Refused as exc:
        return JSONResponse({"error": exc.message}, 409)
    return JSONResponse(job.view(), 202)


async def json_body(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        return None


def not_found(name: str) -> Response:
    return JSONResponse({"error": f"no rig {name!r} in the inventory"}, 404)


# (route, the query or body it takes, shown in the index)
ROUTES = [
    (Route("/api", api_index), ""),
    (Route("/api/rigs", api_rigs), "?days=7&group=G&mode=M"),
    (Route("/api/rigs/{rig}", api_rig), ""),
    (Route("/api/rigs/{rig}/timeline", api_timeline), "?days=7|30"),
    (Route("/api/rigs/{rig}/income", api_rig_income), "?per=day|week|month"),
    (Route("/api/income", api_income), "?per=day|week|month"),
    (Route("/api/rigs/{rig}/actions", api_action, methods=["POST"]), " {action, kind, plan}"),
    (Route("/api/actions", api_actions, methods=["POST"]), " {rigs, action, kind, plan}"),
    (Route("/api/jobs/{job}", api_job), "?since=N"),
    (Route("/api/economics", api_economics), ""),
    (Route("/api/wallet", api_wallet), ""),
    (Route("/metrics", metrics), ""),
]


def api_doc() -> dict[str, str]:
    """``GET /api``: every route with its method and what it answers, from the endpoints' docstrings."""
    doc = {}
    for route, takes in ROUTES[1:]:
        method = "POST" if "POST" in (route.methods or ()) else "GET"
        summary = " ".join((route.endpoint.__doc__ or "").split()).format(actions=", ".join(ACTIONS))
        doc[f"{method} {route.path}{takes}"] = summary
    return doc
