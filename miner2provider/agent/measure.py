"""What the miner earns on this rig, measured: per-GPU hashrate and power from the mining OS's own stats,
averaged over time.  The parser is pure (golden-tested); the agent reads the file.

HiveOS [V: minershive/hiveos-linux hive/bin/agent]: the agent's loop (every ~10 s) sources the running
miner's ``h-stats.sh`` and writes the whole stats request to ``/run/hive/last_stat.json``:
``params.miner_stats`` is the miner's ``stats`` JSON (``hs``: one hashrate per GPU, ``hs_units``,
``algo``), ``params.power`` the cards' watts (gpu-stats), ``params.total_khs`` the total.  T-Rex's
h-stats.sh gives ``hs`` in H/s with ``hs_units: "hs"`` [V: hive/miners/t-rex/h-stats.sh]; other
miners say ``mhs``; with no ``hs_units`` HiveOS reads kH/s [3P: HiveOS custom-miner guide;
unverified in its scripts].  With no miner running, ``miner_stats`` is ``null``.  The same file
carries the rig's password (``params.passwd``): only the fields above are ever read out of it.

T-Rex's own HTTP API, on any mining OS (``m2p_trex_api_port``): T-Rex serves ``/summary`` on
127.0.0.1:4067 by default (``--api-bind-http``) [docs: github.com/trexminer/T-Rex/wiki/API]; HiveOS's
T-Rex integration reads ``.algorithm`` and ``.gpus[].hashrate`` (H/s) from it [V: hive/miners/t-rex/
h-stats.sh]; ``.gpus[].power`` (W) is read when present [unverified against a running T-Rex].

Other mining OSes without T-Rex: no verified stats source yet (docs/mining-os.md); their rigs
use the economics file's per-GPU figures.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from miner2provider.rigside.ledger import ALGO_CHARS

UNITS = {"hs": 1e-6, "khs": 1e-3, "mhs": 1.0, "ghs": 1e3}  # -> MH/s
SMOOTHING = 0.1  # each new sample's weight: about the last ten samples (~100 s of HiveOS's loop)
MAX_AGE_S = 24 * 3600.0  # an average older than this (the miner stopped a day ago) is no longer used


@dataclass(frozen=True)
class Sample:
    algo: str
    mhs: tuple[float, ...]  # per GPU
    watts: tuple[float, ...]  # per GPU; empty when the OS gave none


@dataclass(frozen=True)
class Average:
    algo: str
    mhs: tuple[float, ...]
    watts: tuple[float, ...]
    at: float  # the last sample's time
    samples: int

    def as_status(self) -> dict[str, Any]:
        return {"algo": self.algo, "mhs": [round(v, 3) for v in self.mhs], "watts": [round(v, 1) for v in self.watts],
                "samples": self.samples}


def hiveos_stats(text: str) -> Sample | None:
    """A Sample from ``/run/hive/last_stat.json``; None when no miner reported (or the file is torn)."""
    try:
        params = json.loads(text).get("params") or {}
        stats = params.get("miner_stats") or {}
        factor = UNITS.get(str(stats.get("hs_units") or "khs").lower())
        rates = [float(v) * factor for v in stats.get("hs") or []] if factor else []
        watts = [float(v) for v in params.get("power") or []]
    except (ValueError, TypeError, AttributeError):
        return None
    return _sample(str(stats.get("algo") or "unknown"), rates, watts)


def trex_summary(text: str) -> Sample | None:
    """A Sample from T-Rex's ``/summary``; None when it is not one (another service on the port, a miner
    starting up with no GPU hashing yet)."""
    try:
        data = json.loads(text)
        gpus = data.get("gpus") or []
        rates = [float(g["hashrate"]) / 1e6 for g in gpus]
        watts = [float(g["power"]) for g in gpus if g.get("power") is not None]
        algo = data.get("algorithm")
    except (ValueError, TypeError, AttributeError, KeyError):
        return None
    return _sample(algo or "unknown", rates, watts) if isinstance(algo, str) else None


def _sample(algo: str, rates: list[float], watts: list[float]) -> Sample | None:
    """A Sample when there is a hashrate and every figure is a real, non-negative number; watts only when
    there is one per GPU (they cannot be paired otherwise)."""
    if not rates or not all(math.isfinite(v) and v >= 0 for v in rates + watts):
        return None
    return Sample(algo[:ALGO_CHARS], tuple(rates), tuple(watts) if len(watts) == len(rates) else ())


def update(average: Average | None, sample: Sample, now: float) -> Average:
    """The rolling average with one more sample; a new algorithm or GPU count starts it again."""
    if average is None or average.algo != sample.algo or len(average.mhs) != len(sample.mhs):
        return Average(sample.algo, sample.mhs, sample.watts, now, 1)
    mhs = tuple(a + SMOOTHING * (s - a) for a, s in zip(average.mhs, sample.mhs))
    watts = (tuple(a + SMOOTHING * (s - a) for a, s in zip(average.watts, sample.watts))
             if len(average.watts) == len(sample.watts) and sample.watts else sample.watts or average.watts)
    return Average(sample.algo, mhs, watts, now, average.samples + 1)
