"""The owner's books as a download (issue 57): ``GET /export.csv?days=N``, the ledger CSV (ledger_csv.py) of
every rig over the last N UTC calendar days, as ``m2p history --csv`` writes it, with the leases' payments from
the wallet reader's last read of the chain where the dashboard reads one (wallet_view.payment_rows).

It reads the history and changes nothing; like every route it is served only past guard.py (a session or
``Authorization: Bearer``), so the file is the signed-in owner's alone.  It answers as an attachment, so a
browser saves it rather than showing it, and guard.py's ``nosniff`` keeps it CSV.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from miner2provider.core.inventory import Host
from miner2provider.dashboard.history import History
from miner2provider.detect.report import RigReport, stored_report

from . import ledger_csv, views
from .state import days_of, latest_snapshots, state_of
from .wallet_view import WalletState, payment_rows

MEDIA_TYPE = "text/csv; charset=utf-8"  # RFC 4180's type; the rigs' names and leases may be any UTF-8

Typed = Callable[[str, float, dict[str, Any] | None], RigReport | None]


def ledger_inputs(history: History, hosts: list[Host], since: float,
                  latest: dict[str, tuple[float, dict[str, Any]]], typed: Typed) -> list[views.RigInput]:
    """Every host's ledger lines from ``since`` on (led by the line in force then; a line after now, a rig's clock
    ahead, still ends the one before), its latest report (``latest``, typed by ``typed``) and its node's status."""
    nodes = history.nodes()
    inputs = []
    for host in hosts:
        at, snap = latest.get(host.name, (0.0, None))
        inputs.append(views.RigInput(host.name, host.groups, (snap or {}).get("read_at"), snap,
                                     tuple(history.ledger(host.name, since, math.inf)),
                                     nodes.get(views.node_name(host.name, snap)), None, typed(host.name, at, snap)))
    return inputs


def as_stored(rig: str, at: float, snapshot: dict[str, Any] | None) -> RigReport | None:
    """A report typed afresh (the CLI's: it reads each once)."""
    return stored_report(snapshot)


def export_csv(request: Request) -> Response:
    """Plain ``def``: Starlette runs it in its thread pool, so reading 1,000 rigs' month never holds the loop."""
    state, days = state_of(request), days_of(request)
    since, until = ledger_csv.window(days, time.time())
    with History(state.config.db) as history:
        inputs = ledger_inputs(history, state.config.hosts, since, latest_snapshots(state, history), state.typed)
    body = ledger_csv.text(inputs, state.config.economics, since, until, payments(request, inputs))
    name = f"m2p-ledger-{datetime.fromtimestamp(until, UTC).date().isoformat()}-{days}d.csv"
    return Response(body, media_type=MEDIA_TYPE, headers={"Content-Disposition": f'attachment; filename="{name}"'})


def payments(request: Request, inputs: list[views.RigInput]) -> list[ledger_csv.PaymentRow]:
    """The leases' payments as the wallet reader last read them (none: no chain is read, or not yet), each on the
    rig whose ledger in the window names the lease's pods."""
    wallet: WalletState | None = getattr(request.app.state, "wallet", None)
    if wallet is None:
        return []
    with wallet.lock:
        read = wallet.latest
    if read is None:
        return []
    return payment_rows(read, {rig.name: sorted({pod for line in rig.ledger for pod in line.leases}) for rig in inputs})


ROUTES = [Route("/export.csv", export_csv)]
