"""The chain client (market/akash/chain.py) against the STAND-IN node REST API (sandbox akash_rest.py) on loopback,
fed by the stand-in chain's leases as the reclaimer's tests drive them: the wallet's balance, each lease's escrow
and who closed it, AEP-86's completion rate, pages, an older node, and hostile answers (core/deadline.py's reader:
a trickle ends at the whole read's deadline, no redirect, no server text, no more than the cap)."""

from __future__ import annotations

import hashlib
import json
import socket
import time

import pytest
from test_dashboard_provider import garbage, redirect_to, serving, trickle  # tests/unit is on sys.path

from m2p_sandbox.akash_chain import ChainStandin
from m2p_sandbox.akash_node import RpcStandin
from m2p_sandbox.akash_rest import RestStandin
from miner2provider.market.akash import address, chain
from miner2provider.market.wallet import WalletRead

PROVIDER = address.encode(bytes(range(20)))
KEY = "-----BEGIN TENDERMINT PRIVATE KEY-----\nstand-in\n"
TENANTS = [address.encode(bytes([n]) * 20) for n in range(1, 30)]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def farm() -> tuple[ChainStandin, Clock]:
    """Four leases: one running, one the tenant closed, one the provider closed, one reclaimed then closed."""
    clock = Clock()
    node = ChainStandin(clock=clock)
    node.add_provider(PROVIDER, KEY)
    signer = hashlib.sha256(KEY.encode()).hexdigest()
    node.create_lease(TENANTS[0], 11, PROVIDER, None)
    tenant = node.create_lease(TENANTS[1], 12, PROVIDER, None)
    node.tenant_close(tenant.key)
    closed = node.create_lease(TENANTS[2], 13, PROVIDER, None)
    assert node.deliver("close", closed.key, signer, reason=10000)["code"] == 0
    reclaimed = node.create_lease(TENANTS[3], 14, PROVIDER, 3600.0)
    assert node.deliver("start-reclaim", reclaimed.key, signer, reason=10002)["code"] == 0
    clock.now += 3600 + 60
    assert node.deliver("close", reclaimed.key, signer, reason=10002)["code"] == 0
    return node, clock


@pytest.fixture
def rest():
    node, _ = farm()
    served = RestStandin(node)
    served.fund(PROVIDER, 12_345_678)
    keys = list(node.leases)
    served.pay(node.leases[keys[0]], rate="6.000000000000000000", balance="5000000.000000000000000000",
               withdrawn="2500000", created_at=1000)
    served.pay(node.leases[keys[1]], rate="3.000000000000000000", withdrawn="600000", created_at=500, closed_on=800)
    yield served
    served.close()


def test_the_wallet_and_every_lease_are_read_in_the_chains_shapes(rest):
    read = chain.read(rest.url, PROVIDER, price=0.5, price_source="provider.yml:9", now=42.0)
    assert read.errors == ()
    assert (read.address, read.currency, read.balance, read.balance_usd) == (PROVIDER, "AKT", 12.345678, 6.172839)
    by_tenant = {lease.tenant: lease for lease in read.leases}
    running = by_tenant[TENANTS[0]]
    assert (running.status, running.state, running.closed_by, running.payment_state) == ("running", "active", "",
                                                                                          "open")
    assert (running.escrowed, running.withdrawn) == (5.0, 2.5)
    assert running.rate_per_hour == pytest.approx(6 * 3600 / 6.117 / 1e6)  # 6 uakt a block, a block per 6.117 s
    assert running.hours == pytest.approx((rest.chain.height - 1000) * 6.117 / 3600)  # to the latest block's height
    assert by_tenant[TENANTS[1]].hours == pytest.approx(300 * 6.117 / 3600)  # created_at 500 to closed_on 800
    assert [by_tenant[t].closed_by for t in TENANTS[1:4]] == ["tenant", "provider", "reclamation"]
    assert all(by_tenant[t].payment_state == "closed" for t in TENANTS[1:4])
    assert running.id == f"{TENANTS[0]}/11/1/1/{PROVIDER}" and running.namespace == chain.namespace(running.id)
    done = read.completion
    assert done is not None and (done.total, done.terminated_by_provider, done.judged) == (4, 2, False)
    assert done.rate == 0.5
    assert any(p.startswith("/cosmos/bank/v1beta1/balances/") and p.endswith("/by_denom?denom=uakt")
               for p in rest.paths)
    assert any(p.startswith("/akash/market/v1beta5/leases/list?filters.provider=") for p in rest.paths)


def test_a_leases_namespace_is_the_providers_base32hex_of_its_sha224():
    """akash-network/provider cluster/util LeaseIDToNamespace: Go's base32.HexEncoding (RFC 4648 base32hex) without
    padding, lower case, of sha256.Sum224 of LeaseID.String(); 45 characters, a DNS-1123 label."""
    lease = f"{TENANTS[0]}/11/1/1/{PROVIDER}"
    digest = hashlib.sha224(lease.encode()).digest()
    bits = "".join(f"{byte:08b}" for byte in digest) + "0" * 4  # 224 bits, padded to 45 five-bit groups
    expected = "".join("0123456789abcdefghijklmnopqrstuv"[int(bits[i:i + 5], 2)] for i in range(0, 225, 5))
    assert chain.namespace(lease) == expected and len(expected) == 45


def test_every_page_of_leases_is_read():
    node = ChainStandin()
    for n in range(7):
        node.create_lease(TENANTS[n], 100 + n, PROVIDER, None)
    node.create_lease(TENANTS[8], 200, TENANTS[9], None)  # another provider's lease: not asked for
    served = RestStandin(node, page_size=3)
    try:
        read = chain.read(served.url, PROVIDER)
    finally:
        served.close()
    assert read.errors == () and sorted(lease.tenant for lease in read.leases) == sorted(TENANTS[:7])
    assert sum("pagination.key=" in p for p in served.paths) == 2  # three pages: two with the key they were given


def test_an_older_node_is_asked_v1beta4_and_its_flat_payments_are_read():
    node, _ = farm()
    served = RestStandin(node, market="v1beta4")
    try:
        read = chain.read(served.url, PROVIDER)
    finally:
        served.close()
    assert read.errors == ()
    assert sorted(lease.closed_by for lease in read.leases) == ["", "unknown", "unknown", "unknown"]  # no reason kept
    assert [p.split("?")[0] for p in served.paths if "leases" in p] == ["/akash/market/v1beta5/leases/list",
                                                                         "/akash/market/v1beta4/leases/list"]


def test_an_rpc_node_given_as_the_rest_node_is_said_so_without_its_text():
    rpc = RpcStandin()
    try:
        read = chain.read(rpc.url, PROVIDER)
    finally:
        rpc.close()
    assert read.balance is None and read.leases == () and read.completion is None
    assert [e.split(": ")[0] for e in read.errors] == ["balance", "leases"]
    assert all(e.endswith("HTTP 404") and "Method not found" not in e for e in read.errors), read.errors


def test_a_trickling_node_is_left_at_the_whole_reads_deadline():
    with serving(trickle) as (port, _):
        start = time.monotonic()
        read = chain.read(f"http://127.0.0.1:{port}", PROVIDER, timeout_s=1.5)
        took = time.monotonic() - start
    assert took < 2.5, f"the read took {took:.1f} s with a 1.5 s deadline for all of it"
    assert read.errors[0].endswith("no whole answer within 1.5 s"), read.errors
    assert read.errors[1].endswith("not asked (the read's deadline had passed)"), read.errors


def test_a_redirect_is_not_followed_and_garbage_is_not_quoted():
    with serving(garbage) as (elsewhere, hits), serving(redirect_to(elsewhere)) as (port, _):
        redirected = chain.read(f"http://127.0.0.1:{port}", PROVIDER, timeout_s=3)
        time.sleep(0.2)
        assert hits == [], "the redirect was followed"
        garbled = chain.read(f"http://127.0.0.1:{elsewhere}", PROVIDER, timeout_s=3)
    assert all(e.endswith("HTTP 302 (a redirect: not followed)") for e in redirected.errors), redirected.errors
    assert all(e.endswith("not an HTTP answer (BadStatusLine)") and "no HTTP here" not in e for e in garbled.errors)


def endless(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
    while True:
        conn.sendall(b"[" * 65536)


def test_an_endless_answer_is_read_no_further_than_the_cap():
    with serving(endless) as (port, _):
        read = chain.read(f"http://127.0.0.1:{port}", PROVIDER, timeout_s=10)
    assert read.errors[0].endswith(f"the answer is larger than {chain.MAX_BYTES:,} bytes"), read.errors


def json_answer(doc: object):
    def answer(conn: socket.socket) -> None:
        body = json.dumps(doc).encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                     + body)
    return answer


@pytest.mark.parametrize("doc", [
    {"balance": {"denom": "uakt", "amount": "-5"}, "leases": "none"},
    {"balance": {"denom": "uatom", "amount": "5"}, "leases": [{"lease": {}}]},
    {"balance": {"denom": "uakt", "amount": "1e400"}, "leases": [{"lease": {"id": {"owner": 5}}}]},
    {"balance": {"denom": "uakt", "amount": "NaN"}, "leases": [], "pagination": {"next_key": ["x"]}},
    {"balance": {"denom": "uakt", "amount": "abc"}, "leases": "none"},  # Decimal's InvalidOperation, once uncaught
    {"balance": {"denom": "uakt", "amount": ""}, "leases": "none"},
    {"balance": {"denom": "uakt", "amount": "1e-300"}, "leases": "none"},  # finer than a DecCoin: hours were infinite
], ids=["negative", "another denom", "too large", "not a number", "letters", "empty", "below a DecCoin's step"])
def test_an_answer_of_the_wrong_shape_is_said_so_and_nothing_of_it_is_kept(doc):
    with serving(json_answer(doc)) as (port, _):
        read = chain.read(f"http://127.0.0.1:{port}", PROVIDER, timeout_s=3)
    assert read.balance is None and read.leases == () and read.completion is None
    assert read.errors[0].endswith("not a bank balance") and read.errors[1].endswith("not a market leases list")


def lease(reason: int | None, state: str = "closed", reclaimed: bool = False) -> chain.Lease:
    return chain.Lease(TENANTS[0], 1, 1, 1, PROVIDER, state, reason, reclaimed, "uakt", *(chain.Decimal(0),) * 4,
                       "closed", 10, 20)


def test_the_completion_rate_is_aep86s_and_is_judged_from_ten_leases():
    leases = [lease(None, "active")] * 4 + [lease(1)] * 3 + [lease(20000), lease(0, "insufficient_funds"),
                                                             lease(10000), lease(10002, reclaimed=True), lease(0)]
    assert [item.closed_by for item in leases[6:]] == ["tenant", "network", "network", "provider", "reclamation",
                                                       "unknown"]
    done = chain.completion(leases)
    assert (done.total, done.terminated_by_provider, done.judged) == (12, 2, True)
    assert done.rate == pytest.approx(10 / 12)
    few = chain.completion(leases[:9])
    assert (few.rate, few.judged, few.minimum) == (1.0, False, 10)
    assert chain.completion([]).rate is None


def test_a_read_that_raises_is_a_read_with_its_reason():
    from miner2provider.dashboard.app import read_wallet

    def broken() -> WalletRead:
        raise RuntimeError("secret-ish server text")

    said = read_wallet(broken)
    assert said.balance is None and said.errors == ("the wallet could not be read (RuntimeError)",)


def test_a_node_that_pages_without_end_is_left_after_the_page_cap():
    node = ChainStandin()
    for n in range(chain.MAX_PAGES + 1):
        node.create_lease(TENANTS[n % len(TENANTS)], 1000 + n, PROVIDER, None)
    served = RestStandin(node, page_size=1)
    try:
        read = chain.read(served.url, PROVIDER)
    finally:
        served.close()
    assert read.leases == () and read.completion is None
    assert read.errors[0].endswith(f"more than {chain.MAX_PAGES} pages of leases"), read.errors
    assert sum("leases/list" in p for p in served.paths) == chain.MAX_PAGES


def test_json_nested_past_the_parsers_depth_is_not_json_and_the_read_goes_on():
    """ATTACK: an answer of 100,000 nested arrays raises RecursionError in json (not a ValueError), which once ended
    the whole wallet read; it is "not JSON", said like any other wrong answer."""
    nested = b"[" * 100_000 + b"]" * 100_000

    def answer(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(nested)
                     + nested)

    with serving(answer) as (port, _):
        read = chain.read(f"http://127.0.0.1:{port}", PROVIDER, timeout_s=3)
    assert read.balance is None and read.errors and all(e.endswith("not JSON") for e in read.errors), read.errors
