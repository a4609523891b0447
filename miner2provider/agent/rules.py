"""The agent's decisions beside the mode's (decide.py): pure, so the property tests reach every rule.

From what the tick read and the state, each returns what the effectors must do, never does it: the miner
that keeps coming back (off the market), the GPU containers that are no lease, the OS's watchdog, the
node's cordon, a state the disk would not take, and the tick's whole plan (``plan``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from miner2provider.agent import decide
from miner2provider.agent.decide import Observation, State

LEASED = frozenset({"leasing", "draining"})
# Issue 38: a miner something else brings back while the GPUs are leased (a wrapper, a cloud agent, a built-in
# watchdog) is ended each time; after this many, the rig refuses new leases rather than fight it.
RESPAWN_STRIKES = 3
RESPAWN_SENTENCE = "another supervisor restarts the miner"
WATCHDOG_RECHECK_S = 10.0
BESIDE_GRACE_S = 60.0  # a real miner takes its cards within seconds (a DAG build is longer, but holds the card)
# What the effectors get, beside decide.py's actions (those stay the tick's answer: the tests' and the loop's).
GRANT, REFUSE = "grant", "refuse"  # the GPU containers at the gate that are no lease
HOLD, HOLD_AGAIN, RELEASE = "hold", "hold-again", "release"  # the mining OS's watchdog
CORDON, UNCORDON, FORGET = "cordon", "uncordon", "forget"  # the node (FORGET: only the agent's mark of it)
REFUSE_OTHERS = ("this rig is mining: m2p hands its GPUs only to the marketplace's leases while its miner runs")


@dataclass(frozen=True)
class Rig:
    """What the tick read beside the Observation: what the rules below need and decide.py does not."""

    respawns: int = 0  # times the miner came back on its own during a hand-over
    lease_gated: bool = False  # a lease's container through the gate still runs
    others_waiting: bool = False  # a GPU container that is no lease waits at the gate
    watchdog_was: bool | None = None  # the OS's watchdog held by the agent: whether it ran before (None: not held)
    watchdog_running: bool | None = None  # read this tick (None: not read, or not readable)
    watchdog_checked: float = float("-inf")  # when it was last looked at (monotonic)
    node: tuple[bool, bool] | None = None  # (cordoned, the first design's taint on it); None: the API is down
    cordoned_here: bool = False  # the agent cordoned the node (its mark on disk, or in memory)
    drain: bool = False  # m2p ... --drain asks (<state_dir>/drain)
    gate_in_spec: bool = True  # the CDI spec carries the gate (no spec at all: nothing gets the GPUs, safe)
    cdi_spec: str = ""  # its path, as said
    mine_on: tuple[str, ...] = ()  # the cards the agent last started the miner on beside leases
    beside_since: float | None = None  # when it did (monotonic)


@dataclass(frozen=True)
class Plan:
    state: State
    actions: tuple[str, ...]  # decide.py's, in order
    refuse_leases: str = ""  # the leases' containers at the gate are refused with this sentence
    refuse_unhealthy: str = ""  # those that would get an unhealthy card (Reading.leases_refused) with this one
    others: str = ""  # GRANT or REFUSE the containers at the gate that are no lease
    watchdog: str = ""  # HOLD, HOLD_AGAIN or RELEASE
    watchdog_was: bool | None = None
    watchdog_checked: float = float("-inf")
    cordon: str = ""  # CORDON, UNCORDON or FORGET
    remove_taint: bool = False
    said: tuple[str, ...] = ()  # what the status says of this tick's decisions (the cordon's aside)
    cordon_said: tuple[str, ...] = ()


def plan(state: State, obs: Observation, rig: Rig, lease_grace_s: float | None,
         min_switch_interval_s: float) -> Plan:
    said: list[str] = []
    refuse = ""
    off_market = rig.respawns >= RESPAWN_STRIKES
    if off_market:  # off the market: a lease here would share its GPUs with a miner
        obs = replace(obs, desired=replace(obs.desired, offered=False))
        said.append(f"{RESPAWN_SENTENCE} ({rig.respawns} times during leases): no new lease until that "
                    "supervisor is stopped and the agent restarted (m2p schedule apply)")
        if obs.gate_waiting and not rig.lease_gated:
            refuse = f"{RESPAWN_SENTENCE}: this rig takes no lease now"
            obs = replace(obs, gate_waiting=False)
    others = (REFUSE if obs.miner_running or obs.gpus_busy else GRANT) if rig.others_waiting else ""
    said += idle_beside(obs, rig)
    new, actions = decide.decide(state, obs, lease_grace_s, min_switch_interval_s)
    if off_market and new.offered:  # off the market whatever else decides (a mining window given up after its grace)
        actions = [a for a in actions if a != decide.OFFER] + ([decide.UNOFFER] if state.offered else [])
        new = replace(new, offered=False)
    # A container that would get an unhealthy card is never handed it (telemetry.py refusals); gate_waiting counts
    # only the others, so the miner does for them what it would if that one had never come.
    return _with_effects(Plan(new, tuple(actions), refuse, obs.gate_unhealthy, others, said=tuple(said)),
                         rig, obs.now)


def _with_effects(plan: Plan, rig: Rig, now: float) -> Plan:
    """The watchdog and the cordon the plan's state asks for."""
    watchdog, was, checked = watchdog_rule(plan.state.mode, rig, now)
    cordon, lacks = cordon_rule(plan.state, rig)
    return replace(plan, watchdog=watchdog, watchdog_was=was, watchdog_checked=checked, cordon=cordon,
                   remove_taint=rig.node is not None and rig.node[1], cordon_said=lacks)


def idle_beside(obs: Observation, rig: Rig) -> tuple[str, ...]:
    """A miner started beside a lease that holds none of its cards a while later: most likely its flight sheet
    names devices by index (T-Rex ``-d 0,1``), which counts among the visible cards only, and it does not
    start.  The lease is safe; the rig mines nothing, as if it handed over whole: said."""
    mine_on = set(rig.mine_on)
    if (mine_on and obs.held and obs.miner_running and rig.beside_since is not None
            and obs.now - rig.beside_since >= BESIDE_GRACE_S and not obs.busy_cards & mine_on):
        return (f"the miner started on the {len(mine_on)} card(s) no lease holds runs on none of them after "
                f"{BESIDE_GRACE_S:g} s (does its flight sheet name devices by index?)",)
    return ()


def watchdog_rule(mode: str, rig: Rig, now: float) -> tuple[str, bool | None, float]:
    """While any lease runs (leasing, draining; per card too) the OS's watchdog is held: it would reboot the rig
    under the lease (HiveOS ``wd``: a load average over WD_MAX_LA, low hashrate for WD_REBOOT minutes) or restart
    the miner on every card.  Held once, whether it ran or not, and looked at again every WATCHDOG_RECHECK_S
    (something of the OS may start it again); after the leases it is given back exactly as it was."""
    leased = mode in LEASED
    if leased and rig.watchdog_was is None:
        if rig.watchdog_running is None:
            return "", None, rig.watchdog_checked  # not read this tick: held at the next
        return HOLD, rig.watchdog_running, now
    if leased and now - rig.watchdog_checked >= WATCHDOG_RECHECK_S:
        return (HOLD_AGAIN if rig.watchdog_running else ""), rig.watchdog_was, now
    if not leased and rig.watchdog_was is not None:
        return RELEASE, None, rig.watchdog_checked
    return "", rig.watchdog_was, rig.watchdog_checked


def released_as(planned: Plan, rig: Rig) -> bool | None:
    """How the watchdog was before the leases, for its release (the plan forgets it as it releases)."""
    return rig.watchdog_was if planned.watchdog == RELEASE else planned.watchdog_was


def watchdog_wanted(mode: str, obs: Observation, rig: Rig) -> bool:
    """Whether the tick must read the watchdog: a lease may be held after this tick's decision (it needs the
    watchdog's state before the hold), or the held watchdog is due a look."""
    if rig.watchdog_was is not None:
        return obs.now - rig.watchdog_checked >= WATCHDOG_RECHECK_S
    return (mode in LEASED or obs.gate_waiting or obs.leases > 0 or obs.gated > 0
            or (obs.desired.offered and not obs.desired.idle_mining))


def cordon_rule(state: State, rig: Rig) -> tuple[str, tuple[str, ...]]:
    """The node is cordoned outside offered time (the marketplace's inventory drops an unschedulable node; running
    pods stay) and while ``m2p ... --drain`` asks.  It is uncordoned only if the agent cordoned it: an owner's own
    cordon stays.  Idle mining needs the gate in the CDI spec (a spec regenerated without it would let a lease's
    container start beside the miner)."""
    if rig.node is None:
        return "", ()
    lacks = not rig.drain and state.offered and state.mode == "idle-mining" and not rig.gate_in_spec
    wanted = rig.drain or not state.offered or lacks
    said = (f"{rig.cdi_spec} lacks m2p's gate: not offered while mining; run m2p convert",) if lacks else ()
    cordoned = rig.node[0]
    if wanted and not cordoned:
        return CORDON, said
    if not wanted and rig.cordoned_here:
        return (UNCORDON if cordoned else FORGET), said
    return "", said


def unrecorded(planned: Plan, before: State, rig: Rig, now: float, where: str) -> Plan:
    """The state could not be written (a full or read-only USB stick).  A switch away from mining is not made
    unrecorded (after a restart the agent would not know it made it): the rig stays as it is and leaves the
    market, since it could not hand its GPUs over.  Toward mining (start, cordon) it goes on: mining is where
    the rig returns to anyway."""
    actions = planned.actions
    if not any(a in (decide.STOP_MINER, decide.OFFER) for a in actions):
        return planned
    kept = replace(planned, state=replace(before, offered=False), said=(
        *planned.said, f"cannot write {where}: not switching ({' '.join(actions)}) and off the market until it can"),
        actions=(decide.UNOFFER,) if before.offered else ())
    return _with_effects(kept, rig, now)
