"""Alerts in the dashboard: the rules' state kept between sweeps (in memory), judged after each sweep on what it
read, and the messages handed to the outbox (dispatch.py), which sends them off the sweep's thread.

The dashboard's sweep calls ``Alerting.sweep_done(nodes, latest)`` once it stored what it read (``latest``: every
rig's latest report, as ``History.latest_snapshots()`` gives them, read through the pages' cache)
(``after_sweep(snapshot)`` takes a Snapshot made otherwise); the provider's answers reach it through
``Alerting.watching(ask)``, which wraps the provider's status read, and the wallet's balance through
``Alerting.watching_wallet(read)``, which wraps the chain's wallet read and sets ``wallet``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from miner2provider.market.base import ProviderState
from miner2provider.market.wallet import WalletRead

from .config import AlertsConfig
from .dispatch import Outbox, Receiver, send_once
from .facts import Snapshot, snapshot_from_history
from .rules import Message, State, evaluate


class Alerting:
    def __init__(self, config: AlertsConfig, outbox: Outbox | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.outbox = outbox if outbox is not None else Outbox(config.receivers)
        self.clock = clock
        self.state = State()
        self.provider: ProviderState | None = None  # its last answer (None: not asked yet)
        # The provider's wallet (balance, currency) as last read, where the provider file names a wallet (None: not
        # read: the wallet rule is not judged), set by the reader ``watching_wallet`` wraps.
        self.wallet: tuple[float, str] | None = None
        self._lock = threading.Lock()  # a redetect's sweep may run beside the background one

    def after_sweep(self, snapshot: Snapshot, now: float | None = None) -> list[Message]:
        """Judge the rules on what the sweep read and queue what is to be said; returns at once."""
        with self._lock:
            self.state, messages = evaluate(self.state, snapshot, self.config.rules,
                                            self.clock() if now is None else now)
        self.outbox.submit(messages)
        return messages

    def sweep_done(self, nodes: Mapping[str, str], latest: Mapping[str, tuple[float, dict[str, Any] | None]],
                   now: float | None = None) -> list[Message]:
        """What the dashboard's sweep calls once it stored the rigs' reports: ``nodes``, the inventory's rigs (rig ->
        Kubernetes node); ``latest``, rig -> (stored at, report), as ``History.latest_snapshots()`` gives it."""
        return self.after_sweep(snapshot_from_history(nodes, latest, self.provider, self.wallet), now)

    def watching(self, ask: Callable[[], ProviderState]) -> Callable[[], ProviderState]:
        """``ask`` (the provider's status read) that also keeps its answer for the next sweep's judgement."""
        def asked() -> ProviderState:
            self.provider = ask()
            return self.provider
        return asked

    def watching_wallet(self, read: Callable[[], WalletRead]) -> Callable[[], WalletRead]:
        """``read`` (the chain's wallet read) that also keeps its balance for the next sweep's judgement; a read
        without a balance leaves it unknown (the rule is not judged on a figure it no longer has)."""
        def wallet_read() -> WalletRead:
            got = read()
            self.wallet = None if got.balance is None else (got.balance, got.currency)
            return got
        return wallet_read

    def close(self) -> None:
        self.outbox.close()


def test_message(now: float | None = None) -> Message:
    at = time.time() if now is None else now
    return Message("test", "test//", "test", "", "a test message from m2p: this receiver is reached", at)


def send_test(receivers: Sequence[Receiver], now: float | None = None) -> list[tuple[Receiver, str]]:
    """One test message to every receiver, one try each, side by side: (receiver, "" or why it failed)."""
    message = test_message(now)
    results: list[str] = [""] * len(receivers)

    def one(index: int) -> None:
        results[index] = send_once(receivers[index], message)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(receivers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # each receiver's own deadline bounds it
    return list(zip(receivers, results, strict=True))
