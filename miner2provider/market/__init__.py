"""Stage 4, register: what a marketplace sees of the rigs (labels, provider attributes, prices).

Every marketplace implements the seam in base.py and registers here (the one place that names them);
Akash is the first (market/akash/).  The rest of m2p asks for a rig's marketplace (``of_rig``: its
``m2p_marketplace``) or a farm's (``of_farm``), never for one by default.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from miner2provider.core.errors import ProviderError
from miner2provider.core.settings import NO_MARKETPLACE
from miner2provider.market.akash import AKASH
from miner2provider.market.base import Marketplace

MARKETPLACES: dict[str, Marketplace] = {AKASH.name: AKASH}
# m2p_marketplace's value where a rig sets none (the timeshare_agent role's default; a test keeps them equal).
DEFAULT = AKASH.name


def marketplace(name: str = DEFAULT) -> Marketplace:
    """The marketplace ``name`` names: a rig's comes from ``of_rig``, a farm's from ``of_farm``; DEFAULT only where
    no rig's setting can be read (a saved report, a command that reads no inventory)."""
    found = MARKETPLACES.get(name)
    if found is None:
        raise KeyError(f"no marketplace {name!r}; m2p knows {', '.join(sorted(MARKETPLACES))}")
    return found


def name_of(settings: Mapping[str, Any]) -> str:
    """The marketplace a rig's settings name (``m2p_marketplace``; unset: the setting's default), or ``none``."""
    return str(settings.get("m2p_marketplace") or DEFAULT)


def of_rig(settings: Mapping[str, Any]) -> Marketplace | None:
    """The marketplace a rig is offered on, from its settings; None: its owner's own workloads only
    (``m2p_marketplace: none``): no marketplace's labels, namespaces or rules apply to it."""
    name = name_of(settings)
    return None if name == NO_MARKETPLACE else marketplace(name)


def of_farm(rigs: Iterable[Mapping[str, Any]]) -> Marketplace:
    """The one marketplace a farm's rigs (each one's settings) are offered on; a ProviderError when they name none
    (every rig ``m2p_marketplace: none``) or several (one farm is one marketplace's provider)."""
    names = sorted({name_of(settings) for settings in rigs} - {NO_MARKETPLACE})
    if not names:
        raise ProviderError(f"every rig has m2p_marketplace: {NO_MARKETPLACE}: the farm is offered on no marketplace, "
                            "so it has no provider")
    if len(names) > 1:
        raise ProviderError(f"the rigs name several marketplaces in m2p_marketplace ({', '.join(names)}): one farm "
                            "is one marketplace's provider")
    return marketplace(names[0])


def rig_settings_problems(name: str, settings: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What a rig's settings ask that its marketplace refuses, each as (the sentence, the setting it is about):
    the inventory's check of marketplace rules (core/inventory.py's ``rig_check``).  Time slices on a marketplace
    that sells each as a whole GPU, unless the owner takes that risk (``m2p_time_slicing_on_marketplace``)."""
    replicas = settings.get("m2p_time_slicing_replicas", 1)
    if not isinstance(replicas, int) or replicas <= 1 or settings.get("m2p_time_slicing_on_marketplace", False):
        return []
    try:
        market = of_rig(settings)
    except KeyError:  # a marketplace m2p does not know: the settings' own check says so
        return []
    if market is None or not market.slices_sold_whole:
        return []
    return [(f"{name}: m2p_time_slicing_replicas {replicas} on a marketplace rig: {market.slices_sold_whole}; set "
             f"m2p_marketplace: {NO_MARKETPLACE} (your own workloads only) or m2p_time_slicing_on_marketplace: true "
             "to take that risk", "m2p_time_slicing_replicas")]
