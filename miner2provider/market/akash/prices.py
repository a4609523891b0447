"""Lease price floors (market/pricing.py) in the form Akash's bid takes.  Pure.

The Akash provider chart's ``price_target_gpu_mappings`` takes USD per GPU-month (keys ``<model>``,
``<model>.<vram>``, ``<model>.<vram>.<interface>``; an unlisted model gets the highest price in the
map: helm-charts provider chart, price_script_generic.sh).
"""

from __future__ import annotations

from collections.abc import Sequence

from miner2provider.market.pricing import Floor


def akash_mappings(listed: Sequence[Floor]) -> str:
    """``price_target_gpu_mappings``: ``model.vram=USD per GPU-month`` for every model with a floor."""
    return ",".join(f"{f.key}={f.floor_per_month:.2f}" for f in listed if f.floor_per_month is not None)
