"""The dashboard's read of the provider's status against hostile answers on loopback (issue 55, point 5):
a server that is not HTTP, one that trickles its answer, one that redirects to another loopback port.  The
sweep goes on, the page says what went wrong, and the read ends within its deadline.

The servers are stand-ins for the provider's status port (gateway/rest/router.go answers GET /status) turned
hostile: raw sockets, so nothing in them is kinder than a real server could be."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

from starlette.testclient import TestClient
from test_dashboard import ECON, INVENTORY, TOKEN, sign_in  # tests/unit is on sys.path (no package)

from miner2provider.core import inventory
from miner2provider.dashboard.actions import Actions, Fleet
from miner2provider.dashboard.app import DashboardConfig, create_app
from miner2provider.detect.ssh import SshOptions
from miner2provider.market.akash import provider_status

HELD_S = 8.0  # how long a hostile server holds a connection at most (bounds the test on code without a deadline)


@contextlib.contextmanager
def serving(answer: Callable[[socket.socket], None]) -> Iterator[tuple[int, list[float]]]:
    """A loopback TCP server answering each connection with ``answer``: its port and when it was connected to."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    hits: list[float] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            hits.append(time.monotonic())
            threading.Thread(target=_answer, args=(conn, answer), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], hits
    finally:
        done.set()
        thread.join(5)
        listener.close()


def _answer(conn: socket.socket, answer: Callable[[socket.socket], None]) -> None:
    with conn:
        conn.settimeout(HELD_S)
        with contextlib.suppress(OSError):
            conn.recv(4096)  # the request
            answer(conn)


def garbage(conn: socket.socket) -> None:
    conn.sendall(b"\x16\x03\x01 no HTTP here \xff\xfe\r\n\r\n")


def trickle(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    start = time.monotonic()
    while time.monotonic() - start < HELD_S:  # a header line a byte at a time, never ending
        conn.sendall(b"X")
        time.sleep(0.5)


def redirect_to(port: int) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{port}/status\r\n"
                     "Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
    return answer


def test_a_trickled_answer_ends_at_the_reads_deadline():
    with serving(trickle) as (port, _):
        start = time.monotonic()
        state = provider_status.fetch(f"http://127.0.0.1:{port}/status", timeout_s=1.5)
        took = time.monotonic() - start
    assert took < 2.5, f"the read took {took:.1f} s with a 1.5 s deadline"
    assert state.error == "no whole answer within 1.5 s" and state.fields == {}


def test_a_redirect_is_not_followed_to_another_loopback_port():
    with serving(garbage) as (elsewhere, hits), serving(redirect_to(elsewhere)) as (port, _):
        state = provider_status.fetch(f"http://127.0.0.1:{port}/status", timeout_s=2)
        time.sleep(0.2)
    assert hits == [], "the redirect was followed"
    assert state.error == "HTTP 302 (a redirect: not followed)"


def test_an_answer_that_is_not_http_is_said_so():
    with serving(garbage) as (port, _):
        state = provider_status.fetch(f"http://127.0.0.1:{port}/status", timeout_s=2)
    assert state.error == "not an HTTP answer (BadStatusLine)" and "no HTTP here" not in state.error


@contextlib.contextmanager
def dashboard(tmp_path, port: int, sweeps: list[float]) -> Iterator[TestClient]:
    """The dashboard, signed in, sweeping every 0.2 s (each sweep noted in ``sweeps``) and asking the provider
    on ``port`` with a 3 s deadline."""
    (tmp_path / "rigs.yml").write_text(INVENTORY)
    hosts = list(inventory.load(tmp_path / "rigs.yml").hosts)
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda rig: rig))
    url = f"http://127.0.0.1:{port}/status"
    config = DashboardConfig(tmp_path / "h.sqlite3", hosts, ECON, actions, lambda chosen: sweeps.append(time.monotonic()),
                             lambda chosen: 0, 0.2, TOKEN, provider_label="Akash",
                             provider_status=lambda: provider_status.fetch(url, timeout_s=3))
    with TestClient(create_app(config), base_url="http://127.0.0.1:8477") as client:
        assert sign_in(client).status_code == 303
        yield client


def provider_said(client: TestClient, text: str, within_s: float) -> str:
    deadline = time.monotonic() + within_s
    while text not in (page := client.get("/").text) and time.monotonic() < deadline:
        time.sleep(0.1)
    return page[page.find('id="provider"'):][:600]


def test_a_provider_that_is_not_http_leaves_the_sweep_going_and_the_page_says_so(tmp_path):
    sweeps: list[float] = []
    with serving(garbage) as (port, _), dashboard(tmp_path, port, sweeps) as client:
        shown = provider_said(client, "not an HTTP answer", 5)
        assert "not an HTTP answer (BadStatusLine)" in shown, shown
        asked = len(sweeps)
        time.sleep(1)
        assert len(sweeps) >= asked + 3, "the sweeper stopped after the provider's answer"


def test_a_trickling_provider_holds_neither_the_sweep_nor_the_read_past_its_deadline(tmp_path):
    sweeps: list[float] = []
    with serving(trickle) as (port, hits), dashboard(tmp_path, port, sweeps) as client:
        deadline = time.monotonic() + 5
        while not hits and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hits, "the provider was not asked"
        time.sleep(1.5)  # the read is held by the trickle: the rigs are still swept meanwhile
        assert len([at for at in sweeps if at > hits[0]]) >= 4, "the sweep waited for the provider"
        shown = provider_said(client, "no whole answer within 3 s", 5)
        assert "no whole answer within 3 s" in shown, shown
