"""STAND-IN Akash chain (the market module's leases under AEP-82) and the provider pod's ``provider-services``.

No chain runs here.  The stand-in keeps leases and enforces the rules m2p's reclaimer lives by, as Akash's code
has them, and refuses with the chain's own error names and codes:

- akash-network/node@3efe26bf (``x/market/handler/server.go``; in v2.1.0-rc10 to rc12): CreateBid,
  CloseBid and LeaseStartReclaim, their checks in that order;
- akash-network/chain-sdk@4870611f (``go/node/market/v1/errors.go``, pkg.akt.dev/go v0.2.16, which provider
  v0.14.1-rc1 and main afc4dd7 use; the same in go/v0.2.14, provider v0.14.0's, and go/v0.3.0, v0.16.0-rc3's):
  the market module's errors, codespace ``market``, codes in declaration order from 1 (``MARKET_ERRORS``);
- akash-network/chain-sdk@3ccaa4d6 (pkg.akt.dev/go/cli v0.2.4): the CLI, ``--reason`` checked before anything
  is sent, ``--broadcast-mode`` async|sync|block with ``block`` the default (``go/cli/root.go``).

The rules:

- a lease's window comes from the winning bid and must lie within the governance bounds
  ``min_reclamation_window`` / ``max_reclamation_window`` (defaults 1 h and 720 h; a test chain sets its
  own, as a devnet's genesis may): ``ErrReclamationWindowInvalid`` otherwise; an order with a minimum window
  refuses a bid without one (``ErrReclamationRequired``) or with a shorter one (``ErrReclamationWindowTooShort``);
- ``MsgLeaseStartReclaim``: signer the lease's provider; the lease known (``ErrUnknownLease``) and active
  (``ErrLeaseNotActive``: a second start finds it reclaiming, so this, not ``ErrLeaseAlreadyReclaiming``), with a
  reclamation record (``ErrLeaseNotReclamable``); the lease turns ``reclaiming`` with
  ``deadline = block_time + window``;
- ``MsgCloseBid`` by the provider: refused for an active lease with a window (``ErrReclamationNotStarted``),
  for a reclaiming one before its deadline (``ErrReclamationWindowNotElapsed``) and for one already over
  (``ErrLeaseNotActive``); otherwise the lease closes.  A lease without a window closes at once (the old
  behaviour).  The chain never closes a reclaiming lease by itself.
- A transaction lands in the next block: its block time is ``BLOCK_S`` after it was sent (a deadline is
  never earlier than the sender thinks).  A message's refusal is the block's, in its ``raw_log`` as cosmos-sdk's
  baseapp wraps it ("failed to execute message; message index: 0: ..."): a ``block`` reply carries it, a
  ``sync`` or ``async`` one only says the mempool took the transaction (code 0).  A signer that is not the
  lease's provider fails the ante handler (cosmos-sdk ``ErrUnauthorized``, codespace ``sdk``, code 4), which
  every mode sees.  Every transaction, accepted or refused, is kept in ``txs``: a refused one costs a real
  provider its fee, and the tests assert there was none.

``ProviderPod`` stands for ``akash-provider-0``: it holds the wallet key (in its own private folder) and
runs ``provider-services`` commands given as argv, the only way m2p's reclaimer reaches the chain (through
the stand-in API's ``pods/exec``).  Their output is shaped as the CLI's ``--output json``: a query prints
``QueryLeaseResponse`` (``lease.state``, ``lease.reclamation.{window,started_at,deadline,reason}``), a
transaction prints a ``TxResponse`` (``height``, ``txhash``, ``codespace``, ``code``, ``raw_log``).  Not
modelled: the CLI's simulation with ``--gas auto`` (which would refuse such a message before broadcasting it).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCK_S = 6.0
HOUR = 3600.0
# The market module's errors in errors.go's order: code N is the Nth (iota + 1), with the message each registers.
MARKET_ERRORS = [
    ("ErrEmptyProvider", "empty provider"),
    ("ErrSameAccount", "owner and provider are the same account"),
    ("ErrInternal", "internal error"),
    ("ErrBidOverOrder", "bid price above max order price"),
    ("ErrAttributeMismatch", "attribute mismatch"),
    ("ErrUnknownBid", "unknown bid"),
    ("ErrUnknownLease", "unknown lease"),
    ("ErrUnknownLeaseForBid", "unknown lease for bid"),
    ("ErrUnknownOrderForBid", "unknown order for bid"),
    ("ErrLeaseNotActive", "lease not active"),
    ("ErrBidNotActive", "bid not active"),
    ("ErrBidNotOpen", "bid not open"),
    ("ErrOrderNotOpen", "bid: order not open"),
    ("ErrNoLeaseForOrder", "no lease for order"),
    ("ErrOrderNotFound", "invalid order: order not found"),
    ("ErrGroupNotFound", "group not found"),
    ("ErrGroupNotOpen", "group not open"),
    ("ErrBidNotFound", "invalid bid: bid not found"),
    ("ErrBidZeroPrice", "invalid bid: zero price"),
    ("ErrLeaseNotFound", "invalid lease: lease not found"),
    ("ErrBidExists", "invalid bid: bid exists from provider"),
    ("ErrBidInvalidPrice", "bid price is invalid"),
    ("ErrOrderActive", "order active"),
    ("ErrOrderClosed", "order closed"),
    ("ErrOrderExists", "order already exists in store"),
    ("ErrOrderDurationExceeded", "order duration has exceeded the bidding duration"),
    ("ErrOrderTooEarly", "order: chain height to low for bidding"),
    ("ErrInvalidDeposit", "deposit invalid"),
    ("ErrInvalidParam", "parameter invalid"),
    ("ErrUnknownProvider", "unknown provider"),
    ("ErrInvalidBid", "invalid bid"),
    ("ErrCapabilitiesMismatch", "capabilities mismatch"),
    ("ErrInvalidLeaseClosedReason", "invalid lease closed reason"),
    ("ErrInvalidEscrowID", "invalid escrow id"),
    ("ErrLeaseNotReclamable", "lease does not have reclamation configured"),
    ("ErrLeaseAlreadyReclaiming", "reclamation already in progress"),
    ("ErrReclamationNotStarted", "reclamation not started; call MsgLeaseStartReclaim first"),
    ("ErrReclamationWindowNotElapsed", "reclamation window has not elapsed"),
    ("ErrReclamationWindowInvalid", "reclamation window outside governance bounds"),
    ("ErrReclamationRequired", "order requires reclamation but bid does not offer it"),
    ("ErrReclamationWindowTooShort", "reclamation window shorter than order minimum"),
]
BROADCAST_MODES = ("async", "sync", "block")


# Refused before the block runs the message (CheckTx: ValidateBasic, the ante handler): every broadcast mode sees it.
CHECK_TX = ("ErrUnauthorized", "ErrInvalidLeaseClosedReason")


class ChainRefusal(ValueError):
    """The chain refused a message: its error's name, codespace and code; ``raw_log`` as the reply says it."""

    def __init__(self, name: str) -> None:
        if name == "ErrUnauthorized":  # cosmos-sdk types/errors: the ante handler's signature check
            self.codespace, self.code, message = "sdk", 4, "signature verification failed: unauthorized"
        else:
            self.codespace = "market"
            self.code, message = next((n, text) for n, (known, text) in enumerate(MARKET_ERRORS, 1) if known == name)
        self.name = name
        self.in_mempool = name in CHECK_TX
        # cosmos-sdk's baseapp wraps a message server's error with the message's index.
        self.raw_log = message if self.in_mempool else f"failed to execute message; message index: 0: {message}"
        super().__init__(message)


@dataclass
class ChainLease:
    owner: str
    dseq: int
    gseq: int
    oseq: int
    provider: str
    window_s: float | None
    state: str = "active"
    started_at: int = 0  # block height
    deadline: int = 0  # unix seconds
    reason: int = 0

    @property
    def key(self) -> tuple[str, int, int, int, str]:
        return (self.owner, self.dseq, self.gseq, self.oseq, self.provider)

    def as_json(self) -> dict[str, Any]:
        reclamation = None if self.window_s is None else {
            "window": f"{self.window_s:.0f}s", "started_at": str(self.started_at), "deadline": str(self.deadline),
            "reason": self.reason}
        return {"lease": {"id": {"owner": self.owner, "dseq": str(self.dseq), "gseq": self.gseq, "oseq": self.oseq,
                                 "provider": self.provider, "bseq": 0},
                          "state": self.state, "price": {"denom": "uakt", "amount": "1.000000000000000000"},
                          "created_at": "100", "closed_on": "0", "reclamation": reclamation},
                "escrow_payment": {}}


@dataclass
class ChainStandin:
    min_window_s: float = HOUR
    max_window_s: float = 720 * HOUR
    clock: Callable[[], float] = time.time
    leases: dict[tuple[str, int, int, int, str], ChainLease] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # provider address -> its key's digest
    txs: list[dict[str, Any]] = field(default_factory=list)
    height: int = 1000
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_provider(self, address: str, key_text: str) -> None:
        self.keys[address] = hashlib.sha256(key_text.encode()).hexdigest()

    def create_lease(self, owner: str, dseq: int, provider: str, window_s: float | None, gseq: int = 1,
                     oseq: int = 1, min_window_s: float | None = None) -> ChainLease:
        """The lease a bid with ``window_s`` wins on an order that asks ``min_window_s`` at least (None: asks for
        none); raises ChainRefusal where CreateBid refuses the bid."""
        if min_window_s is not None and window_s is None:
            raise ChainRefusal("ErrReclamationRequired")
        if min_window_s is not None and window_s is not None and window_s < min_window_s:
            raise ChainRefusal("ErrReclamationWindowTooShort")
        if window_s is not None and not self.min_window_s <= window_s <= self.max_window_s:
            raise ChainRefusal("ErrReclamationWindowInvalid")
        lease = ChainLease(owner, dseq, gseq, oseq, provider, window_s)
        with self.lock:
            self.leases[lease.key] = lease
        return lease

    def lease(self, key: tuple[str, int, int, int, str]) -> ChainLease | None:
        with self.lock:
            return self.leases.get(key)

    def tenant_close(self, key: tuple[str, int, int, int, str]) -> None:
        with self.lock:
            self.leases[key].state = "closed"

    def refused(self) -> list[dict[str, Any]]:
        return [tx for tx in self.txs if tx["code"] != 0]

    def deliver(self, kind: str, key: tuple[str, int, int, int, str], signer_digest: str,
                reason: int = 10002, broadcast_mode: str = "block") -> dict[str, Any]:
        """One transaction from the provider, decided at its block's time."""
        with self.lock:
            self.height += 1
            block_time = int(self.clock() + BLOCK_S)
            lease = self.leases.get(key)
            try:
                self._check(kind, lease, key, signer_digest, reason, block_time)
                refusal = None
            except ChainRefusal as exc:
                refusal = exc
            if refusal is None and lease is not None:
                if kind == "start-reclaim":
                    lease.state, lease.started_at = "reclaiming", self.height
                    lease.deadline = block_time + int(lease.window_s or 0)
                    lease.reason = reason
                else:
                    lease.state = "closed"
            said = ({"code": 0, "codespace": "", "error": "", "raw_log": "", "in_mempool": False} if refusal is None
                    else {"code": refusal.code, "codespace": refusal.codespace, "error": refusal.name,
                          "raw_log": refusal.raw_log, "in_mempool": refusal.in_mempool})
            tx = {"kind": kind, "lease": "/".join(str(k) for k in key), **said, "block_time": block_time,
                  "height": self.height, "txhash": secrets.token_hex(32).upper(), "reason": reason,
                  "broadcast_mode": broadcast_mode}
            self.txs.append(tx)
            return tx

    def _check(self, kind: str, lease: ChainLease | None, key: tuple[str, int, int, int, str],
               signer_digest: str, reason: int, block_time: int) -> None:
        """Raises the chain's refusal (the ante handler's, ValidateBasic's, then the message server's)."""
        if self.keys.get(key[4]) != signer_digest:
            raise ChainRefusal("ErrUnauthorized")
        if not 10000 <= reason <= 19999:
            raise ChainRefusal("ErrInvalidLeaseClosedReason")
        if kind == "start-reclaim":
            if lease is None:
                raise ChainRefusal("ErrUnknownLease")
            if lease.state != "active":
                raise ChainRefusal("ErrLeaseNotActive")  # a second start included: the lease is reclaiming
            if lease.window_s is None:
                raise ChainRefusal("ErrLeaseNotReclamable")
            if lease.started_at:
                raise ChainRefusal("ErrLeaseAlreadyReclaiming")  # as the chain has it: unreachable past the above
            return
        if lease is None:
            raise ChainRefusal("ErrUnknownBid")
        if lease.state == "active" and lease.window_s is not None:
            raise ChainRefusal("ErrReclamationNotStarted")
        if lease.state == "reclaiming" and block_time < lease.deadline:
            raise ChainRefusal("ErrReclamationWindowNotElapsed")
        if lease.state not in ("active", "reclaiming"):
            raise ChainRefusal("ErrLeaseNotActive")


class ProviderPod:
    """STAND-IN ``akash-provider-0``: the key in its own folder, ``provider-services`` as argv."""

    def __init__(self, chain: ChainStandin, address: str, key_text: str) -> None:
        self.chain = chain
        self.address = address
        self.folder = Path(tempfile.mkdtemp(prefix="m2p-standin-provider-pod-"))
        self.key_file = self.folder / "key.txt"
        self.key_file.write_text(key_text)
        self.key_file.chmod(0o600)
        self.ran: list[list[str]] = []
        chain.add_provider(address, key_text)

    def run(self, argv: list[str]) -> tuple[int, str, str]:
        self.ran.append(list(argv))
        if argv[:1] != ["provider-services"]:
            return 127, "", f"exec: {argv[:1]}: executable file not found in $PATH\n"
        words = argv[1:]
        flags = _flags(words)
        try:
            key = (flags["--owner"], int(flags["--dseq"]), int(flags.get("--gseq", "1")),
                   int(flags.get("--oseq", "1")), flags.get("--provider", self.address))
        except (KeyError, ValueError):
            return 1, "", "Error: required flag(s) \"owner\", \"dseq\" not set\n"
        if words[:4] == ["query", "market", "lease", "get"]:
            lease = self.chain.lease(key)
            if lease is None:
                # The query server's ErrLeaseNotFound (node x/market/keeper/grpc_query.go), a gRPC NotFound.
                return 1, "", "Error: rpc error: code = NotFound desc = invalid lease: lease not found\n"
            return 0, json.dumps(lease.as_json()) + "\n", ""
        if words[:4] == ["tx", "market", "bid", "start-reclaim"] or words[:4] == ["tx", "market", "bid", "close"]:
            reason = flags.get("--reason", "10002")  # the CLI's default: LeaseClosedReasonUnspecified
            if not reason.isdigit() or not 10000 <= int(reason) <= 19999:
                return 1, "", "Error: invalid --reason value. expected range 10000..19999\n"
            mode = flags.get("--broadcast-mode", flags.get("-b", "block"))
            if mode not in BROADCAST_MODES:
                return 1, "", f'Error: invalid broadcast mode "{mode}". expected async|sync|block\n'
            digest = hashlib.sha256(self.key_file.read_text().encode()).hexdigest()
            kind = "start-reclaim" if words[3] == "start-reclaim" else "close"
            key = (*key[:4], self.address)  # a transaction's provider is its signer's address (WithProvider(From))
            tx = self.chain.deliver(kind, key, digest, int(reason), mode)
            if mode == "block" or tx["in_mempool"]:  # the block's verdict, or the mempool's refusal
                reply = {"height": str(tx["height"]), "txhash": tx["txhash"], "codespace": tx["codespace"],
                         "code": tx["code"], "raw_log": tx["raw_log"]}
            else:  # the mempool took it; what its block made of it is not in the reply
                reply = {"height": "0", "txhash": tx["txhash"], "codespace": "", "code": 0, "raw_log": ""}
            return 0, json.dumps(reply) + "\n", ""
        return 1, "", f"Error: unknown command {' '.join(words[:4])!r}\n"


def _flags(words: list[str]) -> dict[str, str]:
    found = {}
    for i, word in enumerate(words):
        if word.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("--"):
            found[word] = words[i + 1]
    return found
