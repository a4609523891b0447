"""The on-rig time-share agent.  Each tick (``interval_s``) reads as:

1. **read** (read.py): the schedule's wish at this instant (policy.py, the profit quote), the cluster (pods on
   this node, the node; an unreachable API leaves the leases as last read), the miner (the mining OS's own
   command), NVML (processes outside every container), the gate (containers waiting for the GPUs, and those
   let through that still run), the OS's watchdog and the files m2p and the owner leave on the rig;
2. **decide** (decide.py for the mode, rules.py for the rest): every decision, as a plan of actions;
3. **save**: the state, once, before anything is done (a switch the disk cannot record is not made: rules.py);
4. **do** (act.py): the effectors carry out exactly the plan: the gate's answers, the miner, the OS's
   watchdog, the node's cordon;
5. **record**: a ledger line when something changed;
6. **publish** (publish.py): ``status.json`` and, on the node, the status annotation, the mode label and
   the GPU labels of ``/var/lib/m2p/node-labels.json`` (gpu_attributes), each only when it changed.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from miner2provider import __version__
from miner2provider.agent import act, decide, economy, gate, measure, nvml, publish, read, record, rules
from miner2provider.agent.config import Config
from miner2provider.agent.decide import State
from miner2provider.agent.gpus import GpuSight
from miner2provider.agent.read import boot_id
from miner2provider.agent.sight import Sight
from miner2provider.rigside import disk, kube, ledger
from miner2provider.rigside.status import MODE_LABEL
from miner2provider.timeshare import model, policy, profit

__all__ = ["Agent", "Config", "ledger", "policy"]  # ledger, policy: the tests' seams
# m2p's first time-share held idle GPUs with a placeholder pod (the marketplace never bid): its label goes.
OLD_PLACEHOLDER_LABEL = "m2p.io/placeholder"


@dataclass
class Agent:
    config: Config
    client: kube.KubeClient
    gpu_processes: Any = nvml.gpu_processes
    gpu_processes_by_card: Any = nvml.gpu_processes_by_card
    clock: Any = time.time  # the wall clock: what is said (status, ledger) and the schedule's windows
    # Intervals (switching, the drain's grace, rechecks) run on the monotonic clock, which no step of the
    # wall clock moves (a rig without an RTC battery boots in the past; NTP steps it later).
    monotonic: Any = time.monotonic
    boot: str = field(default_factory=boot_id)
    state: State = field(default_factory=State)
    last_error: str = ""
    watchdog_was: bool | None = None  # the OS's watchdog held by the agent: whether it ran before (None: not held)
    watchdog_checked: float = float("-inf")
    seen: Sight = field(default_factory=Sight)  # what the agent last saw of its node and the gate
    gpus: GpuSight = field(default_factory=GpuSight)
    hand: act.HandOver = field(default_factory=act.HandOver)
    windows: record.Windows = field(default_factory=record.Windows)
    _api_connections: dict[Any, Any] = field(default_factory=dict)  # kept from tick to tick (kube.one_connection)
    _saved: str = ""  # state.json's content as last written

    def __post_init__(self) -> None:
        self.schedule = model.load(self.config.schedule)
        self.stats = economy.MinerStats(self.config.hashrate_file, self.config.trex_api)
        self.profit = economy.ProfitQuote(self.config.economics)
        self.publisher = publish.Publisher(Path(self.config.state_dir) / "status.json")
        self.dir = Path(self.config.state_dir)
        self.gates = gate.GateDir(self.dir / "gate")
        self.node_sync = act.NodeSync(self.dir / "cordoned")
        self.book = record.Ledger(self.dir)
        saved = _read_json(self.dir / "state.json")
        if saved:
            state = dict(saved.get("state", {}))
            if state.get("gave_up") is not None:
                state["gave_up"] = tuple(state["gave_up"])
            state["mine_on"] = tuple(str(card) for card in state.get("mine_on") or ())
            self.state = State(**state)
            if saved.get("boot") != self.boot or not self.boot:
                # Saved in another boot (or by an agent that kept the wall clock): its monotonic readings mean
                # nothing now.  The switching interval is served; a drain's grace starts again.
                # The miner the agent started on some cards did not outlive the boot (the OS starts its own).
                self.state = replace(self.state, last_switch=float("-inf"), drain_started=(
                    None if self.state.drain_started is None else self.monotonic()), mine_on=())
            was = saved.get("watchdog_was")
            self.watchdog_was = was if isinstance(was, bool) else None
            self.profit.restore(saved.get("offer"))
            self.stats.restore(saved.get("measured"))
            self.publisher.applied_labels = dict(saved.get("applied_labels", {}))

    # -- the tick --------------------------------------------------------------------
    def tick(self) -> list[str]:
        """One tick; returns decide.py's actions (the loop hurries while a stop waits for the cards)."""
        # The ticks' calls to the API share one kept connection (one TLS handshake while the server keeps it).
        with kube.one_connection(self._api_connections):
            return self._tick()

    def _tick(self) -> list[str]:
        self.seen.file_labels = None  # read again this tick
        now, mono = self.clock(), self.monotonic()
        self.last_error = ""  # what went wrong in this tick, each part said once (say)
        reading = read.read(self, now, mono)
        before = self.state
        plan = rules.plan(before, reading.obs, reading.rig, self.schedule.lease_grace_s,
                          self.schedule.min_switch_interval_s)
        for sentence in plan.said:
            self.say(sentence)
        if not self.save(plan) and plan.state != before:
            plan = rules.unrecorded(plan, before, reading.rig, mono, str(self.dir))
            for sentence in plan.said[-1:]:
                self.say(sentence)
        self.state = plan.state
        self.watchdog_was, self.watchdog_checked = plan.watchdog_was, plan.watchdog_checked
        self.do(plan, reading, before)
        if decide.GRANT in plan.actions:  # named in this tick's status: the lease guard reads it
            self.seen.read_gated(self.gates)
        self.book.record(now, self.state, reading.node is None, self.config.gpu_count, self.seen, self.stats,
                         self.say)
        self.publish(now, reading.node is not None)
        return list(plan.actions)

    def do(self, plan: rules.Plan, reading: read.Reading, before: State) -> None:
        effectors = act.Effectors(self.config, self.gates, self.gpus, self.hand, self.gpu_holders,
                                  self.gpu_processes_by_card, self.monotonic, self.say)
        effectors.gate_answers(plan, reading.leases_waiting, reading.others_waiting, reading.leases_refused)
        waiting = [] if plan.refuse_leases else reading.leases_waiting
        try:
            effectors.mode_actions(plan.actions, plan.state.mode, plan.state.mine_on, waiting,
                                   self.seen.handed_cards(self.gpus.card_map) if self.cards() else None)
        except (kube.ApiError, RuntimeError, OSError) as exc:
            self.say(f"{' '.join(plan.actions)}: {exc}")
        if self.hand.unreset and self.state.mode in rules.LEASED:
            self.say(f"clocks: {self.hand.unreset}")
        effectors.watchdog(plan.watchdog, rules.released_as(plan, reading.rig))
        for sentence in plan.cordon_said:
            self.say(sentence)
        self.node_sync.carry_out(self.client, self.config.node, plan, reading.node, self.clock, self.say)

    # -- what the tick reads through the agent (the tests replace some) ---------------
    def gpu_holders(self) -> list[int]:
        """Processes outside every container that hold a GPU (NVML)."""
        return nvml.outside_containers(self.gpu_processes())

    def sample_miner(self, now: float, miner_running: bool) -> None:
        self.stats.sample(now, miner_running)

    def price_offer(self, now: float) -> bool:
        """Policy profit: is the rig offered at the economics file's prices now (profit.py)?"""
        if self.schedule.policy != "profit":
            return False
        # The labels gpu_attributes wrote on the rig, else the node's (as last read from the API).
        cards = profit.cards_from_labels(self.file_labels() or self.seen.node_labels)
        if self.profit.price(now, self.schedule, cards, self.stats.hashrates(now),
                             self.seen.leased_gpus(self.config.gpu_count)):
            self.windows.anew()
        return self.profit.offer.offered

    def file_labels(self) -> dict[str, str]:
        """``labels_file`` (gpu_attributes' labels for this node), read at most once a tick: the profit quote
        and the node's labels both want it."""
        if self.seen.file_labels is None:
            self.seen.file_labels = dict(_read_json(Path(self.config.labels_file)) or {})
        return self.seen.file_labels

    def cards(self) -> tuple[str, ...]:
        return self.gpus.cards(self.config)

    def lease_waiting(self) -> bool:
        return self.gates.any_waiting()

    @property
    def respawns(self) -> int:
        return self.hand.respawns

    @property
    def offer(self) -> profit.Offer:
        return self.profit.offer

    @property
    def measured(self) -> measure.Average | None:
        return self.stats.measured

    def next_change(self, now: float) -> datetime | None:
        return self.windows.next_change(self.schedule, now, self.profit.offer.offered)

    # -- save, say, publish --------------------------------------------------------------
    def say(self, message: str) -> None:
        """Add to this tick's ``last_error`` (a full disk fails several writes: each is said, once)."""
        if message not in self.last_error:
            self.last_error = f"{self.last_error}; {message}"[-1000:] if self.last_error else message

    def save(self, plan: rules.Plan | None = None) -> bool:
        """The state on disk, when it changed; False (and said in the status) when the disk refuses it."""
        state = self.state if plan is None else plan.state
        was = self.watchdog_was if plan is None else plan.watchdog_was
        saved = {"state": asdict(state), "boot": self.boot, "applied_labels": self.publisher.applied_labels,
                 "watchdog_was": was, "offer": self.profit.saved(),
                 "measured": asdict(self.stats.shown) if self.stats.shown else None}
        text = json.dumps(saved, sort_keys=True)
        if text == self._saved:
            return True
        try:
            disk.write_json(self.dir / "state.json", saved)
        except OSError as exc:
            self.say(f"state: {exc}")
            return False
        self._saved = text
        return True

    def status(self, now: float) -> dict[str, Any]:
        said = record.Said(self.config.schedule_name or self.schedule.name, self.config.marketplace,
                           self.last_error, self.gpus.hand_over(self.state.whole_rig), self.gpus.hand_over_why(),
                           self.watchdog_was, (self.dir / "drain").exists(), self.gpus.telemetry())
        return record.status(self.state, said, self.next_change(now), self.windows.mine_at_value, self.seen,
                             self.profit, self.stats)

    def publish(self, now: float, api_ok: bool) -> None:
        status = self.status(now)
        try:
            text = self.publisher.write(status)
        except OSError as exc:  # the node's annotation still says it
            self.say(f"status: {exc}")
            status["last_error"] = self.last_error
            text = json.dumps(status, sort_keys=True)
        if not api_ok:
            return
        labels = {**self.file_labels(), MODE_LABEL: self.state.mode, "m2p.io/agent-version": __version__}
        old = (OLD_PLACEHOLDER_LABEL,) if OLD_PLACEHOLDER_LABEL in self.seen.node_labels else ()
        try:
            self.publisher.push(self.client, self.config.node, text, labels, old)
        except kube.ApiError as exc:
            self.say(f"status: {exc}")

    def leave_market(self) -> bool:
        """The agent stops (``m2p-agent stopped``: the unit's ExecStopPost, after any end, a crash or the OOM
        killer included): nothing can answer the gate now, so a node the agent offered is cordoned; running
        leases stay.  The next agent offers it again.  True when the node was cordoned."""
        if not self.state.offered:
            return False
        self.node_sync.cordon(self.client, self.config.node, self.clock, self.say)
        self.state = replace(self.state, offered=False)
        self.save()
        return True


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
