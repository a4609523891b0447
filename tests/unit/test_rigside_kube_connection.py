"""The agent's API calls share one connection (HTTP/1.1 keep-alive: one TLS handshake while the server keeps
it, not one per call), kept from tick to tick in the agent's own pool; outside a tick each call has its own; a
kept connection the server closed meanwhile (an idle timeout) is opened again once."""

from __future__ import annotations

import http.server
import json

import pytest

from m2p_sandbox.served import serve_in_background
from miner2provider.rigside import kube


class Counting(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections = 0
    drop_after_one = False  # close the connection after each answer without saying so (an idle timeout)

    def setup(self) -> None:
        type(self).connections += 1
        super().setup()

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps({"metadata": {"name": self.path.rsplit("/", 1)[-1]}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if type(self).drop_after_one:
            self.close_connection = True


@pytest.fixture
def server():
    Counting.connections, Counting.drop_after_one = 0, False
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    serve_in_background(httpd)
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def client(server, tmp_path) -> kube.KubeClient:
    (tmp_path / "token").write_text("t\n")
    return kube.KubeClient(f"http://127.0.0.1:{server.server_port}", str(tmp_path / "token"))


def test_one_connection_a_tick_and_one_per_call_outside(server, tmp_path):
    api = client(server, tmp_path)
    with kube.one_connection():
        assert [api.node(n)["metadata"]["name"] for n in ("a", "b", "c")] == ["a", "b", "c"]
    assert Counting.connections == 1
    for n in ("d", "e"):
        api.node(n)
    assert Counting.connections == 3


def test_the_agents_pool_keeps_one_connection_from_tick_to_tick(server, tmp_path):
    api, pool = client(server, tmp_path), {}
    for tick in range(3):
        with kube.one_connection(pool):
            assert api.node(f"t{tick}")["metadata"]["name"] == f"t{tick}"
    assert Counting.connections == 1 and len(pool) == 1
    Counting.drop_after_one = True  # from now on the server closes it after each answer, unsaid (an idle timeout)
    with kube.one_connection(pool):
        api.node("a")  # on the kept connection, which the server then closes
    with kube.one_connection(pool):
        assert api.node("b")["metadata"]["name"] == "b"  # the kept one is found closed: opened again, once
    assert Counting.connections == 2 and len(pool) == 1


def test_a_kept_connection_the_server_closed_is_opened_again(server, tmp_path):
    api = client(server, tmp_path)
    Counting.drop_after_one = True
    with kube.one_connection():
        assert [api.node(n)["metadata"]["name"] for n in ("a", "b")] == ["a", "b"]
    assert Counting.connections == 2


def test_a_server_gone_is_an_api_error_inside_a_tick_too(server, tmp_path):
    api = client(server, tmp_path)
    server.shutdown()
    server.server_close()
    with kube.one_connection(), pytest.raises(kube.ApiError, match="GET /api/v1/nodes/a"):
        api.node("a")


def test_a_kept_connection_of_an_older_tls_context_is_closed_when_a_new_one_opens(server, tmp_path):
    """k3s renewed the kubelet's certificate: a new TLS context, so a new connection; the old one is closed."""
    closed = []

    class Old:
        def close(self) -> None:
            closed.append(True)

    api = client(server, tmp_path)
    pool = {("http", "127.0.0.1", server.server_port, 12345): Old()}
    with kube.one_connection(pool):
        api.node("a")
    assert closed == [True] and [k[3] for k in pool] == [id(None)]


def test_the_agents_kept_tls_connection_survives_the_api_server_ending_it_and_dies_with_the_server(tmp_path):
    """Over TLS, as every k3s API is: the server ends the kept connection (kube-apiserver restarting drops every
    connection; the stand-in ends its open ones): the next tick opens one anew, once, and reads.  A stand-in that
    is closed answers nothing more on a connection it had kept (a real server gone takes them all with it)."""
    from m2p_sandbox.kube_api import KubeApiStandin

    api = KubeApiStandin(tls=True)
    try:
        api.add_node("rig01", "tok")
        assert api.authority is not None
        (tmp_path / "ca.crt").write_bytes(api.authority.pem)
        (tmp_path / "token").write_text("tok\n")
        client_ = kube.KubeClient(api.url, str(tmp_path / "token"), str(tmp_path / "ca.crt"))
        pool: dict = {}
        with kube.one_connection(pool):
            assert client_.node("rig01")["metadata"]["name"] == "rig01"
        api.server.end_connections()
        with kube.one_connection(pool):
            assert client_.node("rig01")["metadata"]["name"] == "rig01"
        assert len(pool) == 1
    finally:
        api.close()
    with kube.one_connection(pool), pytest.raises(kube.ApiError):
        client_.node("rig01")
