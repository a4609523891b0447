"""Stage 4, register: what a marketplace sees of the rigs (labels, provider attributes, prices).

Every marketplace implements the seam in base.py and registers here (the one place that names them);
Akash is the first (market/akash/).  The rest of m2p asks ``marketplace(name)``.
"""

from __future__ import annotations

from miner2provider.market.akash import AKASH
from miner2provider.market.base import Marketplace

MARKETPLACES: dict[str, Marketplace] = {AKASH.name: AKASH}
DEFAULT = AKASH.name


def marketplace(name: str = DEFAULT) -> Marketplace:
    found = MARKETPLACES.get(name)
    if found is None:
        raise KeyError(f"no marketplace {name!r}; m2p knows {', '.join(sorted(MARKETPLACES))}")
    return found
