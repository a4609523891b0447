"""The agent's modes, what it sees and what it may do: the shapes decide.py and per_card.py share.  Py38."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable  # not collections.abc: ToMode below is evaluated, on 3.8 too

from miner2provider.timeshare.policy import Desired

# Actions, carried out in order by the agent's effectors (act.py: mining-OS adapter, cluster client, gate).
STOP_MINER = "stop-miner"
START_MINER = "start-miner"
OFFER = "offer"  # uncordon the node (the marketplace may place leases)
UNOFFER = "unoffer"  # cordon the node (running leases stay)
GRANT = "grant"  # let the containers waiting at the gate start: the GPUs are free of the miner
RESET_CLOCKS = "reset-clocks"  # put the leased cards that were tuned again (a dashboard OC push) back on defaults
CAME_BACK_LIMIT = 2


@dataclass(frozen=True)
class Observation:
    # Seconds on the clock every interval is measured on: the agent's monotonic clock, so that no step of
    # the wall clock (a rig booting without an RTC battery, NTP) holds a switch back or hurries it.
    now: float
    desired: Desired
    api_ok: bool  # the pods on this node and the node itself could be read
    leases: int  # pods bound to this node with GPUs, not finished (API)
    gated: int  # containers the gate let through whose process still runs (the rig's own record)
    gate_waiting: bool  # a container waits at the gate for the GPUs
    miner_running: bool
    gpus_busy: bool  # NVML: a process outside every container holds a GPU (the miner, letting go)
    wall: float | None = None  # the wall clock at ``now``: when a mode began, as said (None: ``now`` is it)
    # Per card.  cards: the rig's GPUs (UUIDs) where the miner can be started on some of them; () where the
    # whole rig is the unit.  held: the cards the leases' containers hold or wait for (None: a lease whose
    # cards are unknown).  busy_cards: the cards a process outside every container holds (NVML).
    cards: tuple[str, ...] = ()
    held: frozenset[str] | None = frozenset()
    busy_cards: frozenset[str] = frozenset()
    # The leased cards found off their defaults again (NVML's recheck: a power limit or an offset the mining OS
    # set during the lease, HiveOS's nvidia-oc tuning every card).
    retuned: frozenset[str] = frozenset()
    # Health (telemetry.py): the cards lost, with a recent Xid or over the owner's temperature limit (UUIDs), and why
    # some lease containers at the gate must not get their cards ("": none); ``gate_waiting`` counts only the others.
    unhealthy: frozenset[str] = frozenset()
    gate_unhealthy: str = ""


@dataclass(frozen=True)
class State:
    mode: str = "mining"  # mining | idle-mining | leasing | draining
    since: float = 0.0  # wall clock
    last_switch: float = float("-inf")  # last miner start or stop by the agent (Observation.now's clock)
    drain_started: float | None = None  # (Observation.now's clock)
    gave_up: tuple[bool, bool] | None = None  # Desired.key of the mining window given up
    offered: bool = False  # the agent has uncordoned the node (OFFER) and not cordoned it since
    mine_on: tuple[str, ...] = ()  # the cards the agent last started the miner on (): every card
    last_was_stop: bool = False  # the agent's last switch stopped the miner (a restart on the free cards may follow)
    # Times the miner came back on a leased card after the agent started it on the free ones (the OS restarted
    # it on every card: HiveOS ``hello``, a dashboard push; or its own script names the cards): from the second,
    # the rig hands over whole until no lease holds a card.
    came_back: int = 0

    @property
    def whole_rig(self) -> bool:
        return self.came_back >= CAME_BACK_LIMIT


ToMode = Callable[..., State]


def leased(obs: Observation) -> bool:
    return obs.leases > 0 or obs.gated > 0


def offer(state: State, offer: bool) -> tuple[State, list[str]]:
    """Cordon or uncordon once: the action only when the agent's own record differs."""
    if state.offered == offer:
        return state, []
    return replace(state, offered=offer), [OFFER if offer else UNOFFER]
