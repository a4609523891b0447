"""The dashboard's login against other users of the same machine (issue 55, point 7): wrong bearer tokens are
limited like wrong logins; one local user's wrong guesses never lock another out; a session cookie replayed
by another local user, or on another port, is refused; the cookie's name carries the dashboard's port.

Two local users cannot be made here without root, so ``peer.local_uid`` is replaced by a stand-in that says
which user each client port belongs to (the real lookup, Linux's /proc/net/tcp, is tested on its own below
and behind real uvicorn in test_dashboard_server.py)."""

from __future__ import annotations

import socket

import pytest
from starlette.testclient import TestClient
from test_dashboard import ECON, INVENTORY, OWN, TOKEN, sign_in  # tests/unit is on sys.path (no package)

from miner2provider.core import inventory
from miner2provider.dashboard import peer
from miner2provider.dashboard.actions import Actions, Fleet
from miner2provider.dashboard.app import DashboardConfig, create_app
from miner2provider.dashboard.sessions import FAILURES_IN_ALL, FAILURES_PER_CLIENT
from miner2provider.detect.ssh import SshOptions

OPERATOR, INTRUDER = ("127.0.0.1", 50001), ("127.0.0.1", 50002)  # one local user each (the stand-in's map)
USERS = {OPERATOR[1]: 1000, INTRUDER[1]: 1001}
COOKIE = "m2p-session-8477"


@pytest.fixture
def clients(tmp_path, monkeypatch):
    """The operator's browser and another local user's client on one dashboard (127.0.0.1:8477)."""
    monkeypatch.setattr(peer, "local_uid", lambda client, server: USERS.get(client[1]))
    (tmp_path / "rigs.yml").write_text(INVENTORY)
    hosts = list(inventory.load(tmp_path / "rigs.yml").hosts)
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda rig: rig))
    app = create_app(DashboardConfig(tmp_path / "h.sqlite3", hosts, ECON, actions, lambda chosen: None,
                                     lambda chosen: 0, 0, TOKEN))
    with TestClient(app, base_url="http://127.0.0.1:8477", client=OPERATOR) as operator:
        yield operator, TestClient(app, base_url="http://127.0.0.1:8477", client=INTRUDER)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_wrong_bearer_tokens_are_limited_like_wrong_logins(clients):
    _, intruder = clients
    for _ in range(FAILURES_PER_CLIENT):
        assert intruder.get("/api/rigs", headers=bearer("guess-" + "y" * 20)).status_code == 401
    limited = intruder.get("/api/rigs", headers=bearer("guess-" + "z" * 20))
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
    assert sign_in(intruder, "another-guess").status_code == 429  # one limit for both ways in


def test_another_local_users_flood_of_wrong_tokens_never_locks_the_operator_out(clients):
    operator, intruder = clients
    for n in range(FAILURES_IN_ALL + 5):  # past the per-user limit and past the old limit for all
        intruder.get("/api/rigs", headers=bearer(f"guess-{n:020d}"))
        sign_in(intruder, f"guess-{n:020d}")
    assert sign_in(intruder, TOKEN).status_code == 429  # the guesser waits, even with the right token
    assert operator.get("/api/rigs", headers=bearer(TOKEN)).status_code == 200
    assert sign_in(operator).status_code == 303


def test_a_session_cookie_replayed_by_another_local_user_is_refused(clients):
    operator, intruder = clients
    signed = sign_in(operator)
    name = signed.headers["set-cookie"].partition("=")[0]  # whatever the cookie is called (the next test)
    stolen = operator.cookies.get(name)
    assert signed.status_code == 303 and stolen and operator.get("/api/rigs").status_code == 200
    intruder.cookies.set(name, stolen)  # e.g. read from the operator's browser by a page on another port
    assert intruder.get("/api/rigs").status_code == 401
    # A non-browser client may forge the page's own Origin, but a POST by cookie still needs the session.
    forged = intruder.post("/api/actions", json={"rigs": ["rig01"], "action": "detect", "kind": "run"}, headers=OWN)
    assert forged.status_code == 401
    assert operator.get("/api/rigs").status_code == 200  # the operator's session is untouched by the attempts


def test_a_session_is_refused_on_another_port_and_its_cookie_names_the_port(clients, tmp_path):
    operator, _ = clients
    assert sign_in(operator).status_code == 303
    stolen = operator.cookies.get(COOKIE)
    app = operator.app
    elsewhere = TestClient(app, base_url="http://127.0.0.1:8478", client=OPERATOR)  # the same app, another port
    elsewhere.cookies.set("m2p-session-8478", stolen)
    assert elsewhere.get("/api/rigs", headers={"Host": "127.0.0.1:8478"}).status_code == 401
    tls = TestClient(app, base_url="https://127.0.0.1:8477", client=OPERATOR)
    cookie = tls.post("/login", data={"token": TOKEN}, headers={"Origin": "https://127.0.0.1:8477"},
                      follow_redirects=False).headers["set-cookie"]
    # __Host-: set only by a secure origin, with Path=/ and no Domain (RFC 6265bis 4.1.3.2); port in the name
    assert cookie.startswith("__Host-m2p-session-8477=") and "secure" in cookie.lower() and "path=/" in cookie.lower()


def test_the_local_user_of_a_loopback_connection_is_found():
    """The real lookup: this process's own connection is this user's; a connection that is not there is
    no one's; an address beyond loopback is never looked up."""
    import os

    with socket.create_server(("127.0.0.1", 0)) as listener, socket.create_connection(listener.getsockname()) as c:
        accepted, _ = listener.accept()
        with accepted:
            assert peer.local_uid(c.getsockname(), listener.getsockname()) == os.getuid()
            assert peer.local_uid(("127.0.0.1", 1), listener.getsockname()) is None
    assert peer.local_uid(("192.0.2.7", 50000), ("192.0.2.1", 8477)) is None
    assert peer.local_uid(("testclient", 50000), ("127.0.0.1", 8477)) is None
