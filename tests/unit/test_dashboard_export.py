"""The books as a download (issue 57, dashboard/export.py): ``GET /export.csv`` served by the dashboard's own app
with its guard, the same file ``m2p history --csv`` writes, to the signed-in owner only."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import sqlite3
import time
import tracemalloc
from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient
from test_dashboard import ECON, INVENTORY, TOKEN, report, sign_in  # tests/unit is on sys.path (no package)

from miner2provider.core import inventory
from miner2provider.dashboard import export, ledger_csv
from miner2provider.dashboard.actions import Actions, Fleet
from miner2provider.dashboard.app import DashboardConfig, create_app
from miner2provider.dashboard.collect import snapshot
from miner2provider.dashboard.history import History
from miner2provider.detect.report import status_rows
from miner2provider.detect.ssh import SshOptions
from miner2provider.market.wallet import LeaseRecord, WalletRead
from miner2provider.rigside.ledger import Entry

HOUR = 3600.0


@pytest.fixture
def served(tmp_path):
    """Two rigs: four hours idle-mining, then an hour offered (rig01) or leased (rig02, ``lease/job``), read now."""
    (tmp_path / "rigs.yml").write_text(INVENTORY)
    hosts = inventory.load(tmp_path / "rigs.yml").hosts
    db = tmp_path / "h.sqlite3"
    now = time.time()
    reports = [report("rig01"), report("rig02", ("lease/job",))]
    with History(db) as h:
        for r, row, leases in zip(reports, status_rows(reports, {}), ((), ("lease/job",)), strict=True):
            h.add_snapshot(r.name, now, {**snapshot(r, row), "read_at": now})
            h.add_ledger(r.name, [Entry(now - 5 * HOUR, "idle-mining", gpus=1),
                                  Entry(now - HOUR, "leasing", gpus=1, leases=leases, leased=len(leases))], seen_at=now)
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda name: name))

    @contextlib.contextmanager
    def client(signed_in=True, wallet=None):
        app = create_app(DashboardConfig(db, list(hosts), ECON, actions, lambda chosen: None, lambda chosen: 0, 0,
                                         TOKEN))
        assert any(getattr(route, "path", "") == "/export.csv" for route in app.routes)  # app.py serves it
        if wallet is not None:
            app.state.wallet.keep(wallet)  # what the wallet reader's thread keeps after a read of the chain
        with TestClient(app, base_url="http://127.0.0.1:8477") as c:
            if signed_in:
                assert sign_in(c).status_code == 303
            yield c
    return client, now


def test_the_download_is_the_ledger_as_csv_for_the_pages_days(served):
    client, now = served
    with client() as c:
        answer = c.get("/export.csv?days=2")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/csv; charset=utf-8"
    today = datetime.fromtimestamp(now, UTC).date().isoformat()
    assert answer.headers["content-disposition"] == f'attachment; filename="m2p-ledger-{today}-2d.csv"'
    assert answer.headers["x-content-type-options"] == "nosniff"  # the guard's headers on it too
    assert answer.text.startswith(",".join(ledger_csv.COLUMNS) + "\r\n")
    rows = list(csv.DictReader(io.StringIO(answer.text, newline="")))
    assert [(r["rig"], r["mode"], r["leases"], r["cards_leased"]) for r in rows] == [
        ("rig01", "idle-mining", "", "0"), ("rig01", "leasing", "", "0"),
        ("rig02", "idle-mining", "", "0"), ("rig02", "leasing", "lease/job", "1")]
    assert sum(float(r["hours"]) for r in rows) == pytest.approx(10.0, abs=1e-5)
    assert [r["amount"] for r in rows] == ["0.20", "0.00", "0.20", "0.25"]  # 4 h x 1.20 / 24; 1 h x 0.25
    assert all(abs(datetime.fromisoformat(r["end"]).timestamp() - now) < 1e-3 for r in rows[1::2])


def test_the_download_needs_the_session_or_the_token_like_every_route(served):
    """ATTACK: the books (every rig, lease and amount) asked for without signing in, with a wrong token, from a
    rebinding DNS name, or with a window out of range.  The guard covers the whole app, so this holds the route to
    it: a route mounted past the guard (its own app, a mount without the middleware) would fail here."""
    client, _ = served
    with client(signed_in=False) as c:
        anonymous = c.get("/export.csv", follow_redirects=False)
        assert anonymous.status_code == 303 and anonymous.headers["location"] == "/login"
        assert "rig01" not in anonymous.text
        assert c.get("/export.csv", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.get("/export.csv", headers={"Authorization": f"Bearer {TOKEN}",
                                             "Host": "rebind.example:8477"}).status_code == 421
        by_token = c.get("/export.csv", headers={"Authorization": f"Bearer {TOKEN}"})
        assert by_token.status_code == 200 and "rig02" in by_token.text
        assert c.get("/export.csv?days=0", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 400


def test_the_download_adds_the_leases_payments_the_wallet_readers_reads_saw_in_its_days(served, tmp_path):
    """Three reads of the chain kept in the history: the lease whose pods run in namespace ``lease`` (rig02's ledger
    names ``lease/job``) had withdrawn 1.5 AKT when first read three days ago, 2.1 two hours ago and 2.4 a minute
    ago; one in a namespace no rig's ledger names, 0.2 AKT when first read two hours ago; a lease that paid nothing
    has no row.  Over the last 2 days: the payments dated at the reads in them, the first read's out of the window.
    The lease ids are the chain's (a tenant picks none of them, but the guard holds for any text)."""
    client, now = served

    def lease(lease_id, namespace, withdrawn):
        return LeaseRecord(lease_id, "akash1tenant", namespace, "running", "active", "", 1.0, withdrawn, 0.3,
                           "open", 5.0)

    with History(tmp_path / "h.sqlite3") as h:  # what the wallet reader's thread kept (wallet_view.recording)
        h.record_withdrawals(now - 3 * 24 * HOUR, [lease("akash1tenant/10/1/1", "lease", 1.5)])
        h.record_withdrawals(now - 2 * HOUR, [lease("akash1tenant/10/1/1", "lease", 2.1),
                                              lease("akash1tenant/11/1/1", "gone", 0.2),
                                              lease("akash1tenant/12/1/1", "lease", 0.0)])
        h.record_withdrawals(now - 60, [lease("akash1tenant/10/1/1", "lease", 2.4)])
    with client() as c:
        rows = list(csv.DictReader(io.StringIO(c.get("/export.csv?days=2").text, newline="")))
    paid = [(r["start"], r["rig"], r["leases"], round(float(r["amount"]), 9), r["currency"], r["lease_rate"],
             r["hours"]) for r in rows if r["record"] == "payment"]
    at = [ledger_csv._iso(now - 2 * HOUR), ledger_csv._iso(now - 60)]
    assert paid == [(at[0], "rig02", "akash1tenant/10/1/1", 0.6, "AKT", "0.3", "2.000000"),  # by time, then lease
                    (at[0], "", "akash1tenant/11/1/1", 0.2, "AKT", "0.3", "0.666667"),  # rig "": no ledger names it
                    (at[1], "rig02", "akash1tenant/10/1/1", 0.3, "AKT", "0.3", "1.000000")]
    assert [r["record"] for r in rows] == ["ledger"] * 4 + ["payment"] * 3
    assert "before m2p first read the lease" in rows[5]["basis"] and "previous read" in rows[4]["basis"]


def test_the_fleet_page_and_the_api_show_the_wallet_the_reader_last_read_and_link_the_books(served):
    """The wallet section (wallet_view) on the fleet page and at /api/wallet, once the reader has read the chain;
    the page links the CSV; /api/wallet, like every route, needs the session or the token."""
    client, now = served
    read = WalletRead(now - 60, "akash1provider", "AKT", 12.5, (
        LeaseRecord("akash1tenant/10/1/1", "akash1tenant", "lease", "running", "active", "", 3.0, 1.5, 0.3, "open",
                    5.0),), None)
    with client(wallet=read) as c:
        c.app.state.wallet.configured = True  # a provider file naming a REST node (cli/dashboard.py sets it)
        page = c.get("/").text
        api = c.get("/api/wallet").json()
    assert api["configured"], api
    assert 'id="wallet-balance">12.500000</b> AKT' in page
    assert 'href="/export.csv?days=7" download' in page
    assert api["balance"] == "12.500000" and api["running_count"] == 1 and api["address"] == "akash1provider"
    with client(signed_in=False) as c:
        assert c.get("/api/wallet", follow_redirects=False).status_code in (303, 401)


# -- a large download: streamed, in bounded memory ------------------------------------------

RIGS, LINES = 100, 200  # 20,000 ledger spans: about 3.5 MB of CSV
EVERY = 20 * 60.0  # a ledger line every 20 minutes: 200 of them fit in the last 4 UTC days whatever the hour


@pytest.fixture
def fleet(tmp_path):
    """RIGS rigs, each with LINES ledger lines (mining and leasing by turns) and its report, read now; a client of
    the dashboard's app that signs in by the token."""
    (tmp_path / "rigs.yml").write_text("all:\n  hosts:\n" + "".join(
        f"    rig{i:03}: {{ansible_host: 10.0.{i // 250}.{i % 250 + 1}}}\n" for i in range(RIGS)))
    hosts = inventory.load(tmp_path / "rigs.yml").hosts
    db = tmp_path / "h.sqlite3"
    now = time.time()
    with History(db) as h:
        for host in hosts:
            r = report(host.name)
            h.add_snapshot(host.name, now, {**snapshot(r, status_rows([r], {})[0]), "read_at": now})
            h.add_ledger(host.name, [Entry(now - (LINES - n) * EVERY, "leasing", gpus=1, leases=(f"{host.name}/job",),
                                           leased=1) if n % 2 else Entry(now - (LINES - n) * EVERY, "mining", gpus=1)
                                     for n in range(LINES)], seen_at=now)
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda name: name))
    app = create_app(DashboardConfig(db, list(hosts), ECON, actions, lambda chosen: None, lambda chosen: 0, 0, TOKEN))
    return app, db, hosts


BEARER = {"Authorization": f"Bearer {TOKEN}"}


def whole_file(db, hosts, day):
    """The file as the whole-file writer wrote it before the download streamed: every row into one buffer, for the
    window of 4 days up to ``day`` (the download's file name's)."""
    since, until = ledger_csv.window(4, datetime.fromisoformat(f"{day}T12:00:00+00:00").timestamp())[0], time.time()
    with History(db) as history:
        inputs = list(export.each_rig(history, hosts, since, history.latest_snapshots(), export.as_stored))
    out = io.StringIO(newline="")
    csv.writer(out).writerows(ledger_csv.rows(inputs, ECON, since, until))
    return out.getvalue().encode()


def test_a_large_download_comes_in_chunks_in_bounded_memory_and_is_the_whole_file(fleet):
    """20,000 spans: the server sends the file as it writes it, a few hundred rows a chunk, and holds about one chunk
    and one rig's ledger, not the fleet's ledger and the file (which it did, ~4x the file's size, before)."""
    app, db, hosts = fleet
    with TestClient(app, base_url="http://127.0.0.1:8477") as c:
        assert c.get("/export.csv?days=1", headers=BEARER).status_code == 200  # the reports' cache, as any page fills
        tracemalloc.start()
        try:
            with c.stream("GET", "/export.csv?days=4", headers=BEARER) as answer:
                digest, size, chunks = hashlib.sha256(), 0, 0
                for chunk in answer.iter_raw():
                    digest.update(chunk)
                    size, chunks = size + len(chunk), chunks + 1
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert answer.status_code == 200 and answer.headers["content-type"] == "text/csv; charset=utf-8"
    day = answer.headers["content-disposition"].removeprefix('attachment; filename="m2p-ledger-')[:10]
    assert answer.headers["content-disposition"] == f'attachment; filename="m2p-ledger-{day}-4d.csv"'
    whole = whole_file(db, hosts, day)
    assert whole.count(b"\r\n") == 1 + RIGS * LINES and size == len(whole) > 3_000_000
    assert digest.hexdigest() == hashlib.sha256(whole).hexdigest()
    assert chunks > 1, "the file came in one piece"
    assert peak < size / 4, f"{peak:,} bytes at the peak for a file of {size:,}"  # ~14 MB before it streamed
    assert chunks >= (1 + RIGS * LINES) // ledger_csv.CHUNK_ROWS


def test_an_error_before_the_file_is_an_error_answer_and_one_mid_file_cuts_it_without_a_word_of_it(fleet, tmp_path,
                                                                                                 monkeypatch):
    """The history fails after 50 rigs' ledgers, with a message that holds a secret: the rows sent so far arrive,
    then the transfer is cut (the app's error reaches the server, which closes the connection before the last chunk:
    the download is seen as incomplete), and neither the message nor a traceback is in what arrived.  A history that
    cannot be read at all is an error answer before any row, not a 200 whose file stops short."""
    app, db, _ = fleet
    secret, read = "pw-Sup3rSecret!", History.ledger

    def failing(history, rig, since, until):
        if rig >= "rig050":
            raise sqlite3.OperationalError(f"disk I/O error near {secret}")
        return read(history, rig, since, until)

    monkeypatch.setattr(History, "ledger", failing)
    arrived = []
    with TestClient(app, base_url="http://127.0.0.1:8477") as c, c.stream("GET", "/export.csv?days=4",
                                                                           headers=BEARER) as answer:
        assert answer.status_code == 200
        with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
            arrived.extend(answer.iter_raw())
    text = b"".join(arrived).decode()
    rows = list(csv.DictReader(io.StringIO(text[:text.rindex("\r\n") + 2], newline="")))
    assert len(rows) >= ledger_csv.CHUNK_ROWS and {r["rig"] for r in rows} <= {f"rig{i:03}" for i in range(50)}
    assert secret not in text and "Traceback" not in text and "disk I/O" not in text
    monkeypatch.undo()
    db.write_bytes(b"not a database, or a newer m2p's")
    with TestClient(app, base_url="http://127.0.0.1:8477", raise_server_exceptions=False) as c:
        broken = c.get("/export.csv?days=4", headers=BEARER)
    assert broken.status_code == 500 and "rig0" not in broken.text and str(tmp_path) not in broken.text
