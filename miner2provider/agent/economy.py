"""The agent's economy: the miner's measured rate and policy profit's quote and offer, each with its own
cache, around the pure parts (measure.py, timeshare/profit.py).  The service asks it once a tick
(``sample``, ``price``) and saves what ``saved()`` returns when it says something changed."""

from __future__ import annotations

import http.client
import os
import urllib.parse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from miner2provider.agent import measure
from miner2provider.core.errors import EconomicsError
from miner2provider.timeshare import economics, profit
from miner2provider.timeshare.model import Schedule

STATS_EVERY_S = 10.0  # T-Rex's API is asked this often while the miner runs (HiveOS's own loop: ~10 s)
MEASURED_SHOWN_S = 600.0  # the measured average goes into status and state at most this often (USB sticks)


@dataclass
class MinerStats:
    """The miner's own stats, averaged (measure.py): from the mining OS's stats file when it is written
    anew, or from T-Rex's API every STATS_EVERY_S; only while the miner runs (a stopped miner's last stats
    are not its rate)."""

    hashrate_file: str = ""
    trex_api: str = ""
    measured: measure.Average | None = None  # the miner's hashrate and power, averaged
    shown: measure.Average | None = None  # ``measured`` as last put into status and state.json
    _seen: float = float("nan")  # the stats file's mtime, or when T-Rex's API was last asked

    def sample(self, now: float, miner_running: bool) -> bool:
        """One more sample when there is one; True when ``shown`` changed (status and state to write)."""
        if not miner_running:
            return False
        if self.trex_api:
            if now - self._seen < STATS_EVERY_S:
                return False
            self._seen = now
            sample = measure.trex_summary(_loopback_get(self.trex_api))
        elif not self.hashrate_file:
            return False
        else:
            sample = self._stats_file(self.hashrate_file)
        if sample is None:
            return False
        self.measured = measure.update(self.measured, sample, now)
        if self.shown is None or now - self.shown.at >= MEASURED_SHOWN_S or self.shown.algo != sample.algo:
            self.shown = self.measured
            return True
        return False

    def _stats_file(self, path: str) -> measure.Sample | None:
        try:
            mtime = os.stat(path).st_mtime
            if mtime == self._seen:
                return None
            self._seen = mtime
            return measure.hiveos_stats(Path(path).read_text(errors="replace"))
        except OSError:
            return None

    def hashrates(self, now: float) -> profit.Hashrates | None:
        m = self.measured
        return (m.algo, m.mhs, m.watts) if m is not None and now - m.at <= measure.MAX_AGE_S else None

    def restore(self, saved: dict[str, Any] | None) -> None:
        if saved:
            self.measured = self.shown = measure.Average(saved["algo"], tuple(saved["mhs"]), tuple(saved["watts"]),
                                                         saved["at"], saved["samples"])


@dataclass
class ProfitQuote:
    """Policy profit: the economics file (parsed again only when its mtime changes; a broken file is
    reported in the quote and decides nothing), the rig's quote, and the offer with its hysteresis."""

    path: str = ""
    offer: profit.Offer = field(default_factory=profit.Offer)
    quote: profit.Quote | None = None
    _file: tuple[float, economics.Economics | None, str] = (float("nan"), None, "")  # (mtime, file, error)

    def load(self) -> economics.Economics | None:
        if not self.path:
            self._file = (float("nan"), None, "no economics file (m2p schedule apply --economics FILE)")
            return None
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError as exc:
            self._file = (float("nan"), None, f"economics file {self.path}: {exc.strerror}")
            return None
        if mtime != self._file[0]:
            try:
                self._file = (mtime, economics.load(self.path), "")
            except EconomicsError as exc:
                self._file = (mtime, None, str(exc))
        return self._file[1]

    def price(self, now: float, schedule: Schedule, cards: dict[str, int],
              hashrates: profit.Hashrates | None, leased_gpus: int = 0) -> bool:
        """Quote the rig and move the offer (profit.py); True when the offer changed (state to write).
        ``leased_gpus``: the GPUs the running leases hold, said beside the quote (profit.leased)."""
        figures = self.load()
        if figures is None:
            self.quote = profit.Quote(None, None, self._file[2])
        else:
            self.quote = profit.leased(
                profit.priced(profit.quote(cards, figures, hashrates), schedule.hysteresis,
                              schedule.reclamation_window_s, schedule.min_switch_interval_s),
                leased_gpus, sum(cards.values()))
        offer = profit.decide_offer(self.offer, self.quote, now, schedule.hysteresis, schedule.min_switch_interval_s)
        changed = offer != self.offer
        self.offer = offer
        return changed

    def restore(self, saved: dict[str, Any] | None) -> None:
        if saved:
            self.offer = profit.Offer(**saved)

    def saved(self) -> dict[str, Any]:
        return asdict(self.offer)


def _loopback_get(url: str) -> str:
    """GET a miner's API on the rig's own loopback (the role only ever writes http://127.0.0.1:PORT/...);
    "" when it does not answer (a miner starting, another miner on the rig)."""
    parts = urllib.parse.urlsplit(url)
    try:
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=1)
        try:
            conn.request("GET", parts.path or "/")
            response = conn.getresponse()
            body = response.read(1_000_000) if response.status == 200 else b""
        finally:
            conn.close()
    except (OSError, ValueError, http.client.HTTPException):
        return ""
    return body.decode(errors="replace")
