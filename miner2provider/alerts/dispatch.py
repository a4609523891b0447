"""Sending alerts off the sweep's thread: one worker and one bounded queue per receiver, so that a receiver that
is down, slow or trickling holds neither the sweep nor the other receivers.

``Outbox.submit`` never blocks: a message finds its receiver's queue full (QUEUE_SIZE messages waiting: that
receiver has been failing for a while) is dropped for that receiver and counted (``Delivery.dropped``), the other
receivers still get it.  A failed send is tried again after a backoff that doubles (BACKOFF_S, 2x, 4x), up to
ATTEMPTS tries; then it is given up and counted.  Every reason kept passes ssh.redact with the receiver's secrets.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from miner2provider.core.inventory import Secret
from miner2provider.detect.ssh import redact

from .receivers import SendFailed
from .rules import Message

QUEUE_SIZE = 100
ATTEMPTS = 4
BACKOFF_S = 2.0


class Receiver(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    def send(self, message: Message) -> None:
        """Deliver ``message`` or raise SendFailed (a reason without secrets)."""
        ...

    def secrets(self) -> tuple[Secret, ...]:
        ...


@dataclass
class Delivery:
    """What became of one receiver's messages since the dashboard started."""

    sent: int = 0
    given_up: int = 0
    dropped: int = 0
    retries: int = 0
    last_error: str = ""


def reason(receiver: Receiver, exc: BaseException) -> str:
    """Why ``receiver`` failed, in one line, its secrets masked (an unforeseen error too: its text may quote one)."""
    said = str(exc) if isinstance(exc, SendFailed) else f"{type(exc).__name__}: {exc}"
    return redact(" ".join(said.split()), receiver.secrets())[:300]


def send_once(receiver: Receiver, message: Message) -> str:
    """One try: "" when delivered, else why not (``m2p alerts test``)."""
    try:
        receiver.send(message)
    except Exception as exc:  # noqa: BLE001 - any failure of a receiver is that receiver's, said and contained
        return reason(receiver, exc) or type(exc).__name__
    return ""


class Outbox:
    def __init__(self, receivers: Sequence[Receiver], attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S,
                 queue_size: int = QUEUE_SIZE) -> None:
        self.receivers = tuple(receivers)
        self.attempts, self.backoff_s = attempts, backoff_s
        self.delivery = {r.name: Delivery() for r in self.receivers}
        self._queues: dict[str, queue.Queue[Message]] = {r.name: queue.Queue(queue_size) for r in self.receivers}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._workers = [threading.Thread(target=self._work, args=(r,), name=f"m2p-alerts-{r.kind}", daemon=True)
                         for r in self.receivers]
        for worker in self._workers:
            worker.start()

    def submit(self, messages: Iterable[Message]) -> None:
        """Queue ``messages`` for every receiver; returns at once (a full queue drops the message there)."""
        for message in messages:
            for receiver in self.receivers:
                try:
                    self._queues[receiver.name].put_nowait(message)
                except queue.Full:
                    with self._lock:
                        self.delivery[receiver.name].dropped += 1

    def wait(self, timeout_s: float) -> bool:
        """Until every queued message is sent or given up (tests, a clean stop); False at the timeout."""
        done = threading.Event()

        def joined() -> None:
            for q in self._queues.values():
                q.join()
            done.set()

        threading.Thread(target=joined, daemon=True).start()
        return done.wait(timeout_s)

    def accounts(self) -> list[tuple[str, str, Delivery]]:
        """(receiver, its kind, a copy of its account) for each receiver: what /metrics exports."""
        with self._lock:
            return [(r.name, r.kind, dataclasses.replace(self.delivery[r.name])) for r in self.receivers]

    def close(self) -> None:
        """Stop the workers: a backoff under way ends now, a message still queued is not sent."""
        self._stop.set()

    def _work(self, receiver: Receiver) -> None:
        waiting = self._queues[receiver.name]
        while not self._stop.is_set():
            try:
                message = waiting.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self._deliver(receiver, message)
            finally:
                waiting.task_done()

    def _deliver(self, receiver: Receiver, message: Message) -> None:
        account = self.delivery[receiver.name]
        for attempt in range(self.attempts):
            why = send_once(receiver, message)
            with self._lock:
                if not why:
                    account.sent += 1
                    return
                account.last_error = why
                account.retries += attempt < self.attempts - 1
            if attempt < self.attempts - 1 and self._stop.wait(self.backoff_s * 2**attempt):
                break
        with self._lock:
            account.given_up += 1
