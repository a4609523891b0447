"""The controller's reads of what answers outside the rigs, against hostile answers on loopback (issue 55): the RPC
node's ``/status`` (outside.rpc_status, for `m2p provider check`) and the provider's own status (provider_status,
for the dashboard) share one reader (core/deadline.py), which ends at its deadline however the answer trickles,
follows no redirect, says what a non-HTTP answer is without quoting it and reads no more than it may.

The servers are test_dashboard_provider.py's raw-socket stand-ins (nothing in them kinder than a real server),
plus two that answer too much."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest
from test_dashboard_provider import garbage, redirect_to, serving, trickle  # tests/unit is on sys.path

from miner2provider.core import deadline
from miner2provider.market.akash import outside, provider_status

Reader = Callable[[int, float], str]  # (port, deadline in s) -> the reader's error, "" for none


def rpc(port: int, timeout_s: float) -> str:
    said = outside.rpc_status(f"http://127.0.0.1:{port}", timeout_s=timeout_s)
    return said if isinstance(said, str) else ""


def status_port(port: int, timeout_s: float) -> str:
    return provider_status.fetch(f"http://127.0.0.1:{port}/status", timeout_s=timeout_s).error


READERS = pytest.mark.parametrize("read", [rpc, status_port], ids=["rpc node", "provider status"])


def endless_body(conn: socket.socket) -> None:
    """A 200 with no length whose body never ends, as fast as the reader takes it."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
    chunk = b"[" * 65536
    while True:
        conn.sendall(chunk)


def long_header(conn: socket.socket) -> None:
    """A header line past what any HTTP client takes (http.client: 65,536 bytes), sent at once."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 70_000 + b"\r\n\r\n{}")


@READERS
def test_a_trickled_answer_ends_at_the_deadline(read: Reader):
    with serving(trickle) as (port, _):
        start = time.monotonic()
        said = read(port, 1.5)
        took = time.monotonic() - start
    assert took < 2.5, f"the read took {took:.1f} s with a 1.5 s deadline"
    assert said.endswith("no whole answer within 1.5 s"), said


@READERS
def test_a_redirect_to_another_loopback_port_is_not_followed(read: Reader):
    with serving(garbage) as (elsewhere, hits), serving(redirect_to(elsewhere)) as (port, _):
        said = read(port, 3)
        time.sleep(0.2)
    assert hits == [], "the redirect was followed"
    assert said.endswith("HTTP 302 (a redirect: not followed)"), said


@READERS
def test_an_answer_that_is_not_http_is_said_so_without_quoting_it(read: Reader):
    with serving(garbage) as (port, _):
        said = read(port, 3)
    assert said.endswith("not an HTTP answer (BadStatusLine)") and "no HTTP here" not in said, said


@READERS
def test_an_endless_body_is_read_no_further_than_the_limit(read: Reader):
    with serving(endless_body) as (port, _):
        said = read(port, 5)
    limit = outside.MAX_STATUS_BYTES if read is rpc else provider_status.MAX_BYTES
    assert said.endswith(f"the answer is larger than {limit:,} bytes"), said


@READERS
def test_a_header_line_longer_than_http_takes_is_said_so(read: Reader):
    with serving(long_header) as (port, _):
        said = read(port, 3)
    assert said.endswith("not an HTTP answer (LineTooLong)"), said


def test_the_rpc_nodes_errors_name_the_url_asked():
    with serving(garbage) as (port, _):
        said = rpc(port, 3)
    assert said == f"http://127.0.0.1:{port}/status: not an HTTP answer (BadStatusLine)"


def test_a_url_the_reader_cannot_ask_is_a_reason_not_an_exception():
    for url, reason in [("ftp://127.0.0.1/status", "not an http:// or https:// URL"),
                        ("http://127.0.0.1:port/status", "not a URL with a port number"),
                        ("http://127.0.0.1:1/st atus", "not a URL that can be sent (a space or control character)"),
                        ("http://127.0.0.1:1/status", "no answer (Connection refused)")]:
        with pytest.raises(deadline.NoAnswer) as caught:
            deadline.exchange(url, 2, 1024)
        assert str(caught.value) == reason, url
