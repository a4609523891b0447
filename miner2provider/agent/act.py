"""The agent's effectors: they carry out exactly the plan they get (rules.py, decide.py) and decide nothing.

The miner (the mining OS's own commands, the cards' clocks around a hand-over), the gate's answers, the OS's
watchdog and the node's cordon.  What they learn while doing it (a miner that came back on its own, a clock a
driver could not reset) is kept in ``HandOver`` for the next tick's reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from miner2provider.agent import decide, rules
from miner2provider.agent.config import Config
from miner2provider.agent.gate import GateDir
from miner2provider.agent.gpus import ALL, LEASED, GpuSight, outside_cards
from miner2provider.rigside import kube

Say = Callable[[str], None]


@dataclass
class HandOver:
    """What the effectors did to the miner and the cards, kept between ticks."""

    # The cards reset since the miner last started on every card (ALL: every card): once per lease's cards, not
    # per container.
    clocks_reset: frozenset[str] = frozenset()
    unreset: str = ""  # what the last reset could not do (said while the leases run)
    stopped_for_lease: bool = False  # the agent stopped the miner for this hand-over and has not started it since
    beside_since: float | None = None  # when the agent last started the miner on some cards (monotonic)
    respawns: int = 0  # times the miner came back on its own during a hand-over (until the agent restarts)


@dataclass
class Effectors:
    config: Config
    gates: GateDir
    gpus: GpuSight
    hand: HandOver
    holders: Callable[[], list[int]]  # processes outside every container that hold a GPU (NVML)
    by_card: Callable[[], dict[str, list[int]]]
    monotonic: Callable[[], float]
    say: Say

    def mode_actions(self, actions: tuple[str, ...], mode: str, mine_on: tuple[str, ...],
                     waiting: list[Path], handed: frozenset[str] | None) -> None:
        """decide.py's actions, in order.  OFFER and UNOFFER live in the state (State.offered): the node's
        cordon follows it (``node``)."""
        for action in actions:
            if action == decide.STOP_MINER:
                self.stop_miner(mode, waiting)
            elif action == decide.START_MINER:
                self.start_miner(mine_on)
            elif action == decide.RESET_CLOCKS:
                self.config.clocks.reset(cards=self.gpus.retuned)
                self.say(f"{len(self.gpus.retuned)} leased card(s) were tuned again during the lease (the mining "
                         "OS's OC, a dashboard push?): put back on their defaults")
            elif action == decide.GRANT:
                self.hand_over_clocks(handed, waiting)
                self.gates.grant(waiting)

    def stop_miner(self, mode: str, waiting: list[Path]) -> None:
        if self.hand.stopped_for_lease and mode in LEASED:
            self.hand.respawns += 1  # the agent did not start it: something else did
        self.hand.stopped_for_lease = mode in LEASED
        self.gpus.forget()  # ask NVML again before handing GPUs over
        try:
            self.config.miner.stop(self.holders)
        except (RuntimeError, OSError) as exc:
            # Fail closed and say why: a waiting container is refused now rather than at its timeout.
            self.gates.refuse(f"the miner could not be stopped: {exc}", waiting)
            raise

    def start_miner(self, cards: tuple[str, ...]) -> None:
        """On every card (the OS's clocks re-applied first), or on ``cards`` beside leases: there the OS's
        clocks are not re-applied, since its command tunes every card (HiveOS's nvidia-oc), the leased ones
        too; the miner mines on the defaults the hand-over set until the leases end."""
        if not cards:
            self.hand.clocks_reset, self.hand.unreset = frozenset(), ""
            try:
                self.config.clocks.reapply()
            except (RuntimeError, OSError) as exc:  # the miner runs on the cards' defaults: safe, slower
                self.say(f"clocks: {exc}")
        self.hand.stopped_for_lease = False
        self.hand.beside_since = self.monotonic() if cards else None
        self.gpus.forget()  # ask NVML again: the miner takes its cards
        self.config.miner.start(cards, holding=lambda: self._miner_holds(cards))

    def _miner_holds(self, cards: tuple[str, ...]) -> bool:
        """A process outside every container holds ``cards`` (every card: any GPU): the start took."""
        if not cards:
            return bool(self.holders())
        return bool(set(cards) & outside_cards(self.by_card))

    def hand_over_clocks(self, cards: frozenset[str] | None, waiting: list[Path]) -> None:
        """The cards a container gets (None: every card) on their defaults before it runs: only those (the
        others mine on beside it, on the owner's tuning), each once per hand-over."""
        if ALL in self.hand.clocks_reset:
            return
        todo = None if cards is None else cards - self.hand.clocks_reset
        if todo is not None and not todo:
            return
        try:
            left = self.config.clocks.reset(cards=todo)
        except (RuntimeError, OSError) as exc:
            # Fail closed: a lease on mining clocks may compute wrong; the container is told why.
            self.gates.refuse(f"the GPUs' clocks could not be reset to their defaults: {exc}", waiting)
            raise
        if left:  # a driver whose NVML lacks a call: the rest is reset, the lease runs, the owner is told
            self.hand.unreset = f"this driver's NVML cannot reset {', '.join(left)}: left as the owner tuned them"
        self.hand.clocks_reset |= {ALL} if todo is None else todo

    def gate_answers(self, plan: rules.Plan, leases: list[Path], others: list[Path], sick: list[Path]) -> None:
        """The containers at the gate the plan refuses (the leases', the miner keeps coming back; ``sick``: those
        that would get an unhealthy card) or answers (the ones that are no lease: refused while the miner holds
        the cards, let through while it does not)."""
        self.gates.sweep()
        if plan.refuse_unhealthy:
            self.gates.refuse(plan.refuse_unhealthy, sick)
        if plan.refuse_leases:
            self.gates.refuse(plan.refuse_leases, leases)
        if plan.others == rules.REFUSE:
            self.gates.refuse(rules.REFUSE_OTHERS, others)
        elif plan.others == rules.GRANT:
            self.gates.grant(others)

    def watchdog(self, action: str, was: bool | None) -> None:
        """Hold the mining OS's watchdog (again), or give it back as it was before the leases (``was``)."""
        miner = self.config.miner
        try:
            if action in (rules.HOLD, rules.HOLD_AGAIN):
                miner.hold_watchdog()
                if action == rules.HOLD_AGAIN:
                    self.say("the mining OS started its watchdog during a lease: stopped again")
            elif action == rules.RELEASE:
                miner.release_watchdog(bool(was))
        except (RuntimeError, OSError) as exc:
            self.say(f"watchdog: {exc}")


@dataclass
class NodeSync:
    """The node's cordon, as the plan asks; ``mark`` remembers on disk that the agent cordoned it."""

    mark: Path
    here: bool = False  # the agent cordoned the node (also on disk, when the disk lets it)

    def cordoned_here(self) -> bool:
        return self.here or self.mark.exists()

    def carry_out(self, client: kube.KubeClient, name: str, plan: rules.Plan, node: dict[str, Any] | None,
                  clock: Callable[[], float], say: Say) -> None:
        if node is None:
            return
        if plan.remove_taint:
            try:  # as the rig's kubelet it may not (NodeRestriction): schedule apply removes it from the server
                client.patch_node(name, kube.without_old_taint(node))
            except kube.ApiError as exc:
                say(f"the first time-share's {kube.OLD_MINING_TAINT_KEY} taint stays on the node ({exc}): "
                    f"m2p schedule apply removes it through the server")
        try:
            if plan.cordon == rules.CORDON:
                self.cordon(client, name, clock, say)
            elif plan.cordon in (rules.UNCORDON, rules.FORGET):
                if plan.cordon == rules.UNCORDON:
                    client.patch_node(name, {"spec": {"unschedulable": None}})
                self.here = False
                self.mark.unlink(missing_ok=True)
        except (kube.ApiError, OSError) as exc:
            say(f"cordon: {exc}")

    def cordon(self, client: kube.KubeClient, name: str, clock: Callable[[], float], say: Say) -> None:
        """Remembered in memory too: a disk that cannot take the mark does not leave the node cordoned for good."""
        self.here = True
        try:
            self.mark.write_text(f"{clock():.0f}\n")
        except OSError as exc:
            say(f"cordon mark: {exc}")
        client.patch_node(name, {"spec": {"unschedulable": True}})
