"""The dashboard's pages: server-rendered views of the API's data (api.py), one endpoint, one view and one
template each (templates/)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import jinja2
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from . import cards, income, views
from .actions import ACTIONS
from .api import not_found
from .guard import session_binding, session_cookie
from .peer import client_of
from .state import SORT_KEYS, card_samples, days_of, fleet_view, income_view, one, per_of, state_of

# Autoescape on for every template, whatever its name: Starlette's default escapes only .html/.htm/.xml,
# and ours are .html.j2 (everything a rig sends reaches these pages).
TEMPLATES = Jinja2Templates(env=jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")), autoescape=True))


async def page_fleet(request: Request) -> Response:
    query = dict(request.query_params)
    links = {key: urlencode({**query, "sort": key}) for key in SORT_KEYS}
    fleet = fleet_view(request, with_income=True)
    return render(request, "fleet.html.j2", {"fleet": fleet, "query": query, "sort_links": links, "actions": ACTIONS,
                                             **income_context(fleet["income"], query, "/api/income")})


def income_context(data: dict[str, Any], query: dict[str, str], api: str) -> dict[str, Any]:
    """The income section's (templates/_income.html.j2): its figures, chart and the day/week/month links."""
    return {"income": data, "income_chart": income.chart(data), "income_api": api,
            "income_links": {per: urlencode({**query, "per": per}) for per in income.PERIODS}}


async def page_rig(request: Request) -> Response:
    state, now, days = state_of(request), time.time(), days_of(request)
    rig = one(state, request.path_params["rig"], days, now)
    if rig is None:
        return not_found(request.path_params["rig"])
    line = views.timeline(rig, state.config.economics, now, days)
    agent, _ = views.agent_of(rig)
    earned = income_context(income_view(state, [rig], per_of(request), now), dict(request.query_params),
                            f"/api/rigs/{quote(rig.name, safe='')}/income")
    return render(request, "rig.html.j2", {"row": views.fleet_row(rig, state.config.economics, now, days),
                                           "timeline": line, "chart": chart(line), "actions": ACTIONS,
                                           "cards": cards.card_table(agent, now),
                                           "card_charts": cards.day_charts(card_samples(state, rig.name, now), now),
                                           **earned})


async def login(request: Request) -> Response:
    state = state_of(request)
    if request.method != "POST":
        return render(request, "login.html.j2", {"failed": False, "signing_in": True})
    client = client_of(request)
    wait = state.limiter.wait_s(client)
    if wait:
        response = render(request, "login.html.j2", {"failed": False, "wait_s": int(wait) + 1, "signing_in": True}, 429)
        response.headers["Retry-After"] = str(int(wait) + 1)
        return response
    given = (await form(request)).get("token", "")
    if not state.is_token(given):
        state.limiter.failed(client)
        return render(request, "login.html.j2", {"failed": True, "signing_in": True}, 401)
    response = RedirectResponse("/", 303)
    response.set_cookie(session_cookie(request), state.sessions.open(session_binding(request)),
                        max_age=int(state.sessions.ttl_s), httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


async def logout(request: Request) -> Response:
    """Ends this browser's session (POST from the page's own form)."""
    state_of(request).sessions.close(request.cookies.get(session_cookie(request), ""), session_binding(request))
    response = RedirectResponse("/login", 303)
    response.delete_cookie(session_cookie(request), httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
    return response


ROUTES = [Route("/", page_fleet), Route("/rigs/{rig}", page_rig), Route("/login", login, methods=["GET", "POST"]),
          Route("/logout", logout, methods=["POST"])]


def render(request: Request, template: str, context: dict[str, Any], status: int = 200) -> Response:
    return TEMPLATES.TemplateResponse(request, template, {**context, "nonce": request.state.nonce},
                                      status_code=status)


async def form(request: Request) -> dict[str, str]:
    """The login form's fields (urlencoded, a few hundred bytes; limits.py refused anything over 4 KiB)."""
    body = await request.body()
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


COLOURS = {"mining": "#d98e04", "idle-mining": "#f2c14e", "leasing": "#2a9d8f", "draining": "#8d99ae"}
CHART_W, ROW_H = 720, 14


def chart(line: dict[str, Any]) -> dict[str, Any]:
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
