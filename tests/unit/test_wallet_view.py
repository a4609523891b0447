"""The provider's wallet on the dashboard (dashboard/wallet_view.py, _wallet.html.j2, uptime.py), the wallet-low alert
fed by the chain's read (alerts/service.py watching_wallet), the leases' payments as the export's rows, and the
provider file's rest_node and akt_usd.  The wallet comes from the STAND-IN node REST API (sandbox akash_rest.py)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from test_dashboard import ECON, INVENTORY, TOKEN  # tests/unit is on sys.path (no package)
from test_provider_file import GOOD
from test_wallet_chain import PROVIDER, TENANTS, farm

from m2p_sandbox.akash_chain import ChainStandin
from m2p_sandbox.akash_rest import PriceFeedStandin, RestStandin
from miner2provider.alerts.config import AlertsConfig
from miner2provider.alerts.dispatch import Outbox
from miner2provider.alerts.rules import Rules
from miner2provider.alerts.service import Alerting
from miner2provider.core import inventory
from miner2provider.core.errors import ProviderFileError
from miner2provider.dashboard.actions import Actions, Fleet
from miner2provider.dashboard.app import DashboardConfig, create_app
from miner2provider.dashboard.history import LeasePayment
from miner2provider.dashboard.ledger_csv import PaymentRow
from miner2provider.dashboard.pages import TEMPLATES
from miner2provider.dashboard.uptime import KEEP_S, UptimeLog
from miner2provider.dashboard.wallet_view import BETWEEN_READS, FIRST_READ, WalletState, payment_rows, wallet_view
from miner2provider.detect.ssh import SshOptions
from miner2provider.market import akash
from miner2provider.market.akash import akt_price, chain, provider_file
from miner2provider.market.base import ProviderState
from miner2provider.market.wallet import LeaseRecord, WalletRead

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def record(lease_id: str, **fields: object) -> LeaseRecord:
    values: dict[str, object] = {"id": lease_id, "tenant": TENANTS[0], "namespace": chain.namespace(lease_id),
                                 "status": "closed", "state": "closed", "closed_by": "tenant", "escrowed": 0.0,
                                 "withdrawn": 1.2, "rate_per_hour": 0.3, "payment_state": "closed", "hours": 4.0}
    values.update(fields)
    return LeaseRecord(**values)  # type: ignore[arg-type]


def render(view: dict) -> str:
    return TEMPLATES.env.get_template("_wallet.html.j2").render(wallet=view)


def test_the_page_shows_the_standin_chains_balance_and_lease_payments():
    node, _ = farm()
    rest = RestStandin(node)
    rest.fund(PROVIDER, 7_500_000)
    rest.pay(next(iter(node.leases.values())), rate="10.000000000000000000", balance="3000000.000000000000000000",
             withdrawn="1500000", created_at=node.height - 600)
    try:
        read = chain.read(rest.url, PROVIDER, price=0.8, price_source="provider.yml:12", now=1000.0)
    finally:
        rest.close()
    view = wallet_view(read, None, now=1060.0)
    assert (view["balance"], view["balance_usd"], view["running_count"], view["closed_count"]) == (
        "7.500000", "6.00", 1, 3)
    assert view["closed_by"] == {"tenant": 1, "provider": 1, "reclamation": 1, "network": 0, "unknown": 0}
    assert view["totals"] == [{"currency": "AKT", "escrowed": "3.0000", "withdrawn": "1.5000"}]
    assert view["running"][0]["rate_per_hour"] == "0.0059" and view["running"][0]["hours"] == "1.0"  # 6.117 s blocks
    page = render(view)
    assert 'id="wallet-balance">7.500000</b> AKT' in page and 'id="wallet-usd">6.00</b> USD' in page
    assert "provider.yml:12" in page and "2 of 4 ended by the provider" in page and "not judged below 10" in page
    assert "tenant 1, provider 1, reclamation 1" in page


def test_hostile_lease_and_owner_strings_are_escaped_and_nothing_runs():
    read = WalletRead(100.0, HOSTILE, "AKT", 1.0, (record(HOSTILE + "/1/1/1/" + PROVIDER, tenant=HOSTILE,
                                                          namespace=HOSTILE, payment_state=HOSTILE),),
                      chain.completion([]), (HOSTILE,), 1.0, HOSTILE)
    page = render(wallet_view(read, None, now=100.0))
    assert "<script" not in page and "<img" not in page  # every string the chain or the node gave is text
    assert page.count("&lt;script&gt;") >= 4 and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_no_wallet_configured_shows_nothing_and_an_unread_one_says_so():
    assert render(wallet_view(None, None, 0.0, configured=False)).strip() == ""
    assert "not read yet" in render(wallet_view(None, None, 0.0))


def test_uptime_is_the_share_of_status_reads_answered_over_seven_days(tmp_path):
    log = UptimeLog(tmp_path / "uptime.sqlite3")
    now = 2_000_000_000.0
    for n in range(10):
        log.add(now - n * 3600, True)
    log.add(now - 30, False)
    log.add(now - 6 * 86_400, False)
    for n in range(5):  # older than a week: they count no more
        log.add(now - 7 * 86_400 - 60 - n, False)
    got = log.over(now)
    assert (got.reads, got.answered) == (12, 10) and got.share == pytest.approx(10 / 12)
    assert wallet_view(None, got, now)["uptime"] == {"share": "83.3 %", "reads": 12, "answered": 10}
    log.add(now + KEEP_S + 1, True)  # a read much later drops what is past keeping
    assert log.over(now + KEEP_S + 1, window_s=KEEP_S + 86_400 * 2).reads == 1
    assert UptimeLog(tmp_path / "none.sqlite3").over(now).share is None


def test_the_wallet_low_rule_fires_on_the_chains_balance_and_resolves_when_topped_up():
    node = ChainStandin()
    rest = RestStandin(node)
    rest.fund(PROVIDER, 4_500_000)
    config = AlertsConfig("alerts.yml", Rules(wallet_low=10), ())
    alerting = Alerting(config, Outbox(()))
    read = alerting.watching_wallet(lambda: chain.read(rest.url, PROVIDER))
    try:
        assert alerting.sweep_done({}, {}, now=1.0) == []  # not read yet: not judged
        assert read().balance == 4.5
        fired = alerting.sweep_done({}, {}, now=2.0)
        rest.fund(PROVIDER, 25_000_000)
        read()
        resolved = alerting.sweep_done({}, {}, now=3.0)
        rest.close()
        assert read().balance is None and alerting.wallet is None  # the node gone: unknown, not judged
    finally:
        rest.close()
        alerting.close()
    assert [(m.kind, m.rule) for m in fired] == [("firing", "wallet")]
    assert fired[0].text == "the provider's wallet holds 4.5 AKT, below 10: top it up before its deposits fail"
    assert [(m.kind, m.rule) for m in resolved] == [("resolved", "wallet")]


def test_payments_go_to_the_rig_whose_ledger_names_the_leases_pods():
    one, two, three = (f"{TENANTS[n]}/{n}/1/1/{PROVIDER}" for n in (1, 2, 3))
    payments = [LeasePayment(lease_id, 5000.0, amount, "AKT", chain.namespace(lease_id), rate, first)
                for lease_id, amount, rate, first in [(one, 1.2, 0.3, True), (two, 2.0, 0.5, False),
                                                      (three, 0.9, 0.3, True)]]
    pods = {"rig01": [f"{chain.namespace(one)}/web-0", f"{chain.namespace(two)}/gpu-0"],
            "rig02": [f"{chain.namespace(two)}/gpu-1", "other/pod"]}
    rows = list(payment_rows(payments, pods))
    first = f"{FIRST_READ}; hours from its rate at the nominal block time"
    between = f"{BETWEEN_READS}; hours from its rate at the nominal block time"
    assert all(isinstance(row, PaymentRow) and row.paid_at == 5000.0 for row in rows)
    split = between + "; split evenly over 2 rigs"
    assert sorted((r.rig, r.lease, round(r.hours, 9), r.amount, r.currency, r.rate, r.basis) for r in rows) == [
        ("", three, 3.0, 0.9, "AKT", 0.3, first),  # no rig's ledger names it
        ("rig01", one, 4.0, 1.2, "AKT", 0.3, first), ("rig01", two, 4.0, 1.0, "AKT", 0.25, split),
        ("rig02", two, 4.0, 1.0, "AKT", 0.25, split)]


def test_the_provider_file_names_a_rest_node_and_a_price():
    text = GOOD.replace("rpc_node: http://akash-node:26657\n", "rpc_node: http://akash-node:26657\n"
                        "rest_node: http://akash-node:1317\nakt_usd: 0.85\n")
    got = provider_file.parse(text, "p.yml")
    assert (got.rest_node, got.akt_usd, got.where("akt_usd")) == ("http://akash-node:1317", 0.85, "p.yml:13")
    assert akash.AKASH.wallet_reader(got) is not None
    assert akash.AKASH.wallet_reader(provider_file.parse(GOOD, "p.yml")) is None  # no rest_node: nothing to ask
    for value, said in [("rest_node: akash-node:1317", "rest_node 'akash-node:1317': the node's REST API URL"),
                        ("rest_node: tcp://akash-node:1317", "the node's REST API URL"),
                        # a password in it would be quoted on the page by every failed read (m2p sends none)
                        ("rest_node: https://me:s3cret@api.example.com", "the node's REST API URL"),
                        ("akt_usd: cheap", "akt_usd 'cheap': the USD one AKT is worth"),
                        ("akt_usd: -1", "akt_usd -1: the USD one AKT is worth"),
                        ("akt_usd: .nan", "the USD one AKT is worth"), ("akt_usd: true", "the USD one AKT")]:
        with pytest.raises(ProviderFileError) as caught:
            provider_file.parse(GOOD.replace("ingress_rig: rig01", f"ingress_rig: rig01\n{value}"), "p.yml")
        assert caught.value.where == "p.yml:11" and said in caught.value.message, (value, caught.value)
        assert "s3cret" not in caught.value.message and "me:" not in caught.value.message


def test_the_dashboard_reads_the_wallet_and_samples_uptime_on_its_own_threads(tmp_path):
    (tmp_path / "rigs.yml").write_text(INVENTORY)
    hosts = list(inventory.load(tmp_path / "rigs.yml").hosts)
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda rig: rig))
    answers = iter([ProviderState("u", "", {}), ProviderState("u", "refused", {})] + [ProviderState("u", "", {})] * 99)
    config = DashboardConfig(tmp_path / "h.sqlite3", hosts, ECON, actions, lambda chosen: [], lambda chosen: 0,
                             0.2, TOKEN, provider_label="Market", provider_status=lambda: next(answers))
    node = ChainStandin()
    rest = RestStandin(node)
    rest.fund(PROVIDER, 3_000_000)
    uptime = UptimeLog(tmp_path / "uptime.sqlite3")
    app = create_app(config, wallet_read=lambda: chain.read(rest.url, PROVIDER), uptime=uptime)
    from starlette.testclient import TestClient

    try:
        with TestClient(app, base_url="http://127.0.0.1:8477"):
            state: WalletState = app.state.wallet
            deadline = time.monotonic() + 5
            while (state.latest is None or uptime.over(time.time()).reads < 3) and time.monotonic() < deadline:
                time.sleep(0.05)
            view = state.view(time.time())
    finally:
        rest.close()
    assert view["balance"] == "3.000000" and view["errors"] == []
    assert view["uptime"]["reads"] >= 3 and view["uptime"]["answered"] == view["uptime"]["reads"] - 1


def test_the_dashboard_command_reads_the_wallet_only_where_the_provider_file_names_a_rest_node(tmp_path):
    from miner2provider.cli.dashboard import _wallet_read

    node = ChainStandin()
    rest = RestStandin(node)
    rest.fund("akash1365yvmc4s7awdyj3n2sav7xfx76adc6dnmlx63", 2_000_000)
    (tmp_path / "plain.yml").write_text(GOOD)
    (tmp_path / "rest.yml").write_text(GOOD + f"rest_node: {rest.url}\nakt_usd: 2\n")
    try:
        assert _wallet_read(str(tmp_path / "plain.yml")) is None
        read = _wallet_read(str(tmp_path / "rest.yml"))
        assert read is not None
        got = read()
    finally:
        rest.close()
    assert (got.balance, got.balance_usd, got.price_source, got.errors) == (2.0, 4.0, f"{tmp_path}/rest.yml:15", ())


def test_akt_usd_feed_asks_dia_then_coingecko_as_the_bid_script_does_and_keeps_the_price_an_hour():
    from m2p_sandbox.akash_rest import PriceFeedStandin
    from miner2provider.market.akash import akt_price

    feeds = PriceFeedStandin(price=0.85)
    try:
        assert akt_price.usd_per_akt(feeds.feeds) == (0.85, "DIA, as Akash's bid script reads it")
        feeds.down = ("DIA",)
        assert akt_price.usd_per_akt(feeds.feeds) == (0.85, "CoinGecko, as Akash's bid script reads it")
        feeds.down = ("DIA", "CoinGecko")
        said = akt_price.usd_per_akt(feeds.feeds)
        assert said == "no AKT price: DIA: HTTP 503; CoinGecko: HTTP 429" and "Rate Limit" not in said
        feeds.down, feeds.price = (), 2e6  # over the bid script's 1,000,000: no price
        assert akt_price.usd_per_akt(feeds.feeds) == ("no AKT price: DIA: not its price quotation; CoinGecko: not its "
                                                      "price quotation")
        feeds.price, feeds.down = 10 ** 400, ("DIA",)  # an integer no float holds: a wrong quotation, said as one
        assert akt_price.usd_per_akt(feeds.feeds) == "no AKT price: DIA: HTTP 503; CoinGecko: not its price quotation"
        feeds.price, feeds.down, clock = 0.5, (), [0.0]
        price = akt_price.kept(lambda: akt_price.usd_per_akt(feeds.feeds), clock=lambda: clock[0])
        asked = len(feeds.paths)
        assert price()[0] == 0.5 and price()[0] == 0.5 and len(feeds.paths) == asked + 1  # kept
        feeds.price, clock[0] = 0.7, akt_price.KEEP_S + 1
        assert price()[0] == 0.7
    finally:
        feeds.close()


def test_with_akt_usd_feed_the_wallet_is_priced_from_the_feed_and_a_failed_feed_is_one_more_error():
    from m2p_sandbox.akash_rest import PriceFeedStandin
    from miner2provider.market.akash import akt_price

    rest, feeds = RestStandin(ChainStandin()), PriceFeedStandin(price=0.5, down=("DIA",))
    rest.fund("akash1365yvmc4s7awdyj3n2sav7xfx76adc6dnmlx63", 4_000_000)
    provider = provider_file.parse(GOOD + f"rest_node: {rest.url}\nakt_usd: feed\n", "p.yml")
    try:
        reader = chain.reader(provider, lambda: akt_price.usd_per_akt(feeds.feeds))
        assert reader is not None
        priced = reader()
        feeds.down = ("DIA", "CoinGecko")
        unpriced = reader()
    finally:
        rest.close()
        feeds.close()
    assert (provider.akt_usd, provider.akt_usd_feed) == (None, True)
    assert (priced.balance_usd, priced.price_source, priced.errors) == (2.0, "CoinGecko, as Akash's bid script "
                                                                        "reads it", ())
    assert unpriced.balance == 4.0 and unpriced.balance_usd is None
    assert unpriced.errors == ("price: no AKT price: DIA: HTTP 503; CoinGecko: HTTP 429",)


class DiaQuotedAt(PriceFeedStandin):
    """The stand-in feeds, DIA's quotation carrying ``quoted_at`` as its Time (None: no Time at all)."""

    def __init__(self, quoted_at: str | None, down: tuple[str, ...] = ()) -> None:
        self.quoted_at = quoted_at
        super().__init__(price=0.85, down=down)

    def answer(self, target: str) -> tuple[int, Any]:
        status, doc = super().answer(target)
        if target == self.DIA_PATH and status == 200:
            del doc["Time"]
            if self.quoted_at is not None:
                doc["Time"] = self.quoted_at
        return status, doc


QUOTE_NOW = datetime(2026, 11, 29, 14, 5, 12, tzinfo=UTC).timestamp()  # the wall clock the DIA tests read


@pytest.mark.parametrize(("quoted_at", "why"), [
    ("2026-11-29T11:00:00Z", "its quotation is stale (from 2026-11-29T11:00:00Z)"),  # 3 h 5 min old
    ("2026-11-29T12:05:11.999Z", "its quotation is stale (from 2026-11-29T12:05:11Z)"),  # just past 2 h
    ("2026-11-29T14:10:13Z", "its quotation's time (2026-11-29T14:10:13Z) is ahead of this machine's clock"),  # ahead past the 5 min skew
    ("2026-11-30T01:00:00+10:00", "its quotation's time (2026-11-29T15:00:00Z) is ahead of this machine's clock"),  # ahead, said in UTC
    (None, "its quotation has no time"),
    ("", "its quotation has no time"),
    ("29 Nov 2026 14:05 <b>", "its quotation has no time"),  # not RFC 3339, and its text is not repeated
    ("2026-11-29T14:05:12", "its quotation has no time"),  # no offset: no moment
    ("2026-02-30T14:05:12Z", "its quotation has no time"),
])
def test_a_dia_quotation_not_of_now_is_passed_over_for_coingecko(quoted_at, why):
    feeds = DiaQuotedAt(quoted_at)
    try:
        assert akt_price.usd_per_akt(feeds.feeds, clock=lambda: QUOTE_NOW) == (
            0.85, "CoinGecko, as Akash's bid script reads it")
        feeds.down = ("CoinGecko",)
        assert akt_price.usd_per_akt(feeds.feeds, clock=lambda: QUOTE_NOW) == (
            f"no AKT price: DIA: {why}; CoinGecko: HTTP 429")
    finally:
        feeds.close()


@pytest.mark.parametrize("quoted_at", [
    "2026-11-29T14:05:11.123456789Z",  # Go's nanoseconds and "Z", which fromisoformat refuses before Python 3.11
    "2026-11-29t14:05:11.5z",
    "2026-11-29T16:05:12+02:00",
    "2026-11-29T12:05:12Z",  # two hours old, the most a quotation may be
    "2026-11-29T14:10:12.000000000Z",  # five minutes ahead, the most this machine's clock may lag
])
def test_a_fresh_dia_quotation_is_taken_and_the_wallet_says_where_it_came_from(quoted_at):
    feeds = DiaQuotedAt(quoted_at, down=("CoinGecko",))
    try:
        assert akt_price.usd_per_akt(feeds.feeds, clock=lambda: QUOTE_NOW) == (
            0.85, "DIA, as Akash's bid script reads it")
    finally:
        feeds.close()
    assert len(feeds.paths) == 1  # CoinGecko was not asked
