"""STAND-IN Akash chain (the market module's leases under AEP-82) and the provider pod's ``provider-services``.

No chain runs here.  The stand-in keeps leases and enforces the rules m2p's reclaimer lives by, as AEP-82
states them (akash-network/AEP ``spec/aep-82``, Final 2026-06-11; node v2.1.0 ``x/market``):

- a lease's window comes from the winning bid and must lie within the governance bounds
  ``min_reclamation_window`` / ``max_reclamation_window`` (defaults 1 h and 720 h; a test chain sets its
  own, as a devnet's genesis may: ``ErrReclamationWindowInvalid`` otherwise);
- ``MsgLeaseStartReclaim``: signer the lease's provider; the lease active, with a reclamation record
  (``ErrLeaseNotReclamable``), not started (``ErrLeaseAlreadyReclaiming``), reason 10000-19999; the lease
  turns ``reclaiming`` with ``deadline = block_time + window``;
- ``MsgCloseBid`` by the provider: refused for an active lease with a window (``ErrReclamationNotStarted``)
  and for a reclaiming one before its deadline (``ErrReclamationWindowNotElapsed``); otherwise the lease
  closes.  A lease without a window closes at once (the old behaviour).  The chain never closes a
  reclaiming lease by itself.
- A transaction lands in the next block: its block time is ``BLOCK_S`` after it was sent (a deadline is
  never earlier than the sender thinks).  Every transaction, accepted or refused, is kept in ``txs``: a
  refused one costs a real provider its fee, and the tests assert there was none.

``ProviderPod`` stands for ``akash-provider-0``: it holds the wallet key (in its own private folder) and
runs ``provider-services`` commands given as argv, the only way m2p's reclaimer reaches the chain (through
the stand-in API's ``pods/exec``).  Their output is shaped as the CLI's ``--output json``: a query prints
``QueryLeaseResponse`` (``lease.state``, ``lease.reclamation.{window,started_at,deadline,reason}``), a
transaction prints a ``TxResponse`` (``code``, ``raw_log``, ``txhash``).
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
                     oseq: int = 1) -> ChainLease:
        if window_s is not None and not self.min_window_s <= window_s <= self.max_window_s:
            raise ValueError("ErrReclamationWindowInvalid: window outside governance bounds")
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
                reason: int = 0) -> dict[str, Any]:
        """One transaction from the provider, decided at its block's time."""
        with self.lock:
            self.height += 1
            block_time = int(self.clock() + BLOCK_S)
            lease = self.leases.get(key)
            error = self._refusal(kind, lease, key, signer_digest, reason, block_time)
            if not error and lease is not None:
                if kind == "start-reclaim":
                    lease.state, lease.started_at = "reclaiming", self.height
                    lease.deadline = block_time + int(lease.window_s or 0)
                    lease.reason = reason
                else:
                    lease.state = "closed"
            tx = {"kind": kind, "lease": "/".join(str(k) for k in key), "code": 1 if error else 0,
                  "raw_log": error, "block_time": block_time, "height": self.height,
                  "txhash": secrets.token_hex(32).upper()}
            self.txs.append(tx)
            return tx

    def _refusal(self, kind: str, lease: ChainLease | None, key: tuple[str, int, int, int, str],
                 signer_digest: str, reason: int, block_time: int) -> str:
        if self.keys.get(key[4]) != signer_digest:
            return "unauthorized: the signer is not the lease's provider"
        if lease is None:
            return "ErrLeaseNotFound: lease not found"
        if kind == "start-reclaim":
            if lease.state != "active":
                return "ErrLeaseAlreadyReclaiming" if lease.state == "reclaiming" else "lease not active"
            if lease.window_s is None:
                return "ErrLeaseNotReclamable: lease does not have reclamation configured"
            if not 10000 <= reason <= 19999:
                return "invalid reason: not in the provider range 10000-19999"
            return ""
        if lease.state not in ("active", "reclaiming"):
            return "lease not active"
        if lease.state == "active" and lease.window_s is not None:
            return "ErrReclamationNotStarted: provider must call MsgLeaseStartReclaim before closing"
        if lease.state == "reclaiming" and block_time < lease.deadline:
            return "ErrReclamationWindowNotElapsed: reclamation window has not yet expired"
        return ""


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
                return 1, "", "Error: rpc error: code = NotFound desc = lease not found\n"
            return 0, json.dumps(lease.as_json()) + "\n", ""
        if words[:4] == ["tx", "market", "bid", "start-reclaim"] or words[:4] == ["tx", "market", "bid", "close"]:
            digest = hashlib.sha256(self.key_file.read_text().encode()).hexdigest()
            kind = "start-reclaim" if words[3] == "start-reclaim" else "close"
            tx = self.chain.deliver(kind, key, digest, int(flags.get("--reason", "0")))
            reply = {"height": str(tx["height"]), "txhash": tx["txhash"], "code": tx["code"], "raw_log": tx["raw_log"]}
            return 0, json.dumps(reply) + "\n", ""
        return 1, "", f"Error: unknown command {' '.join(words[:4])!r}\n"


def _flags(words: list[str]) -> dict[str, str]:
    found = {}
    for i, word in enumerate(words):
        if word.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("--"):
            found[word] = words[i + 1]
    return found
