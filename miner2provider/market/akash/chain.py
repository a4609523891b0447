"""Read-only client of an Akash node's REST API (the cosmos-sdk gRPC gateway, port 1317 by default): the provider's
AKT balance and its leases with their escrow payments, as market/wallet.py's records.  Nothing is signed or sent.

Routes and shapes (JSON as the gateway writes it: proto field names, 64-bit integers as decimal strings, enums
by name; each read below names its source):

- ``GET /cosmos/bank/v1beta1/balances/{address}/by_denom?denom=uakt`` -> ``{"balance": {"denom", "amount"}}``
  (cosmos-sdk proto/cosmos/bank/v1beta1/query.proto, Query/Balance; an account never funded answers amount "0");
- ``GET /akash/market/v1beta5/leases/list?filters.provider=...`` -> ``{"leases": [{"lease": {...},
  "escrow_payment": {...}}], "pagination": {"next_key", "total"}}`` (akash-network/chain-sdk 55f1c683
  proto/node/akash/market/v1beta5/query.proto, which akash-network/node 3efe26bf x/market serves): ``lease`` is
  market/v1/lease.proto's Lease (``id``, ``state`` active|insufficient_funds|closed|reclaiming, ``price``,
  ``created_at``/``closed_on`` block heights, ``reason`` a LeaseClosedReason of market/v1/types.proto,
  ``reclamation`` AEP-82's record), ``escrow_payment`` escrow/types/v1/payment.proto's Payment (``id``,
  ``state.{state, rate, balance, unsettled, withdrawn}``); pages follow ``pagination.next_key``.  A node older than
  v1beta5 answers 501 there (the gateway's "Not Implemented"), and is asked ``/akash/market/v1beta4/leases/list``,
  whose lease has ``lease_id`` and no reason, and whose payment is escrow v1beta3's flat FractionalPayment
  (``state``, ``rate``, ``balance``, ``withdrawn``);
- ``GET /cosmos/base/tendermint/v1beta1/blocks/latest`` -> ``{"block": {"header": {"height"}}}`` (cosmos-sdk
  proto/cosmos/base/tendermint/v1beta1/query.proto, Service/GetLatestBlock): the height a running lease's hours
  are counted to.

Every read goes through core/deadline.py's reader (one deadline for the whole read, pages included; no redirect;
a size cap; reasons that quote nothing the server sent).  Who closed a lease comes from its closed reason: 1..9999
the tenant, 10000..19999 the provider (through reclamation when AEP-82's ``reclamation.started_at`` is set),
20000.. and ``insufficient_funds`` the network.  The completion rate is AEP-86's (draft, akash-network/AEP
spec/aep-86/README.md, "Cross-Module Keeper Interfaces"): ``(total_leases - terminated_by_provider) /
total_leases``, judged only from ``min_leases_for_completion_rate`` leases (10 by default).  AEP-86 names a
lookback window without its length, so every lease the node lists counts; a reclamation counts as terminated by the
provider (it closes with a provider's reason), never kinder than the chain's record.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from miner2provider.core.deadline import NoAnswer, exchange
from miner2provider.market.akash import akt_price
from miner2provider.market.akash.provider_file import ProviderFile
from miner2provider.market.wallet import CLOSED, RUNNING, Completion, LeaseRecord, WalletRead

TIMEOUT_S = 15.0  # the whole read: balance, every page of leases and the latest block
MAX_BYTES = 4 * 1024 * 1024  # one answer; a page of 100 leases is about 150 kB
MAX_PAGES = 50  # 5,000 leases at the gateway's default page of 100
DENOM, UNIT, CURRENCY = "uakt", 1_000_000, "AKT"
# Akash's average block time as its bid script counts blocks a month (helm-charts f3d8d46 charts/akash-provider/scripts/
# price_script_generic.sh: 6.117 s): hours and hourly rates from heights are estimates
BLOCK_S = 6.117
MIN_LEASES = 10  # AEP-86's min_leases_for_completion_rate default ("avoids 1/1 = 100% gaming")
MARKETS = ("v1beta5", "v1beta4")
# market/v1/types.proto LeaseClosedReason, by the name the gateway writes (a newer value arrives as its number)
REASONS = {"lease_closed_invalid": 0, "lease_closed_owner": 1, "lease_closed_reason_unstable": 10000,
           "lease_closed_reason_decommission": 10001, "lease_closed_reason_unspecified": 10002,
           "lease_closed_reason_manifest_timeout": 10003, "lease_closed_reason_insufficient_funds": 20000}
RUNNING_STATES = ("active", "reclaiming")
LEASE_STATES = (*RUNNING_STATES, "insufficient_funds", "closed")
MAX_AMOUNT = Decimal(10) ** 30  # more than every coin there is: a wrong figure, not a balance
MIN_AMOUNT = Decimal(10) ** -18  # a DecCoin's finest step (cosmos-sdk LegacyDec: 18 decimals)


class Unread(Exception):
    """A read that gave nothing usable; ``str()`` is the sentence shown."""


@dataclass(frozen=True)
class Lease:
    owner: str
    dseq: int
    gseq: int
    oseq: int
    provider: str
    state: str
    reason: int | None  # the closed reason's number (None: the chain keeps none, v1beta4)
    reclaimed: bool  # AEP-82: the provider started reclaiming it
    denom: str
    price: Decimal  # per block, in ``denom``
    escrowed: Decimal  # escrow payment balance, in ``denom``
    withdrawn: Decimal
    rate: Decimal  # per block
    payment_state: str
    created_at: int  # block heights
    closed_on: int

    @property
    def id(self) -> str:
        """As the chain's tools print a LeaseID (chain-sdk go/node/market/v1 BidID.String)."""
        return f"{self.owner}/{self.dseq}/{self.gseq}/{self.oseq}/{self.provider}"

    @property
    def namespace(self) -> str:
        return namespace(self.id)

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    @property
    def closed_by(self) -> str:
        if self.running:
            return ""
        if self.state == "insufficient_funds" or (self.reason or 0) >= 20000:
            return "network"
        if self.reason is not None and 1 <= self.reason <= 9999:
            return "tenant"
        if self.reason is not None and 10000 <= self.reason <= 19999:
            return "reclamation" if self.reclaimed else "provider"
        return "unknown"


def namespace(lease_id: str) -> str:
    """The namespace Akash's provider runs a lease in (akash-network/provider afc4dd7 cluster/util
    lease_id_to_namespace.go LeaseIDToNamespace): base32hex without padding, lower case, of the SHA-224 of the
    lease ID's string."""
    digest = hashlib.sha224(lease_id.encode()).digest()
    hexed = base64.b32hexencode(digest).decode().rstrip("=")
    return hexed.lower()


def completion(leases: tuple[Lease, ...] | list[Lease]) -> Completion:
    total = len(leases)
    terminated = sum(1 for lease in leases if lease.closed_by in ("provider", "reclamation"))
    return Completion(total, terminated, (total - terminated) / total if total else None, total >= MIN_LEASES,
                      MIN_LEASES, "AEP-86 (draft): (total - terminated by provider) / total")


def _url(node: str, path: str, params: dict[str, str]) -> str:
    parts = urlsplit(node)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + path, urlencode(params), ""))


def _get(node: str, path: str, params: dict[str, str], until: float) -> Any:
    url = _url(node, path, params)
    left = round(until - time.monotonic(), 1)  # a tenth of a second either way: a reason says "within 1.4 s"
    if left <= 0:
        raise Unread(f"{url}: not asked (the read's deadline had passed)")
    try:
        _, body = exchange(url, left, MAX_BYTES)
    except NoAnswer as exc:
        raise Unread(f"{url}: {exc}") from None
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: arrays nested past the parser's depth
        raise Unread(f"{url}: not JSON") from None


def _amount(coin: Any, denom: str | None = None) -> tuple[str, Decimal]:
    """(denom, amount) of a Coin or DecCoin: a non-negative finite amount with a short denom."""
    if not isinstance(coin, dict):
        raise TypeError("not a coin")
    name, text = coin.get("denom", ""), coin.get("amount", "0")
    if not isinstance(name, str) or len(name) > 128 or (denom is not None and name not in (denom, "")):
        raise ValueError("another denomination")
    try:
        value = Decimal(str(text)) if isinstance(text, (str, int)) and not isinstance(text, bool) else Decimal("NaN")
    except InvalidOperation:  # "abc", "": not a number
        raise ValueError("not an amount") from None
    # Finer than a DecCoin's 18 decimals is no amount the chain writes (a rate of 1e-300 made a lease's hours infinite).
    if not value.is_finite() or value < 0 or value > MAX_AMOUNT or (value and value < MIN_AMOUNT):
        raise ValueError("not an amount")
    return name or (denom or DENOM), value


def _uint(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
        raise ValueError("not a count")
    number = int(value)
    if number >= 1 << 64:
        raise ValueError("out of range")
    return number


def _reason(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value in REASONS:
        return REASONS[value]
    try:
        return _uint(value)
    except ValueError:
        return None  # a name this m2p does not know yet: who closed it stays unknown


def lease_of(item: Any) -> Lease:
    """One entry of a leases/list answer (v1beta5 or v1beta4); ValueError/TypeError/KeyError when it is not one."""
    lease, payment = item["lease"], item.get("escrow_payment") or {}
    ident = lease.get("id") or lease["lease_id"]
    owner, provider = ident["owner"], ident["provider"]
    if not (isinstance(owner, str) and isinstance(provider, str) and owner.isprintable() and provider.isprintable()
            and 0 < len(owner) <= 128 and 0 < len(provider) <= 128):
        raise ValueError("not an account")
    state = lease.get("state", "")
    if state not in LEASE_STATES:
        raise ValueError("not a lease state")
    paid = payment["state"] if isinstance(payment.get("state"), dict) else payment  # v1 nests it; v1beta3 is flat
    denom, price = _amount(lease.get("price", {}))
    reclamation = lease.get("reclamation") or {}
    return Lease(owner, _uint(ident["dseq"]), _uint(ident["gseq"]), _uint(ident["oseq"]), provider, state,
                 _reason(lease.get("reason")), bool(_uint(reclamation.get("started_at", 0) or 0)), denom, price,
                 _amount(paid.get("balance", {}), denom)[1], _amount(paid.get("withdrawn", {}), denom)[1],
                 _amount(paid.get("rate", {}), denom)[1], str(paid.get("state", ""))[:32],
                 _uint(lease.get("created_at", 0)), _uint(lease.get("closed_on", 0)))


def balance(node: str, address: str, until: float) -> int:
    """The account's uakt (Unread when none could be read)."""
    path = f"/cosmos/bank/v1beta1/balances/{quote(address, safe='')}/by_denom"
    doc = _get(node, path, {"denom": DENOM}, until)
    try:
        return int(_amount(doc["balance"], DENOM)[1])
    except (ValueError, TypeError, KeyError):
        raise Unread(f"{_url(node, path, {'denom': DENOM})}: not a bank balance") from None


def leases(node: str, provider: str, until: float) -> list[Lease]:
    """Every lease the provider holds or held, page after page (Unread when the list could not be read whole)."""
    for version in MARKETS:
        try:
            return _pages(node, f"/akash/market/{version}/leases/list", provider, until)
        except Unread as exc:
            if not str(exc).endswith(("HTTP 501", "HTTP 404")) or version == MARKETS[-1]:
                raise
    raise AssertionError("unreachable")


def _pages(node: str, path: str, provider: str, until: float) -> list[Lease]:
    found: list[Lease] = []
    params = {"filters.provider": provider}
    for _ in range(MAX_PAGES):
        doc = _get(node, path, params, until)
        try:
            found.extend(lease_of(item) for item in doc["leases"])
            next_key = (doc.get("pagination") or {}).get("next_key") or ""
            if not isinstance(next_key, str) or len(next_key) > 1024:
                raise ValueError("not a page key")
        except (ValueError, TypeError, KeyError, AttributeError, InvalidOperation):
            raise Unread(f"{_url(node, path, params)}: not a market leases list") from None
        if not next_key:
            return found
        params = {"filters.provider": provider, "pagination.key": next_key}
    raise Unread(f"{_url(node, path, {'filters.provider': provider})}: more than {MAX_PAGES} pages of leases")


def latest_height(node: str, until: float) -> int:
    path = "/cosmos/base/tendermint/v1beta1/blocks/latest"
    doc = _get(node, path, {}, until)
    try:
        return _uint(doc["block"]["header"]["height"])
    except (ValueError, TypeError, KeyError):
        raise Unread(f"{_url(node, path, {})}: not a latest block") from None


def record(lease: Lease, height: int | None) -> LeaseRecord:
    """The neutral record: amounts in AKT (another denomination stays in its own smallest unit, named)."""
    currency, scale = (CURRENCY, UNIT) if lease.denom == DENOM else (lease.denom, 1)
    end = height if lease.running else (lease.closed_on or None)
    hours = (end - lease.created_at) * BLOCK_S / 3600 if end and lease.created_at and end >= lease.created_at \
        else None
    return LeaseRecord(lease.id, lease.owner, lease.namespace, RUNNING if lease.running else CLOSED, lease.state,
                       lease.closed_by, float(lease.escrowed) / scale, float(lease.withdrawn) / scale,
                       float(lease.rate) * 3600 / BLOCK_S / scale, lease.payment_state, hours, currency)


def read(node: str, address: str, price: float | None = None, price_source: str = "",
         timeout_s: float = TIMEOUT_S, now: float | None = None) -> WalletRead:
    """The wallet at ``address`` (the provider's account) and its leases, within ``timeout_s`` in all; never raises
    for what the node says: each part it could not read is a sentence in ``errors``."""
    until = time.monotonic() + timeout_s
    errors: list[str] = []
    uakt = found = height = None
    try:
        uakt = balance(node, address, until)
    except Unread as exc:
        errors.append(f"balance: {exc}")
    try:
        found = leases(node, address, until)
    except Unread as exc:
        errors.append(f"leases: {exc}")
    if found and any(lease.running for lease in found):
        try:
            height = latest_height(node, until)
        except Unread as exc:
            errors.append(f"hours: {exc}")
    usable = price if price is not None and math.isfinite(price) and price >= 0 else None
    return WalletRead(time.time() if now is None else now, address, CURRENCY,
                      None if uakt is None else uakt / UNIT, tuple(record(lease, height) for lease in found or ()),
                      completion(found) if found is not None else None, tuple(errors), usable,
                      price_source if usable is not None else "")


def reader(provider: ProviderFile,
           price: Callable[[], tuple[float, str] | str] | None = None) -> Callable[[], WalletRead] | None:
    """The provider file's wallet read (None without a rest_node: the RPC node answers none of this), priced at the
    owner's ``akt_usd`` (where it was written said), or with ``akt_usd: feed`` at ``price`` (default: the bid script's
    feeds, kept an hour); a price that could not be had is one more error, the rest is read all the same."""
    if not provider.rest_node:
        return None
    feed = price or akt_price.kept(akt_price.usd_per_akt)

    def wallet_read() -> WalletRead:
        usd, source, why = provider.akt_usd, provider.where("akt_usd") if provider.akt_usd is not None else "", ""
        if provider.akt_usd_feed:
            got = feed()
            usd, source, why = (None, "", got) if isinstance(got, str) else (got[0], got[1], "")
        done = read(provider.rest_node, provider.wallet.address, usd, source)
        return replace(done, errors=(*done.errors, f"price: {why}")) if why else done
    return wallet_read
