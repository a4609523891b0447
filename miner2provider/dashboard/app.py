"""The dashboard's web app: a Starlette app over the history, the pages a thin view of ``/api/``.

Assembly only: the JSON API (api.py), the pages (pages.py), the guard every request passes (guard.py)
and the background sweeps, over one DashboardState (state.py) the endpoints read from
``request.app.state.m2p``.  A new page is one endpoint, one view and one template.

Safety (docs/security.md): every request needs a session (a random ID the login with the token opened)
or ``Authorization: Bearer TOKEN``, loopback included; every POST signed in by cookie must come from the
page's own origin (guard.py); every template is autoescaped and every page runs under a nonce CSP;
bodies are capped before they are read and slow clients dropped (limits.py).  Nothing from the
inventory's secrets is ever put in a response: the history holds detect reports (no passwords in them)
and action output passes ssh.redact.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from miner2provider.market.base import ProviderState

from . import api, metrics, pages
from .guard import guard
from .limits import BodyLimit
from .pages import TEMPLATES
from .state import BadParameter, DashboardConfig, DashboardState

__all__ = ["TEMPLATES", "DashboardConfig", "create_app"]


def create_app(config: DashboardConfig) -> Starlette:
    state = DashboardState(config)

    def sweeper() -> None:
        while True:
            for collect in (config.sweep_api, config.sweep):
                try:
                    collect(config.hosts)
                except Exception:  # retried at the next interval; the page shows what it last had
                    pass
            if not config.interval_s or state.stop.wait(config.interval_s):
                return

    def provider_reader(ask: Callable[[], ProviderState]) -> None:
        """The provider's status on its own thread: a provider slow to answer never holds the rigs' sweep."""
        while True:
            state.provider = (time.time(), asked(ask))
            if not config.interval_s or state.stop.wait(config.interval_s):
                return

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        threading.Thread(target=sweeper, name="m2p-sweep", daemon=True).start()
        if config.provider_status is not None:
            threading.Thread(target=provider_reader, args=(config.provider_status,), name="m2p-provider",
                             daemon=True).start()
        yield
        state.stop.set()

    async def bad_parameter(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": str(exc)}, 400)

    app = Starlette(routes=[*pages.ROUTES, *(route for route, _ in api.ROUTES)],
                    middleware=[Middleware(BodyLimit), Middleware(BaseHTTPMiddleware, dispatch=guard)],
                    exception_handlers={BadParameter: bad_parameter}, lifespan=lifespan)
    app.state.m2p = state
    app.state.metrics = metrics.registry_for(state)  # GET /metrics (api.metrics)
    return app


def asked(ask: Callable[[], ProviderState]) -> ProviderState:
    """What ``ask`` says, or why it said nothing: the marketplace's read answers its errors as values, and
    anything it did not foresee is shown too rather than ending the thread (the page would go stale)."""
    try:
        return ask()
    except Exception as exc:
        return ProviderState("", f"the status could not be read ({type(exc).__name__})", {})
