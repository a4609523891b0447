"""The dashboard's app behind real uvicorn on loopback (the server `m2p dashboard` runs, with its protocol
and limits): a slow client is dropped, a huge body is refused unread, the server's memory stays put."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from starlette.applications import Starlette
from test_dashboard import INVENTORY, TOKEN  # tests/unit is on sys.path (no package)

from miner2provider.core import inventory
from miner2provider.dashboard import limits
from miner2provider.dashboard.actions import Actions, Fleet
from miner2provider.dashboard.app import DashboardConfig, create_app
from miner2provider.detect.ssh import SshOptions
from miner2provider.timeshare import economics


@pytest.fixture
def server(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "HEADER_S", 1.0)
    (tmp_path / "rigs.yml").write_text(INVENTORY)
    hosts = inventory.load(tmp_path / "rigs.yml").hosts
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda rig: rig))
    app = create_app(DashboardConfig(tmp_path / "h.db", list(hosts), economics.NONE, actions, lambda chosen: None,
                                     lambda chosen: 0, 0, TOKEN))
    with serving(app) as port:
        yield port


@contextlib.contextmanager
def serving(app: Starlette) -> Iterator[int]:
    """``app`` behind real uvicorn on a free loopback port, with the limits `m2p dashboard` serves it with."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                        http=limits.HeaderDeadline, limit_concurrency=limits.MAX_CONNECTIONS))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.started, "uvicorn did not start"
    try:
        yield port
    finally:
        srv.should_exit = True
        thread.join(10)


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the server closed ``sock`` while the client dripped a byte every 0.2 s, or None."""
    start = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - start < seconds:
        try:
            sock.sendall(b"X")
            if sock.recv(1024) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - start
    return None


def test_a_client_dripping_its_headers_is_dropped(server):
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(b"GET /api/rigs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        took = closed_within(sock, 5)
    assert took is not None and took < 3, took
    with socket.create_connection(("127.0.0.1", server)) as sock:  # the server still answers others
        sock.sendall(b"GET /api/rigs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 401")


def test_a_400_mib_body_is_refused_unread(server):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for path in ("/login", "/api/actions"):
        with socket.create_connection(("127.0.0.1", server)) as sock:
            # The headers alone: the answer comes before any of the body (sending a first MiB raced the
            # server's close on a loaded CI: a broken pipe, the refusal working as meant).
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{server}\r\nOrigin: http://127.0.0.1:{server}\r\n"
                         f"Content-Type: application/json\r\nContent-Length: {400 << 20}\r\n\r\n".encode())
            assert sock.recv(100).startswith(b"HTTP/1.1 413")
    # chunked, no length given: refused once the bytes pass the limit
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{server}\r\nOrigin: http://127.0.0.1:{server}\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n".encode())
        sock.sendall((b"400\r\n" + b"x" * 1024 + b"\r\n") * 8)  # 8 KiB at once: read whole, no reset
        assert sock.recv(100).startswith(b"HTTP/1.1 413")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50 << 10  # KiB: under 50 MiB more


def test_a_session_is_the_local_user_s_that_opened_it_over_real_connections(server, monkeypatch):
    """Behind real uvicorn the session is bound through the kernel's own lookup (/proc/net/tcp): this user's
    next connection has it; the same cookie from a connection of another user (the lookup answering another
    uid: a second user cannot be made here without root) does not."""
    import http.client

    from miner2provider.dashboard import peer

    def ask(method: str, path: str, body: str = "", headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        connection = http.client.HTTPConnection("127.0.0.1", server, timeout=10)  # a new connection each time
        connection.request(method, path, body, {"Origin": f"http://127.0.0.1:{server}", **(headers or {})})
        reply = connection.getresponse()
        reply.read()
        connection.close()
        return reply

    real, found = peer.local_uid, []
    monkeypatch.setattr(peer, "local_uid", lambda client, to: found.append(real(client, to)) or found[-1])
    signed = ask("POST", "/login", f"token={TOKEN}", {"Content-Type": "application/x-www-form-urlencoded"})
    cookie = signed.getheader("set-cookie", "").partition(";")[0]
    assert signed.status == 303 and cookie.startswith(f"m2p-session-{server}=")
    assert ask("GET", "/api/rigs", headers={"Cookie": cookie}).status == 200
    assert found and set(found) == {os.getuid()}, found  # the kernel named this user for each connection
    monkeypatch.setattr(peer, "local_uid", lambda client, to: (real(client, to) or 0) + 1)
    assert ask("GET", "/api/rigs", headers={"Cookie": cookie}).status == 401


def test_one_keep_alive_connection_looks_its_user_up_once(server, monkeypatch):
    """The kernel's table is read whole at a look-up: once per connection, not once per request."""
    import http.client

    from miner2provider.dashboard import peer

    real, found = peer.local_uid, []
    monkeypatch.setattr(peer, "local_uid", lambda client, to: found.append(real(client, to)) or found[-1])
    connection = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    for _ in range(5):  # bearer requests: each one is limited by its user
        connection.request("GET", "/api/rigs", headers={"Authorization": f"Bearer {TOKEN}"})
        reply = connection.getresponse()
        assert reply.status == 200 and reply.read()
    connection.close()
    assert found == [os.getuid()], found
    again = http.client.HTTPConnection("127.0.0.1", server, timeout=10)  # a new connection is looked up anew
    again.request("GET", "/api/rigs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert again.getresponse().status == 200
    again.close()
    assert found == [os.getuid()] * 2, found


def test_a_port_another_user_reuses_after_the_close_does_not_inherit_the_users_session(server, monkeypatch):
    """ATTACK: the operator signs in from a client port, the connection closes, another local user connects from
    the same port (the same ends: a port is free once its socket is gone) with the operator's cookie.  The user
    kept for the first connection must not be the second's.  Stand-in look-up: which user holds the port now."""
    import http.client

    from miner2provider.dashboard import peer

    holder = {"uid": 1000}
    monkeypatch.setattr(peer, "local_uid", lambda client, to: holder["uid"])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    own = {"Origin": f"http://127.0.0.1:{server}"}
    operator = http.client.HTTPConnection("127.0.0.1", server, timeout=10, source_address=("127.0.0.1", port))
    operator.request("POST", "/login", f"token={TOKEN}", {**own, "Content-Type": "application/x-www-form-urlencoded"})
    signed = operator.getresponse()
    signed.read()
    cookie = signed.getheader("set-cookie", "").partition(";")[0]
    held = operator.sock.dup()  # open until the server has closed: its close comes first (no TIME_WAIT here)
    operator.request("GET", "/api/rigs", headers={"Cookie": cookie, "Connection": "close"})  # the server closes
    reply = operator.getresponse()
    assert signed.status == 303 and reply.status == 200 and reply.read()
    operator.close()
    with held:
        held.settimeout(5)
        while held.recv(4096):
            pass
    holder["uid"] = 1001  # the port is another user's now
    deadline = time.monotonic() + 5
    while True:  # until the kernel lets the port connect to the dashboard again
        intruder = http.client.HTTPConnection("127.0.0.1", server, timeout=10, source_address=("127.0.0.1", port))
        try:
            intruder.connect()
            break
        except OSError:
            intruder.close()
            assert time.monotonic() < deadline, "the client port could not be used again"
            time.sleep(0.1)
    assert intruder.sock.getsockname()[1] == port
    intruder.request("GET", "/api/rigs", headers={"Cookie": cookie})
    assert intruder.getresponse().status == 401
    intruder.close()
