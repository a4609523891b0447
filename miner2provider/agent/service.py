"""The on-rig time-share agent: observe, decide (decide.py), act; state on disk, status on the node.

Each tick (``interval_s``):
1. desired mode from the schedule (policy.py) at this instant;
2. the cluster: pods on this node (leases) and the node (cordoned or not); an unreachable
   API leaves ``api_ok`` False and decide() keeps the mode;
3. the rig: is the miner running (the mining OS's own command), which processes outside
   every container hold a GPU (NVML; read only while the miner is stopped, since a running
   miner holds them anyway: this keeps an idle agent's CPU low);
4. the gate (``<state_dir>/gate``, gate.py): containers waiting for the GPUs, and those let
   through that still run;
5. decide(), then the actions in order; the state is written (atomically) when it changes,
   so a reboot resumes the mode; the node is cordoned outside offered time (and while
   ``m2p ... --drain`` asks); status goes to ``status.json`` and to the node (label
   ``m2p.io/mode``, annotation ``m2p.io/status``), with the GPU labels of
   ``/var/lib/m2p/node-labels.json`` (gpu_attributes) kept in step on the live node.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from miner2provider import __version__
from miner2provider.agent import decide, economy, flight_sheet, gate, measure, publish, rig
from miner2provider.agent.decide import Observation, State
from miner2provider.rigside import disk, kube, ledger
from miner2provider.rigside.status import MODE_LABEL, STATUS_SCHEMA
from miner2provider.timeshare import model, policy, profit

# m2p's first time-share held idle-mining GPUs with a placeholder pod (a DaemonSet selecting this
# label): Akash counted them allocated and never bid.  The label is removed where found.
OLD_PLACEHOLDER_LABEL = "m2p.io/placeholder"
GPU_RECHECK_S = 10.0
GATE_MARK = "/opt/m2p/gate"  # the hook's command in the CDI spec
HURRY_S = 0.5  # the tick while a lease waits for the GPUs
WAKE_S = 0.1  # how often a sleeping agent looks for a container at the gate (one directory scan)
WATCHDOG_RECHECK_S = 10.0
# Issue 38: a miner something else brings back while the GPUs are leased (a wrapper, a cloud agent, a built-in
# watchdog) is ended each time; after this many, the rig refuses new leases rather than fight it.
RESPAWN_STRIKES = 3
RESPAWN_SENTENCE = "another supervisor restarts the miner"
ALL = "*"  # in Agent._clocks_reset: every card was reset
BESIDE_GRACE_S = 60.0  # a real miner takes its cards within seconds (a DAG build is longer, but holds the card)


@dataclass(frozen=True)
class Config:
    node: str
    schedule: str
    miner: rig.Miner
    gpu_count: int
    clocks: rig.Clocks = field(default_factory=rig.Clocks)
    # Who the agent is to the API: the rig's kubelet credential (k3s's kubelet.kubeconfig) where m2p built the
    # cluster; else (a cluster outside the inventory) api_server with the owner's token_file and ca_file.
    kubeconfig: str = ""
    api_server: str = ""
    token_file: str = ""
    ca_file: str | None = None
    state_dir: str = "/var/lib/m2p/agent"
    labels_file: str = "/var/lib/m2p/node-labels.json"
    cdi_spec: str = "/etc/cdi/nvidia.yaml"  # carries the gate's hook (roles/nvidia_container_toolkit)
    hashrate_file: str = ""  # the mining OS's own miner stats (measure.py); empty: none known
    trex_api: str = ""  # T-Rex's /summary on the rig's loopback (measure.py); read instead of hashrate_file
    economics: str = ""  # policy profit: the owner's economics file, re-read when it changes
    interval_s: float = 2.0
    marketplace: str = ""  # the marketplace the rig is offered on, or none (said in the status)
    # The marketplace's own services' namespaces (from market/, by role_vars): their pods are not leases.
    system_namespaces: tuple[str, ...] = ()
    lease_label: str = ""  # the label key only the marketplace's lease pods carry (market/); empty: no marketplace
    wake_on_signal: bool = True  # answer the gate at once; False: only every tick (a plain poll)
    schedule_name: str = ""  # the owner's name for the schedule (its file's, on the controller); said in the status
    gpu_info_dir: str = rig.GPU_INFO_DIR  # the driver's cards (device minor -> UUID): per-card hand-over

    @classmethod
    def load(cls, path: str) -> Config:
        raw = json.loads(Path(path).read_text())
        miner_raw = raw.pop("miner")
        miner = rig.Miner(**{**miner_raw, "processes": tuple(miner_raw.get("processes", ())),
                             "config_files": tuple(str(f) for f in miner_raw.get("config_files", ())),
                             "per_card": str(miner_raw.get("per_card", False)).lower() == "true",
                             "start_believed": str(miner_raw.get("start_believed", False)).lower() == "true"})
        raw["clocks"] = rig.Clocks(**raw.get("clocks", {}))
        raw["gpu_count"] = int(raw["gpu_count"])
        raw["interval_s"] = float(raw.get("interval_s", 2.0))
        raw["system_namespaces"] = tuple(str(n) for n in raw.get("system_namespaces", ()))
        return cls(miner=miner, **raw)


@dataclass
class Sight:
    """What the agent last saw, kept between ticks: the API's leases and labels stay as last read while
    the API does not answer (m2p's lease guard errs on the safe side)."""

    leases: list[dict[str, Any]] = field(default_factory=list)  # lease pods on the node (any: CPU-only too)
    gated: list[dict[str, Any]] = field(default_factory=list)  # lease containers the gate let through, still running
    node_labels: dict[str, str] = field(default_factory=dict)  # the node's labels
    file_labels: dict[str, str] | None = None  # labels_file's, read once a tick (None: not yet this tick)
    # Pods the API listed on the node this tick, lease or not (None: the API did not answer): a container
    # at the gate whose pod is listed and is no lease is not handed the GPUs while the miner runs.
    listed: set[str] | None = None
    lease_names: set[str] = field(default_factory=set)  # the lease pods' names among them
    waiting: list[dict[str, Any]] = field(default_factory=list)  # the leases' requests at the gate, this tick
    # The cards each lease pod's containers were given (learnt at the gate): a container that restarts (or
    # crash-loops) gets the same cards again, which stay the lease's between its runs.
    pod_cards: dict[str, frozenset[str]] = field(default_factory=dict)


def boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> str:
    """This boot's identity: a monotonic clock reading means something only within the boot it was read in."""
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


@dataclass
class Agent:
    config: Config
    client: kube.KubeClient
    gpu_processes: Any = rig.gpu_processes
    gpu_processes_by_card: Any = rig.gpu_processes_by_card
    clock: Any = time.time  # the wall clock: what is said (status, ledger) and the schedule's windows
    # Intervals (switching, the drain's grace, rechecks) run on the monotonic clock, which no step of the
    # wall clock moves (a rig without an RTC battery boots in the past; NTP steps it later).
    monotonic: Any = time.monotonic
    boot: str = field(default_factory=boot_id)
    state: State = field(default_factory=State)
    last_error: str = ""
    _gpus: tuple[float, bool] = (float("-inf"), True)
    _next: tuple[datetime, datetime | None] = (datetime.min.replace(tzinfo=timezone.utc), None)  # (recompute at, value)
    _watchdog_checked: float = float("-inf")
    # The OS's watchdog held by the agent: whether it ran before (None: not held).
    watchdog_was: bool | None = None
    # When the rig must next mine unoffered (mine_at): the reclaimer on the farm's server reads it from the status
    # and reclaims the node's leases in time.
    _mine_at: datetime | None = None
    _ledger_last: ledger.Entry | None = None  # the ledger's last line (read once, at the first tick)
    # The cards reset since the miner last started on every card (ALL: every card): once per lease's cards, not
    # per container.
    _clocks_reset: frozenset[str] = frozenset()
    _unreset: str = ""  # what the last reset could not do (said while the leases run)
    _tuned_checked: float = float("-inf")  # when the leased cards' clocks were last read (monotonic)
    _retuned: frozenset[str] = frozenset()  # the leased cards found tuned again at that reading
    _stopped_for_lease: bool = False  # the agent stopped the miner for this hand-over and has not started it since
    _beside_since: float | None = None  # when the agent last started the miner on some cards (monotonic)
    respawns: int = 0  # times the miner came back on its own during a hand-over (until the agent restarts)
    seen: Sight = field(default_factory=Sight)  # what the agent last saw of its node and the gate
    _api_connections: dict[Any, Any] = field(default_factory=dict)  # kept from tick to tick (kube.one_connection)
    _card_map: dict[int, str] = field(default_factory=dict)  # device minor -> UUID (the driver's; read once)
    _takes_cards: bool | None = None  # the miner can be started on some cards (rig.Miner.takes_cards; read once)
    _busy_cards: tuple[float, frozenset[str]] = (float("-inf"), frozenset())  # (read at, monotonic; the cards)
    _sheet: tuple[tuple[int, ...], str] = ((), "")  # the OS's config files' mtimes, and what they say (whole_why)

    def __post_init__(self) -> None:
        self.schedule = model.load(self.config.schedule)
        self.stats = economy.MinerStats(self.config.hashrate_file, self.config.trex_api)
        self.profit = economy.ProfitQuote(self.config.economics)
        self.publisher = publish.Publisher(Path(self.config.state_dir) / "status.json")
        self.dir = Path(self.config.state_dir)
        self.gates = gate.GateDir(self.dir / "gate")
        self._cordoned_here = False  # the agent cordoned the node (also marked on disk, when the disk lets it)
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

    # -- observe ---------------------------------------------------------------------
    def lease_waiting(self) -> bool:
        return self.gates.any_waiting()

    def gpu_holders(self) -> list[int]:
        """Processes outside every container that hold a GPU (NVML)."""
        return rig.outside_containers(self.gpu_processes())

    def gpus_busy(self, now: float, miner_running: bool, waiting: bool) -> bool:
        """A process outside every container holds a GPU (the miner letting go; a lease's own
        processes do not count: they are in a pod's cgroup)."""
        if miner_running:
            return True  # a running miner holds the GPUs: no need to ask NVML
        checked, busy = self._gpus
        if waiting or now - checked >= GPU_RECHECK_S or busy:
            busy = bool(self.gpu_holders())
            self._gpus = (now, busy)
        return busy

    def file_labels(self) -> dict[str, str]:
        """``labels_file`` (gpu_attributes' labels for this node), read at most once a tick: the profit quote
        and the node's labels both want it."""
        if self.seen.file_labels is None:
            self.seen.file_labels = dict(_read_json(Path(self.config.labels_file)) or {})
        return self.seen.file_labels

    @property
    def offer(self) -> profit.Offer:
        return self.profit.offer

    @property
    def measured(self) -> measure.Average | None:
        return self.stats.measured

    def sample_miner(self, now: float, miner_running: bool) -> None:
        if self.stats.sample(now, miner_running):
            self._save()

    def price_offer(self, now: float) -> bool:
        """Policy profit: is the rig offered at the economics file's prices now (profit.py)?"""
        if self.schedule.policy != "profit":
            return False
        # The labels gpu_attributes wrote on the rig, else the node's (as last read from the API).
        cards = profit.cards_from_labels(self.file_labels() or self.seen.node_labels)
        if self.profit.price(now, self.schedule, cards, self.stats.hashrates(now), self.leased_gpus()):
            self._next = (datetime.min.replace(tzinfo=timezone.utc), None)  # the windows' next change, anew
            self._save()
        return self.profit.offer.offered

    def leased_gpus(self) -> int:
        """The GPUs the leases hold (their pods' limits, as last read), not the rig's: a 1-GPU lease on an
        8-GPU rig is one."""
        return min(self.config.gpu_count, sum(int(lease.get("gpus") or 0) for lease in self.seen.leases))

    @property
    def lease_rule(self) -> kube.LeaseRule:
        return kube.LeaseRule(self.config.lease_label, self.config.system_namespaces)

    def for_a_lease(self, record: dict[str, Any]) -> bool:
        """A container at (or through) the gate is a lease's unless the API lists its pod as no lease.  A pod
        the API does not list (yet), or no API at all, counts as a lease: the miner stops for it, and mining
        resumes once the API says otherwise."""
        pod = str(record.get("pod") or "")
        return self.seen.listed is None or pod in self.seen.lease_names or pod not in self.seen.listed

    def lease_gated(self) -> list[dict[str, Any]]:
        """The leases' containers the gate let through that still run (other containers never count)."""
        return [record for record in self.gates.gated() if self.for_a_lease(record)]

    def observe(self, now: float, mono: float) -> tuple[Observation, dict[str, Any] | None]:
        node: dict[str, Any] | None = None
        gpu_leases = 0
        self.seen.listed = None
        try:
            pods = self.client.pods_on_node(self.config.node)
            node = self.client.node(self.config.node)
            self.seen.node_labels = dict(node.get("metadata", {}).get("labels") or {})
            leases = self.lease_rule.leases(pods)
            self.seen.leases = sorted((kube.lease_summary(p) for p in leases), key=lambda lease: lease["pod"])
            self.seen.listed = {kube.pod_name(p) for p in pods}
            self.seen.lease_names = {kube.pod_name(p) for p in leases}
            gpu_leases = len(self.lease_rule.gpu_leases(pods))
        except kube.ApiError as exc:
            self._say(f"API: {exc}")  # the leases last read stay: m2p's lease guard errs on the safe side
        running = self.config.miner.running()
        self.seen.gated = self.lease_gated()
        leases_waiting, others = self._waiting()
        waiting = bool(leases_waiting)
        # A container waiting for the GPUs is not kept waiting on a miner's API; a miner on some cards beside a
        # lease (per card) is not the rig's mining: its figures would start the rig's average anew on fewer GPUs.
        if not waiting and not self.state.mine_on:
            self.sample_miner(now, running)
        at = datetime.fromtimestamp(now, timezone.utc)
        desired = policy.desired_at(self.schedule, at, self.price_offer(now))
        desired = policy.with_lead(self.schedule, desired, at, self.mine_at(at, desired.offered))
        if self.respawns >= RESPAWN_STRIKES:  # off the market: a lease here would share its GPUs with a miner
            desired = replace(desired, offered=False)
            self._say(f"{RESPAWN_SENTENCE} ({self.respawns} times during leases): no new lease until that "
                      "supervisor is stopped and the agent restarted (m2p schedule apply)")
            if leases_waiting and not self.lease_gated():
                self.gates.refuse(f"{RESPAWN_SENTENCE}: this rig takes no lease now", leases_waiting)
                leases_waiting, waiting = [], False
        busy = self.gpus_busy(mono, running, waiting)
        if others:
            self.answer_others(others, running or busy)
        cards = self.cards()
        held = self.held_cards() if cards else frozenset()
        obs = Observation(
            now=mono, desired=desired, api_ok=node is not None,
            leases=gpu_leases if node is not None else len(self.seen.leases), gated=len(self.seen.gated),
            gate_waiting=waiting, miner_running=running, gpus_busy=busy, wall=now,
            cards=cards, held=held, busy_cards=self.busy_cards(mono, waiting) if held else frozenset(),
            retuned=self.retuned_cards(mono, held),
        )
        self._say_an_idle_miner(obs)
        return obs, node

    # -- per card ----------------------------------------------------------------------
    def cards(self) -> tuple[str, ...]:
        """The rig's cards (UUIDs, in PCI bus order) where its mining OS can start the miner on some of them;
        (): the whole rig is the unit (an OS that cannot, or a driver that names no card)."""
        if self._takes_cards is None:
            self._takes_cards = self.config.miner.takes_cards()
        if not self._takes_cards or self.whole_why():
            return ()
        if not self._card_map:
            self._card_map = rig.card_uuids(self.config.gpu_info_dir)
        return tuple(self._card_map.values())  # PCI bus order (rig.card_uuids): CUDA_VISIBLE_DEVICES's

    def whole_why(self) -> str:
        """What in the OS's own configuration makes the whole rig the unit (flight_sheet.py; "": nothing), read
        again when a file changes (a dashboard push rewrites the flight sheet)."""
        files = self.config.miner.config_files
        stamp = tuple(_mtime(path) for path in files)
        if stamp != self._sheet[0]:
            self._sheet = (stamp, flight_sheet.why_whole(files))
        return self._sheet[1]

    def held_cards(self) -> frozenset[str] | None:
        """The cards the leases hold: their containers' through the gate (running) or at it (waiting), and
        those a lease pod's container was given before (between two runs of it).  None where one is unknown:
        a container whose spec names no card m2p knows, or a lease pod with GPUs whose container has not
        reached the gate yet (the device plugin picks its cards when the container is created)."""
        held: set[str] = set()
        for record in [*self.seen.gated, *self.seen.waiting]:
            cards = self._record_cards(record)
            if cards is None:
                return None
            pod = str(record.get("pod") or "")
            self.seen.pod_cards[pod] = self.seen.pod_cards.get(pod, frozenset()) | cards  # each container's
            held |= cards
        if self.seen.listed is not None:  # the API answered: forget the pods that are gone
            self.seen.pod_cards = {pod: cards for pod, cards in self.seen.pod_cards.items()
                                   if pod in self.seen.listed}
        for lease in self.seen.leases:
            if int(lease.get("gpus") or 0) > 0:
                if lease["pod"] not in self.seen.pod_cards:
                    return None
                held |= self.seen.pod_cards[lease["pod"]]
        return frozenset(held)

    def _record_cards(self, record: dict[str, Any]) -> frozenset[str] | None:
        """The cards a gate record's container was given (its device minors, mapped); None: none named, or one
        m2p does not know."""
        minors = record.get("gpus")
        if (not isinstance(minors, list) or not minors
                or any(not isinstance(m, int) or m not in self._card_map for m in minors)):
            return None
        return frozenset(self._card_map[m] for m in minors)

    def _say_an_idle_miner(self, obs: Observation) -> None:
        """A miner started beside a lease that holds none of its cards a while later: most likely its flight sheet
        names devices by index (T-Rex ``-d 0,1``), which counts among the visible cards only, and it does not
        start.  The lease is safe; the rig mines nothing, as if it handed over whole: said."""
        mine_on = set(self.state.mine_on)
        if (mine_on and obs.held and obs.miner_running and self._beside_since is not None
                and obs.now - self._beside_since >= BESIDE_GRACE_S and not obs.busy_cards & mine_on):
            self._say(f"the miner started on the {len(mine_on)} card(s) no lease holds runs on none of them after "
                      f"{BESIDE_GRACE_S:g} s (does its flight sheet name devices by index?)")

    def retuned_cards(self, now: float, held: frozenset[str] | None) -> frozenset[str]:
        """The cards reset for the leases that are off their defaults again (NVML, every GPU_RECHECK_S while
        leased): a dashboard OC push runs HiveOS's nvidia-oc, which tunes every card, the leased ones too.  Per
        card, only the cards the leases hold (the others mine on the owner's tuning)."""
        done = self._clocks_reset
        if not done or self.state.mode not in {"leasing", "draining"} or now - self._tuned_checked < GPU_RECHECK_S:
            return frozenset()
        self._tuned_checked = now
        cards = None if ALL in done else done & held if held is not None else done
        if cards is not None and not cards:
            return frozenset()
        try:
            self._retuned = self.config.clocks.tuned(cards)
        except (RuntimeError, OSError) as exc:
            self._say(f"clocks: {exc}")
            self._retuned = frozenset()
        return self._retuned

    def busy_cards(self, now: float, waiting: bool) -> frozenset[str]:
        """The cards a process outside every container holds (NVML, card by card), while leases hold some
        cards: read every GPU_RECHECK_S (a miner the OS restarted on every card is seen within it: nvidia-smi
        takes a weak CPU a good part of a second on a rig of 8 cards), and at once while a container waits or
        after the agent stopped or started the miner."""
        checked, cards = self._busy_cards
        if not waiting and now - checked < GPU_RECHECK_S:
            return cards
        try:
            cards = self._outside_cards()
        except (RuntimeError, OSError) as exc:
            self._say(f"GPU processes: {exc}")
            return frozenset(self._card_map.values())  # unknown: every card counts as held by something
        self._busy_cards = (now, cards)
        return cards

    def _outside_cards(self) -> frozenset[str]:
        """The cards a process outside every container holds (NVML, card by card)."""
        return frozenset(uuid for uuid, pids in self.gpu_processes_by_card().items() if rig.outside_containers(pids))

    def _waiting(self) -> tuple[list[Path], list[Path]]:
        """The requests waiting at the gate: (the leases', the other containers')."""
        leases: list[Path] = []
        others: list[Path] = []
        self.seen.waiting = []
        for entry, record in self.gates.waiting_records():
            if self.for_a_lease(record):
                leases.append(entry)
                self.seen.waiting.append(record)
            else:
                others.append(entry)
        return leases, others

    def answer_others(self, entries: list[Path], mining: bool) -> None:
        """GPU containers that are no lease (a monitoring DaemonSet, the owner's own job): refused while the
        miner holds the cards, let through while it does not.  They never stop the miner and never count as
        a lease: mining resumes beside them when the schedule says so."""
        if mining:
            self.gates.refuse("this rig is mining: m2p hands its GPUs only to the marketplace's leases "
                              "while its miner runs", entries)
        else:
            self.gates.grant(entries)

    # -- act -------------------------------------------------------------------------
    def act(self, actions: list[str], node: dict[str, Any] | None) -> None:
        for action in actions:
            if action == decide.STOP_MINER:
                self._stop_miner()
            elif action == decide.START_MINER:
                self._start_miner(self.state.mine_on)
            elif action == decide.RESET_CLOCKS:
                self.config.clocks.reset(cards=self._retuned)
                self._say(f"{len(self._retuned)} leased card(s) were tuned again during the lease (the mining OS's "
                          "OC, a dashboard push?): put back on their defaults")
            elif action == decide.GRANT:
                self._hand_over_clocks()
                self.gates.grant(self._waiting()[0])
                self.seen.gated = self.lease_gated()  # named in this tick's status: the lease guard reads it
            # OFFER and UNOFFER live in the state (State.offered): keep_cordon() makes the node agree.

    def _start_miner(self, cards: tuple[str, ...]) -> None:
        """On every card (the OS's clocks re-applied first), or on ``cards`` beside leases: there the OS's
        clocks are not re-applied, since its command tunes every card (HiveOS's nvidia-oc), the leased ones
        too; the miner mines on the defaults the hand-over set until the leases end."""
        if not cards:
            self._clocks_reset, self._unreset = frozenset(), ""
            try:
                self.config.clocks.reapply()
            except (RuntimeError, OSError) as exc:  # the miner runs on the cards' defaults: safe, slower
                self._say(f"clocks: {exc}")
        self._stopped_for_lease = False
        self._beside_since = self.monotonic() if cards else None
        self._busy_cards = (float("-inf"), frozenset())  # ask NVML again: the miner takes its cards
        self._gpus = (float("-inf"), True)
        self.config.miner.start(cards, holding=lambda: self._miner_holds(cards))

    def _miner_holds(self, cards: tuple[str, ...]) -> bool:
        """A process outside every container holds ``cards`` (every card: any GPU): the start took."""
        if not cards:
            return bool(self.gpu_holders())
        return bool(set(cards) & self._outside_cards())

    def _handed_cards(self) -> frozenset[str] | None:
        """The cards the waiting lease containers get, where the rig knows each (per card); None: every card."""
        if not self.cards():
            return None
        cards: set[str] = set()
        for record in self.seen.waiting:
            given = self._record_cards(record)
            if given is None:
                return None
            cards |= given
        return frozenset(cards)

    def _hand_over_clocks(self) -> None:
        """The cards a container gets on their defaults before it runs: only those (the others mine on beside it,
        on the owner's tuning), each once per hand-over; every card where the cards are not known."""
        if ALL in self._clocks_reset:
            return
        cards = self._handed_cards()
        todo = None if cards is None else cards - self._clocks_reset
        if todo is not None and not todo:
            return
        try:
            left = self.config.clocks.reset(cards=todo)
        except (RuntimeError, OSError) as exc:
            # Fail closed: a lease on mining clocks may compute wrong; the container is told why.
            self.gates.refuse(f"the GPUs' clocks could not be reset to their defaults: {exc}")
            raise
        if left:  # a driver whose NVML lacks a call: the rest is reset, the lease runs, the owner is told
            self._unreset = f"this driver's NVML cannot reset {', '.join(left)}: left as the owner tuned them"
        self._clocks_reset |= {ALL} if todo is None else todo

    def _stop_miner(self) -> None:
        if self._stopped_for_lease and self.state.mode in {"leasing", "draining"}:
            self.respawns += 1  # the agent did not start it: something else did
        self._stopped_for_lease = self.state.mode in {"leasing", "draining"}
        self._gpus = (float("-inf"), True)  # ask NVML again before handing GPUs over
        self._busy_cards = (float("-inf"), frozenset())
        try:
            self.config.miner.stop(self.gpu_holders)
        except (RuntimeError, OSError) as exc:
            # Fail closed and say why: a waiting container is refused now rather than at its timeout.
            self.gates.refuse(f"the miner could not be stopped: {exc}")
            raise

    def tick(self) -> list[str]:
        # The ticks' calls to the API share one kept connection (one TLS handshake while the server keeps it).
        with kube.one_connection(self._api_connections):
            return self._tick()

    def _tick(self) -> list[str]:
        self.seen.file_labels = None  # read again this tick
        now, mono = self.clock(), self.monotonic()
        self.last_error = ""  # what went wrong in this tick, each part said once (_say)
        obs, node = self.observe(now, mono)
        before = self.state
        self.state, actions = decide.decide(self.state, obs, self.schedule.lease_grace_s,
                                            self.schedule.min_switch_interval_s)
        if self.state != before and not self._save():
            actions = self._unrecorded(before, actions)
        try:
            self.act(actions, node)
        except (kube.ApiError, RuntimeError, OSError) as exc:
            self._say(f"{' '.join(actions)}: {exc}")
        if self._unreset and self.state.mode in {"leasing", "draining"}:
            self._say(f"clocks: {self._unreset}")
        self.keep_watchdog(mono)
        self.keep_cordon(node)
        self.record(now, blind=node is None)
        self._publish(now, node is not None)
        return actions

    def _unrecorded(self, before: State, actions: list[str]) -> list[str]:
        """The state could not be written (a full or read-only USB stick).  A switch away from mining is
        not made unrecorded (after a restart the agent would not know it made it): the rig stays as it is
        and leaves the market, since it could not hand its GPUs over.  Toward mining (start, cordon) it
        goes on: mining is where the rig returns to anyway."""
        if not any(a in (decide.STOP_MINER, decide.OFFER) for a in actions):
            return actions
        self.state = replace(before, offered=False)
        self._say(f"cannot write {self.dir}: not switching ({' '.join(actions)}) and off the market until it can")
        return [decide.UNOFFER] if before.offered else []

    def record(self, now: float, blind: bool) -> None:
        """A ledger line when the mode, the sight of the API or the set of leases changed (never per
        tick); the last line written is the one compared against, across restarts too."""
        if self._ledger_last is None:
            entries, _ = ledger.read(self.dir)
            self._ledger_last = entries[-1] if entries else ledger.Entry(0.0, "")
        last = self._ledger_last
        leases = tuple(lease["pod"] for lease in self.seen.leases) if not blind else last.leases
        leased = self.leased_gpus() if not blind else last.leased
        m = self.stats.measured
        # Per-card hand-over: the cards the agent started the miner on beside the leases.
        mining = last.mining if blind else min(len(self.state.mine_on), self.config.gpu_count - leased) if leases else 0
        entry = ledger.Entry(now, self.state.mode, blind, self.config.gpu_count, leases,
                             *((m.algo, m.mhs) if m is not None else ("", ())), leased=leased, mining=mining)
        if entry.same_state(self._ledger_last):
            return
        try:
            ledger.append(self.dir, entry)
        except OSError as exc:  # a full or read-only disk: the rig's work goes on, unrecorded
            self._say(f"ledger: {exc}")
            return
        self._ledger_last = entry

    def keep_watchdog(self, now: float) -> None:
        """While any lease runs (leasing, draining; per card too, where the miner runs beside the lease) the OS's
        watchdog is held: it would reboot the rig under the lease (HiveOS ``wd``: a load average over WD_MAX_LA,
        low hashrate for WD_REBOOT minutes) or restart the miner on every card.  Held once, whether it ran or
        not, and looked at again every WATCHDOG_RECHECK_S (something of the OS may start it again); after the
        leases it is given back exactly as it was (``watchdog_was``, kept on disk across restarts)."""
        miner = self.config.miner
        if not miner.watchdog_stop_cmd:
            return
        leased = self.state.mode in {"leasing", "draining"}
        try:
            if leased and self.watchdog_was is None:
                was = miner.watchdog_running()
                miner.hold_watchdog()
                self.watchdog_was, self._watchdog_checked = was, now
                self._save()
            elif leased and now - self._watchdog_checked >= WATCHDOG_RECHECK_S:
                self._watchdog_checked = now
                if miner.watchdog_running():
                    miner.hold_watchdog()
                    self._say("the mining OS started its watchdog during a lease: stopped again")
            elif not leased and self.watchdog_was is not None:
                miner.release_watchdog(self.watchdog_was)
                self.watchdog_was = None
                self._save()
        except (RuntimeError, OSError) as exc:
            self._say(f"watchdog: {exc}")

    def gate_in_spec(self) -> bool:
        """Idle mining is safe only while the CDI spec carries the gate: a spec regenerated
        without it (the toolkit's nvidia-cdi-refresh after a driver update) would let a lease's
        container start beside the miner.  No spec at all: no container gets the GPUs, so safe."""
        try:
            text = Path(self.config.cdi_spec).read_text()
        except FileNotFoundError:
            return True
        except OSError:
            text = ""
        if GATE_MARK in text:
            return True
        self._say(f"{self.config.cdi_spec} lacks m2p's gate: not offered while mining; run m2p convert")
        return False

    def keep_cordon(self, node: dict[str, Any] | None) -> None:
        """The node is cordoned outside offered time (Akash's inventory drops an unschedulable
        node; running pods stay) and while ``m2p ... --drain`` asks (``<state_dir>/drain``).
        It is uncordoned only if the agent cordoned it (``<state_dir>/cordoned``): an owner's
        own cordon stays.  The mining taint of that first design is removed where found."""
        if node is None:
            return
        wanted = ((self.dir / "drain").exists() or not self.state.offered
                  or (self.state.mode == "idle-mining" and not self.gate_in_spec()))
        cordoned = bool(node.get("spec", {}).get("unschedulable"))
        if kube.has_old_taint(node):
            try:  # as the rig's kubelet it may not (NodeRestriction): schedule apply removes it from the server
                self.client.patch_node(self.config.node, kube.without_old_taint(node))
            except kube.ApiError as exc:
                self._say(f"the first time-share's {kube.OLD_MINING_TAINT_KEY} taint stays on the node ({exc}): "
                          f"m2p schedule apply removes it through the server")
        try:
            if wanted and not cordoned:
                self._mark_cordoned()
                self.client.patch_node(self.config.node, {"spec": {"unschedulable": True}})
            elif not wanted and (self._cordoned_here or self._cordon_mark.exists()):
                if cordoned:
                    self.client.patch_node(self.config.node, {"spec": {"unschedulable": None}})
                self._cordoned_here = False
                self._cordon_mark.unlink(missing_ok=True)
        except (kube.ApiError, OSError) as exc:
            self._say(f"cordon: {exc}")

    @property
    def _cordon_mark(self) -> Path:
        return self.dir / "cordoned"

    def _mark_cordoned(self) -> None:
        """Remembered in memory too: a disk that cannot take the mark does not leave the node cordoned for good."""
        self._cordoned_here = True
        try:
            self._cordon_mark.write_text(f"{self.clock():.0f}\n")
        except OSError as exc:
            self._say(f"cordon mark: {exc}")

    def leave_market(self) -> bool:
        """The agent stops (``m2p-agent stopped``: the unit's ExecStopPost, after any end, a crash or the OOM
        killer included): nothing can answer the gate now, so a node the agent offered is cordoned; running
        leases stay.  The next agent offers it again.  True when the node was cordoned."""
        if not self.state.offered:
            return False
        self._mark_cordoned()
        self.client.patch_node(self.config.node, {"spec": {"unschedulable": True}})
        self.state = replace(self.state, offered=False)
        self._save()
        return True

    # -- state and status ------------------------------------------------------------
    def _say(self, message: str) -> None:
        """Add to this tick's ``last_error`` (a full disk fails several writes: each is said, once)."""
        if message not in self.last_error:
            self.last_error = f"{self.last_error}; {message}"[-1000:] if self.last_error else message

    def _save(self) -> bool:
        """The state on disk; False (and said in the status) when the disk refuses it."""
        try:
            disk.write_json(self.dir / "state.json", {
                "state": asdict(self.state), "boot": self.boot, "applied_labels": self.publisher.applied_labels,
                "watchdog_was": self.watchdog_was, "offer": self.profit.saved(),
                "measured": asdict(self.stats.shown) if self.stats.shown else None})
        except OSError as exc:
            self._say(f"state: {exc}")
            return False
        return True

    def next_change(self, now: float) -> datetime | None:
        """The schedule's next change, recomputed only once it has passed: the scan costs tens of
        ms of CPU (minutes over 8 days), too much for every tick of an idle agent."""
        at = datetime.fromtimestamp(now, timezone.utc)
        due, value = self._next
        if at >= due:
            value = policy.next_change(self.schedule, at, lease_pays=self.profit.offer.offered)
            self._next = (value if value is not None else at + timedelta(hours=1), value)
        return value

    def mine_at(self, at: datetime, offered: bool) -> datetime | None:
        """When the rig must next mine unoffered.  While offered: the schedule's next change (next_change's
        cached scan), which stops offering it.  While not: since when, kept while it stays so (the minute the
        schedule named, when that has come, else the moment it stopped being offered)."""
        if offered:
            change = self.next_change(at.timestamp())
            lease_pays = self.profit.offer.offered
            self._mine_at = None if change is None else policy.mine_from(self.schedule, change, lease_pays)
        elif self._mine_at is None or self._mine_at > at:
            self._mine_at = at
        return self._mine_at

    def status(self, now: float) -> dict[str, Any]:
        change = self.next_change(now)
        mine_at = self._mine_at
        quote, shown = self.profit.quote, self.stats.shown
        return {"schema": STATUS_SCHEMA, "mode": self.state.mode, "since": _iso(self.state.since),
                "next_change": change.isoformat(timespec="seconds") if change else None,
                "mine_at": mine_at.isoformat(timespec="seconds") if mine_at else None,
                "schedule": self.config.schedule_name or self.schedule.name, "marketplace": self.config.marketplace,
                "last_error": self.last_error,
                "agent_version": __version__,
                "hand_over": self.hand_over(), "hand_over_why": self._sheet[1] if self._takes_cards else "",
                "watchdog": "" if self.watchdog_was is None else "held while leased (it ran before)"
                if self.watchdog_was else "held while leased (it was stopped before)",
                "leases": self.leases_seen(), "drain": (self.dir / "drain").exists(), "offered": self.state.offered,
                **({"profit": {"lease_pays": self.profit.offer.offered, **quote.as_status()}} if quote else {}),
                **({"measured": {**shown.as_status(), "at": _iso(shown.at)}} if shown else {})}

    def hand_over(self) -> str:
        """What a lease stops: "per card" (the miner mines on the cards no lease holds) or "whole rig"."""
        if self._takes_cards and self._card_map and not self.state.whole_rig and not self._sheet[1]:
            return "per card"
        return "whole rig"

    def leases_seen(self) -> list[dict[str, str]]:
        """The tenant pods the API lists, and the containers the gate let through that the API does not list
        (yet: a lease's pod is read a tick after its container passed the gate; or the API is unreachable).
        m2p's lease guard reads these: a convert in that tick would otherwise restart k3s under a lease."""
        listed = list(self.seen.leases)
        known = {lease["pod"] for lease in listed}
        for record in self.seen.gated:
            pod = str(record.get("pod") or "").strip()
            pod = pod if pod.strip("/") else "a container through m2p's gate (no pod named)"
            if pod not in known:
                since = record.get("since")
                listed.append({"pod": pod, "since": _iso(since) if isinstance(since, (int, float)) else ""})
                known.add(pod)
        return listed

    def _publish(self, now: float, api_ok: bool) -> None:
        status = self.status(now)
        try:
            text = self.publisher.write(status)
        except OSError as exc:  # the node's annotation still says it
            self._say(f"status: {exc}")
            status["last_error"] = self.last_error
            text = json.dumps(status, sort_keys=True)
        if not api_ok:
            return
        labels = {**self.file_labels(), MODE_LABEL: self.state.mode, "m2p.io/agent-version": __version__}
        old = (OLD_PLACEHOLDER_LABEL,) if OLD_PLACEHOLDER_LABEL in self.seen.node_labels else ()
        try:
            patched = self.publisher.push(self.client, self.config.node, text, labels, old)
        except kube.ApiError as exc:
            self._say(f"status: {exc}")
            return
        if patched:
            self._save()


def _mtime(path: str) -> int:
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return -1


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="m2p-agent", description="m2p's time-share agent (runs on a rig)")
    parser.add_argument("--config", default="/etc/m2p/agent.json")
    parser.add_argument("--once", action="store_true", help="one tick, then exit")
    parser.add_argument("command", nargs="?", choices=["run", "gate", "stopped"], default="run",
                        help="run: the agent (default); gate: the container runtime's hook (state on stdin); "
                             "stopped: the unit's ExecStopPost (the node leaves the market)")
    parser.add_argument("gate_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    config = Config.load(args.config)
    if args.command == "gate":
        return gate.main(args.gate_args, config.state_dir)
    agent = Agent(config, kube.KubeClient(config.api_server, config.token_file or None, config.ca_file,
                                          kubeconfig=config.kubeconfig))
    if args.command == "stopped":
        try:
            agent.leave_market()
        except (kube.ApiError, OSError) as exc:
            print(f"m2p-agent: could not cordon {config.node}: {exc}", file=sys.stderr)
            return 1
        return 0
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        actions: list[str] = []
        try:
            actions = agent.tick()
        except Exception as exc:  # noqa: BLE001 - one bad tick never ends the agent (the miner is not its child)
            agent.last_error = f"tick: {type(exc).__name__}: {exc}"
            print(f"m2p-agent: {agent.last_error}", file=sys.stderr)
        if args.once or stopping:
            return 0
        hurry = config.wake_on_signal and agent.lease_waiting()
        if hurry and decide.STOP_MINER in actions:
            continue  # the stop waited for the cards to be free: the next tick grants at once
        # A container waits at the gate: look again soon (the miner is letting go of the GPUs).
        # Else sleep a tick, but answer the gate as soon as it asks (a directory scan per WAKE_S).
        deadline = time.monotonic() + (min(HURRY_S, config.interval_s) if hurry else config.interval_s)
        while not stopping and time.monotonic() < deadline:
            time.sleep(min(WAKE_S, config.interval_s))
            if not hurry and config.wake_on_signal and agent.lease_waiting():
                break
