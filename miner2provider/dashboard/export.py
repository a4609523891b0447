"""The owner's books as a download (issue 57): ``GET /export.csv?days=N``, the ledger CSV (ledger_csv.py) of
every rig over the last N UTC calendar days, as ``m2p history --csv`` writes it, with the leases' payments the
history dated in those days from the wallet reader's reads of the chain, where the dashboard reads one
(History.lease_payments, wallet_view.payment_rows).

It reads the history and changes nothing; like every route it is served only past guard.py (a session or
``Authorization: Bearer``), so the file is the signed-in owner's alone.  It answers as an attachment, so a
browser saves it rather than showing it, and guard.py's ``nosniff`` keeps it CSV.  It is sent as it is written, a
few hundred rows at a time (ledger_csv.chunks), one rig's ledger read at a time: 1,000 rigs' 400 days, hundreds of
MB of CSV, are never held whole.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from miner2provider.core.inventory import Host
from miner2provider.dashboard.history import History
from miner2provider.detect.report import RigReport, stored_report
from miner2provider.timeshare.economics import Economics

from . import ledger_csv, views
from .state import DashboardState, days_of, latest_snapshots, state_of
from .wallet_view import payment_rows

MEDIA_TYPE = "text/csv; charset=utf-8"  # RFC 4180's type; the rigs' names and leases may be any UTF-8

Typed = Callable[[str, float, dict[str, Any] | None], RigReport | None]


def each_rig(history: History, hosts: list[Host], since: float, latest: dict[str, tuple[float, dict[str, Any]]],
             typed: Typed) -> Iterator[views.RigInput]:
    """Every host's ledger lines from ``since`` on (led by the line in force then; a line after now, a rig's clock
    ahead, still ends the one before), its latest report (``latest``, typed by ``typed``) and its node's status, one
    host at a time: the download holds one rig's ledger, not the fleet's."""
    nodes = history.nodes()
    for host in hosts:
        at, snap = latest.get(host.name, (0.0, None))
        yield views.RigInput(host.name, host.groups, (snap or {}).get("read_at"), snap,
                             tuple(history.ledger(host.name, since, math.inf)),
                             nodes.get(views.node_name(host.name, snap)), None, typed(host.name, at, snap))


def as_stored(rig: str, at: float, snapshot: dict[str, Any] | None) -> RigReport | None:
    """A report typed afresh (the CLI's: it reads each once)."""
    return stored_report(snapshot)


def export_csv(request: Request) -> Response:
    """Plain ``def``: Starlette runs it in its thread pool, so reading the history never holds the loop; the file's
    later chunks are written there too (StreamingResponse reads a plain iterator in the thread pool)."""
    state, days = state_of(request), days_of(request)
    since, until = ledger_csv.window(days, time.time())
    body = books(state, since, until)
    # The first chunk before any header is sent: a history that cannot be read (not a database, a newer m2p's)
    # is answered as an error, not as a 200 whose file stops short.
    first = next(body)
    name = f"m2p-ledger-{datetime.fromtimestamp(until, UTC).date().isoformat()}-{days}d.csv"
    return StreamingResponse(itertools.chain((first,), body), media_type=MEDIA_TYPE,
                             headers={"Content-Disposition": f'attachment; filename="{name}"'})


def books(state: DashboardState, since: float, until: float) -> Iterator[str]:
    """The file in chunks (ledger_csv.chunks), reading one rig's ledger at a time.  The body is written after the
    endpoint returned, so the generator opens the history and closes it itself: at its end, at an error, or when it
    is dropped (a client that left mid-file).  An error mid-file ends the generator with it; Starlette then cuts the
    transfer before its last chunk, so the client sees the file incomplete, and no word of the error is written
    into it."""
    with History(state.config.db) as history:
        yield from ledger_csv.chunks(book_rows(history, state.config.hosts, latest_snapshots(state, history),
                                               state.typed, state.config.economics, since, until))


def book_rows(history: History, hosts: list[Host], latest: dict[str, tuple[float, dict[str, Any]]], typed: Typed,
              economics: Economics, since: float, until: float) -> Iterator[list[str]]:
    """The books' rows (ledger_csv.rows), the download's and ``m2p history --csv``'s: every host's spans in [since,
    until), one rig's ledger read at a time, then the leases' payments the history keeps for the window."""
    pods: dict[str, list[str]] = {}
    rigs = each_rig(history, hosts, since, latest, typed)
    yield from ledger_csv.rows(noting_pods(rigs, pods), economics, since, until, payments(history, since, until, pods))


def noting_pods(rigs: Iterable[views.RigInput], pods: dict[str, list[str]]) -> Iterator[views.RigInput]:
    """``rigs`` as they come, noting in ``pods`` the lease pods each one's ledger in the window names."""
    for rig in rigs:
        pods[rig.name] = sorted({pod for line in rig.ledger for pod in line.leases})
        yield rig


def payments(history: History, since: float, until: float,
             rig_pods: dict[str, list[str]]) -> Iterator[ledger_csv.PaymentRow]:
    """The leases' payments the wallet reader's reads saw in [since, until) (none: no chain is read, or it saw none),
    each dated at the read that saw it and on the rig whose ledger in the window names the lease's pods.  A
    generator: ledger_csv.rows reads it once every rig's rows are out, when ``rig_pods`` names every rig's pods."""
    yield from payment_rows(history.lease_payments(since, until), rig_pods)


ROUTES = [Route("/export.csv", export_csv)]
