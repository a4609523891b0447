"""STAND-IN for an Akash node's REST API (the cosmos-sdk gRPC gateway, port 1317), answering only what m2p's wallet
view asks (miner2provider/market/akash/chain.py), over a ChainStandin's leases (akash_chain.py).

Routes and shapes, as the gateway writes JSON (proto field names, 64-bit integers as decimal strings, enums by name):

- ``GET /cosmos/bank/v1beta1/balances/{address}/by_denom?denom=D`` -> ``{"balance": {"denom", "amount"}}``, and
  ``GET /cosmos/bank/v1beta1/balances/{address}`` -> ``{"balances": [...], "pagination": {...}}`` (cosmos-sdk
  proto/cosmos/bank/v1beta1/query.proto, Query/Balance and Query/AllBalances).  An account never funded has
  amount "0" (the bank keeps no zero balances, and answers a zero coin); an address that is no bech32 account is
  400 with gRPC code 3 (InvalidArgument), as the gateway maps it;
- ``GET /akash/market/v1beta5/leases/list?filters.provider=P[&pagination.key=K]`` -> ``{"leases": [{"lease",
  "escrow_payment"}], "pagination": {"next_key", "total"}}`` (akash-network/chain-sdk 55f1c683
  proto/node/akash/market/v1beta5/query.proto; market/v1/lease.proto Lease with ``reason`` and ``reclamation``;
  escrow/types/v1/payment.proto Payment, its figures under ``state``), ``page_size`` leases a page with an opaque
  base64 ``next_key`` (akash-network/node 3efe26bf x/market/keeper/grpc_query.go pages by key; the default limit is
  cosmos-sdk's 100).  With ``market="v1beta4"`` it is an older node: ``/akash/market/v1beta4/leases/list`` with
  ``lease_id``, no reason, and escrow v1beta3's flat FractionalPayment (``account_id``, ``payment_id``, ``owner``,
  ``state``, ``rate``, ``balance``, ``withdrawn``), and v1beta5 is unknown;
- ``GET /cosmos/base/tendermint/v1beta1/blocks/latest`` -> ``{"block_id", "block": {"header": {"chain_id",
  "height", "time"}}}`` (cosmos-sdk proto/cosmos/base/tendermint/v1beta1/query.proto GetLatestBlock);
- anything else: HTTP 501 ``{"code": 12, "message": "Not Implemented", "details": []}``, the gateway's answer to a
  route it does not serve.

Who closed a lease is the chain's closed reason: a lease the stand-in chain's provider closed (a ``close``
transaction that landed) carries that transaction's reason, one the tenant closed ``lease_closed_owner``; a lease
the provider started reclaiming keeps AEP-82's ``reclamation.started_at``.  Escrow figures (rate, balance,
withdrawn, heights) are the test's, set with ``pay``; a lease without them pays its price from an empty escrow.
"""

from __future__ import annotations

import base64
import datetime
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from m2p_sandbox.akash_chain import ChainLease, ChainStandin
from m2p_sandbox.akash_node import _handler as json_handler  # GET -> owner.answer(path), as the RPC's
from m2p_sandbox.served import Served

_ACCOUNT = re.compile(r"akash1[02-9ac-hj-np-z]{38}")
NOT_IMPLEMENTED = {"code": 12, "message": "Not Implemented", "details": []}
# market/v1/types.proto LeaseClosedReason: number -> the name the gateway writes
REASON_NAMES = {1: "lease_closed_owner", 10000: "lease_closed_reason_unstable",
                10001: "lease_closed_reason_decommission", 10002: "lease_closed_reason_unspecified",
                10003: "lease_closed_reason_manifest_timeout", 20000: "lease_closed_reason_insufficient_funds"}


@dataclass
class Payment:
    rate: str = "1.000000000000000000"  # uakt per block (DecCoin)
    balance: str = "0.000000000000000000"
    withdrawn: str = "0"  # Coin: an integer
    state: str = "open"
    created_at: int = 100
    closed_on: int = 0


class RestStandin(Served):
    def __init__(self, chain: ChainStandin, market: str = "v1beta5", page_size: int = 100,
                 chain_id: str = "akashnet-2", host: str = "127.0.0.1") -> None:
        self.chain, self.market, self.page_size, self.chain_id = chain, market, page_size, chain_id
        self.balances: dict[str, dict[str, int]] = {}  # address -> denom -> amount
        self.payments: dict[tuple[str, int, int, int, str], Payment] = {}
        self.paths: list[str] = []
        self._serve_on(host, 0, json_handler(self))

    def fund(self, address: str, amount: int, denom: str = "uakt") -> None:
        self.balances.setdefault(address, {})[denom] = amount

    def pay(self, lease: ChainLease, **figures: Any) -> None:
        self.payments[lease.key] = Payment(**figures)

    def answer(self, target: str) -> tuple[int, Any]:
        self.paths.append(target)
        parts = urlsplit(target)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        path = parts.path
        bank = re.fullmatch(r"/cosmos/bank/v1beta1/balances/([^/]+)(/by_denom)?", path)
        if bank:
            return self._bank(bank.group(1), bool(bank.group(2)), query.get("denom", ""))
        if path == f"/akash/market/{self.market}/leases/list":
            return self._leases(query)
        if path == "/cosmos/base/tendermint/v1beta1/blocks/latest":
            at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            return 200, {"block_id": {"hash": "", "part_set_header": {"total": 1, "hash": ""}},
                         "block": {"header": {"chain_id": self.chain_id, "height": str(self.chain.height),
                                              "time": at}}}
        return 501, NOT_IMPLEMENTED

    def _bank(self, address: str, by_denom: bool, denom: str) -> tuple[int, Any]:
        if not _ACCOUNT.fullmatch(address):
            return 400, {"code": 3, "message": "invalid address: decoding bech32 failed", "details": []}
        held = self.balances.get(address, {})
        if by_denom:
            if not denom:
                return 400, {"code": 3, "message": "invalid denom", "details": []}
            return 200, {"balance": {"denom": denom, "amount": str(held.get(denom, 0))}}
        coins = [{"denom": d, "amount": str(a)} for d, a in sorted(held.items()) if a]
        return 200, {"balances": coins, "pagination": {"next_key": None, "total": str(len(coins))}}

    def _leases(self, query: dict[str, str]) -> tuple[int, Any]:
        provider = query.get("filters.provider", "")
        with self.chain.lock:
            chosen = [lease for lease in self.chain.leases.values() if not provider or lease.provider == provider]
            closers = {tx["lease"]: tx["reason"] for tx in self.chain.txs if tx["kind"] == "close" and tx["code"] == 0}
        start = 0
        if query.get("pagination.key"):
            try:
                start = int(base64.b64decode(query["pagination.key"], validate=True).decode())
            except ValueError:
                return 400, {"code": 3, "message": "invalid pagination key", "details": []}
        page = chosen[start:start + self.page_size]
        more = start + self.page_size < len(chosen)
        next_key = base64.b64encode(str(start + self.page_size).encode()).decode() if more else None
        return 200, {"leases": [self._entry(lease, closers) for lease in page],
                     "pagination": {"next_key": next_key, "total": "0"}}  # total only with count_total

    def _entry(self, lease: ChainLease, closers: dict[str, int]) -> dict[str, Any]:
        paid = self.payments.get(lease.key, Payment())
        key = "/".join(str(k) for k in lease.key)
        if lease.state == "closed":
            reason = REASON_NAMES.get(closers[key], str(closers[key])) if key in closers else "lease_closed_owner"
        else:
            reason = "lease_closed_invalid"
        ident = {"owner": lease.owner, "dseq": str(lease.dseq), "gseq": lease.gseq, "oseq": lease.oseq,
                 "provider": lease.provider}
        rate = {"denom": "uakt", "amount": paid.rate}
        balance = {"denom": "uakt", "amount": paid.balance}
        withdrawn = {"denom": "uakt", "amount": paid.withdrawn}
        payment_state = "closed" if lease.state == "closed" and paid.state == "open" else paid.state
        if self.market == "v1beta4":
            return {"lease": {"lease_id": ident, "state": lease.state, "price": rate,
                              "created_at": str(paid.created_at), "closed_on": str(paid.closed_on)},
                    "escrow_payment": {"account_id": {"scope": "deployment", "xid": f"{lease.owner}/{lease.dseq}"},
                                       "payment_id": f"{lease.gseq}/{lease.oseq}/{lease.provider}",
                                       "owner": lease.provider, "state": payment_state, "rate": rate,
                                       "balance": balance, "withdrawn": withdrawn}}
        reclamation = None if lease.window_s is None else {
            "window": f"{lease.window_s:.0f}s", "started_at": str(lease.started_at), "deadline": str(lease.deadline),
            "reason": REASON_NAMES.get(lease.reason, "lease_closed_invalid")}
        return {"lease": {"id": {**ident, "bseq": 0}, "state": lease.state, "price": rate,
                          "created_at": str(paid.created_at), "closed_on": str(paid.closed_on), "reason": reason,
                          "reclamation": reclamation},
                "escrow_payment": {"id": {"aid": {"scope": "deployment", "xid": f"{lease.owner}/{lease.dseq}"},
                                          "xid": f"{lease.gseq}/{lease.oseq}/{lease.provider}"},
                                   "state": {"owner": lease.provider, "state": payment_state, "rate": rate,
                                             "balance": balance, "unsettled": {"denom": "uakt", "amount": "0"},
                                             "withdrawn": withdrawn}}}


def _now_rfc3339() -> str:
    """Now in UTC as Go's JSON writes a time (RFC 3339, fractional seconds, "Z"), as DIA's ``Time`` is."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class PriceFeedStandin(Served):
    """STAND-IN for the two AKT price feeds Akash's bid script reads (akash-network/helm-charts f3d8d46
    charts/akash-provider/scripts/price_script_generic.sh, get_akt_price), on one loopback port:

    - DIA, ``GET /v1/assetQuotation/Osmosis/ibc-C2CF...`` -> its quotation (``Symbol``, ``Name``, ``Address``,
      ``Blockchain``, ``Price``, ``PriceYesterday``, ``VolumeYesterdayUSD``, ``Time``, ``Source``, ``Signature``),
      ``Time`` the moment of the answer, as a live quotation's is recent (m2p refuses a stale one);
    - CoinGecko, ``GET /api/v3/simple/price?ids=akash-network&vs_currencies=usd`` -> ``{"akash-network": {"usd"}}``.

    ``down`` names the feeds that fail: DIA with 503, CoinGecko with its rate limit's 429 and its own message.
    Kinder: plain HTTP on loopback (the real feeds are HTTPS with certificates m2p verifies)."""

    DIA_PATH = "/v1/assetQuotation/Osmosis/ibc-C2CFB1C37C146CF95B0784FD518F8030FEFC76C5800105B1742FB65FFE65F873"
    COINGECKO_PATH = "/api/v3/simple/price"

    def __init__(self, price: float = 0.85, down: tuple[str, ...] = (), host: str = "127.0.0.1") -> None:
        self.price, self.down = price, down
        self.paths: list[str] = []
        self._serve_on(host, 0, json_handler(self))

    @property
    def feeds(self) -> tuple[tuple[str, str], ...]:
        return (("DIA", self.url + self.DIA_PATH),
                ("CoinGecko", self.url + self.COINGECKO_PATH + "?ids=akash-network&vs_currencies=usd"))

    def answer(self, target: str) -> tuple[int, Any]:
        self.paths.append(target)
        parts = urlsplit(target)
        if parts.path == self.DIA_PATH:
            if "DIA" in self.down:
                return 503, {"error": "service unavailable"}
            return 200, {"Symbol": "AKT", "Name": "Akash Network", "Address": self.DIA_PATH.rsplit("/", 1)[1],
                         "Blockchain": "Osmosis", "Price": self.price, "PriceYesterday": self.price * 1.02,
                         "VolumeYesterdayUSD": 123456.7, "Time": _now_rfc3339(), "Source": "diadata.org",
                         "Signature": "0x" + "ab" * 65}
        if parts.path == self.COINGECKO_PATH and parse_qs(parts.query).get("ids") == ["akash-network"]:
            if "CoinGecko" in self.down:
                return 429, {"status": {"error_code": 429, "error_message": "You've exceeded the Rate Limit."}}
            return 200, {"akash-network": {"usd": self.price}}
        return 404, {"error": "not found"}
