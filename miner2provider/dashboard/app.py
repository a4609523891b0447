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
from miner2provider.market.wallet import WalletRead

from . import api, export, metrics, pages
from .guard import guard
from .limits import BodyLimit
from .pages import TEMPLATES
from .state import BadParameter, DashboardConfig, DashboardState
from .uptime import UptimeLog
from .wallet_view import WalletState

__all__ = ["TEMPLATES", "DashboardConfig", "create_app"]


def create_app(config: DashboardConfig, wallet_read: Callable[[], WalletRead] | None = None,
               uptime: UptimeLog | None = None) -> Starlette:
    """``wallet_read``: the provider's wallet and leases on the chain, read on its own thread at the interval
    (``app.state.wallet``, a WalletState); ``uptime``: where each read of the provider's status leaves a sample."""
    state = DashboardState(config)
    wallet = WalletState(uptime, wallet_read is not None)

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
            at, answer = time.time(), asked(ask)
            state.provider = (at, answer)
            if uptime is not None:
                sampled(uptime, at, not answer.error)
            if not config.interval_s or state.stop.wait(config.interval_s):
                return

    def wallet_reader(read: Callable[[], WalletRead]) -> None:
        """The chain's read on its own thread too: a slow node holds neither the sweep nor a page."""
        while True:
            wallet.keep(read_wallet(read))
            if not config.interval_s or state.stop.wait(config.interval_s):
                return

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        threading.Thread(target=sweeper, name="m2p-sweep", daemon=True).start()
        if config.provider_status is not None:
            threading.Thread(target=provider_reader, args=(config.provider_status,), name="m2p-provider",
                             daemon=True).start()
        if wallet_read is not None:
            threading.Thread(target=wallet_reader, args=(wallet_read,), name="m2p-wallet", daemon=True).start()
        yield
        state.stop.set()

    async def bad_parameter(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": str(exc)}, 400)

    app = Starlette(routes=[*pages.ROUTES, *export.ROUTES, *(route for route, _ in api.ROUTES)],
                    middleware=[Middleware(BodyLimit), Middleware(BaseHTTPMiddleware, dispatch=guard)],
                    exception_handlers={BadParameter: bad_parameter}, lifespan=lifespan)
    app.state.m2p = state
    app.state.wallet = wallet  # wallet_view.WalletState: .view(now) for the page and the API
    app.state.metrics = metrics.registry_for(state)  # GET /metrics (api.metrics)
    return app


def asked(ask: Callable[[], ProviderState]) -> ProviderState:
    """What ``ask`` says, or why it said nothing: the marketplace's read answers its errors as values, and
    anything it did not foresee is shown too rather than ending the thread (the page would go stale)."""
    try:
        return ask()
    except Exception as exc:
        return ProviderState("", f"the status could not be read ({type(exc).__name__})", {})


def read_wallet(read: Callable[[], WalletRead]) -> WalletRead:
    """What ``read`` says (its errors are values), or a read that says why it failed where it did not foresee it."""
    try:
        return read()
    except Exception as exc:
        why = f"the wallet could not be read ({type(exc).__name__})"
        return WalletRead(time.time(), "", "", None, (), None, (why,))


def sampled(uptime: UptimeLog, at: float, up: bool) -> None:
    """One uptime sample; a database that cannot take it loses that sample, not the provider's status."""
    try:
        uptime.add(at, up)
    except Exception:  # sqlite3.Error, OSError: the next read tries again
        pass
