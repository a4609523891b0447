"""What the agent reads of the rig's cards, each cache beside the reader that fills it: NVML's processes
(any card, card by card), the leased cards' clocks, the driver's card map and what the mining OS's own
configuration says about handing over per card.  Reading only."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from miner2provider.agent import flight_sheet, nvml
from miner2provider.agent.clocks import Clocks
from miner2provider.agent.config import Config
from miner2provider.agent.telemetry import CardWatch, KernelLog
from miner2provider.rigside.status import Telemetry

GPU_RECHECK_S = 10.0
LEASED = frozenset({"leasing", "draining"})
ALL = "*"  # in HandOver.clocks_reset: every card was reset


@dataclass
class GpuSight:
    _gpus: tuple[float, bool] = (float("-inf"), True)  # (read at, monotonic; a process outside holds a GPU)
    _busy_cards: tuple[float, frozenset[str]] = (float("-inf"), frozenset())  # (read at, monotonic; the cards)
    _tuned_checked: float = float("-inf")  # when the leased cards' clocks were last read (monotonic)
    retuned: frozenset[str] = frozenset()  # the leased cards found tuned again at that reading
    card_map: dict[int, str] = field(default_factory=dict)  # device minor -> UUID (the driver's; read once)
    takes_cards: bool | None = None  # the miner can be started on some cards (rig.Miner.takes_cards; read once)
    _sheet: tuple[tuple[int, ...], str] = ((), "")  # the OS's config files' mtimes, and what they say (whole_why)
    health: CardWatch | None = None  # the cards' telemetry and health (made at the first reading)

    def forget(self) -> None:
        """The miner was started or stopped: NVML is asked again before anything relies on it."""
        self._gpus = (float("-inf"), True)
        self._busy_cards = (float("-inf"), frozenset())

    def busy(self, holders: Callable[[], list[int]], now: float, miner_running: bool, waiting: bool) -> bool:
        """A process outside every container holds a GPU (the miner letting go; a lease's own processes do not
        count: they are in a pod's cgroup)."""
        if miner_running:
            return True  # a running miner holds the GPUs: no need to ask NVML
        checked, busy = self._gpus
        if waiting or now - checked >= GPU_RECHECK_S or busy:
            busy = bool(holders())
            self._gpus = (now, busy)
        return busy

    def busy_cards(self, by_card: Callable[[], dict[str, list[int]]], now: float, waiting: bool,
                   say: Callable[[str], None]) -> frozenset[str]:
        """The cards a process outside every container holds (NVML, card by card), while leases hold some
        cards: read every GPU_RECHECK_S (a miner the OS restarted on every card is seen within it: nvidia-smi
        takes a weak CPU a good part of a second on a rig of 8 cards), and at once while a container waits or
        after the agent stopped or started the miner."""
        checked, cards = self._busy_cards
        if not waiting and now - checked < GPU_RECHECK_S:
            return cards
        try:
            cards = outside_cards(by_card)
        except (RuntimeError, OSError) as exc:
            say(f"GPU processes: {exc}")
            return frozenset(self.card_map.values())  # unknown: every card counts as held by something
        self._busy_cards = (now, cards)
        return cards

    def retuned_cards(self, clocks: Clocks, now: float, mode: str, reset: frozenset[str],
                      held: frozenset[str] | None, say: Callable[[str], None]) -> frozenset[str]:
        """The cards reset for the leases that are off their defaults again (NVML, every GPU_RECHECK_S while
        leased): a dashboard OC push runs HiveOS's nvidia-oc, which tunes every card, the leased ones too.  Per
        card, only the cards the leases hold (the others mine on the owner's tuning)."""
        if not reset or mode not in LEASED or now - self._tuned_checked < GPU_RECHECK_S:
            return frozenset()
        self._tuned_checked = now
        cards = None if ALL in reset else reset & held if held is not None else reset
        if cards is not None and not cards:
            return frozenset()
        try:
            self.retuned = clocks.tuned(cards)
        except (RuntimeError, OSError) as exc:
            say(f"clocks: {exc}")
            self.retuned = frozenset()
        return self.retuned

    def cards(self, config: Config) -> tuple[str, ...]:
        """The rig's cards (UUIDs, in PCI bus order) where its mining OS can start the miner on some of them;
        (): the whole rig is the unit (an OS that cannot, or a driver that names no card)."""
        if self.takes_cards is None:
            self.takes_cards = config.miner.takes_cards()
        if not self.takes_cards or self.whole_why(config):
            return ()
        if not self.card_map:
            self.card_map = nvml.card_uuids(config.gpu_info_dir)
        return tuple(self.card_map.values())  # PCI bus order (nvml.card_uuids): CUDA_VISIBLE_DEVICES's

    def whole_why(self, config: Config) -> str:
        """What in the OS's own configuration makes the whole rig the unit (flight_sheet.py; "": nothing), read
        again when a file changes (a dashboard push rewrites the flight sheet)."""
        files = config.miner.config_files
        stamp = tuple(_mtime(path) for path in files)
        if stamp != self._sheet[0]:
            self._sheet = (stamp, flight_sheet.why_whole(files))
        return self._sheet[1]

    def watch(self, config: Config) -> CardWatch:
        """The cards' telemetry and health, read once ``telemetry_interval_s`` has passed (telemetry.py)."""
        if self.health is None:
            self.health = CardWatch(config.telemetry_interval_s, config.temperature_limit_c,
                                    KernelLog(config.kernel_log), config.gpu_info_dir)
        return self.health

    def telemetry(self) -> Telemetry | None:
        return None if self.health is None else self.health.status()

    def hand_over(self, whole_rig: bool) -> str:
        """What a lease stops: "per card" (the miner mines on the cards no lease holds) or "whole rig"."""
        if self.takes_cards and self.card_map and not whole_rig and not self._sheet[1]:
            return "per card"
        return "whole rig"

    def hand_over_why(self) -> str:
        return self._sheet[1] if self.takes_cards else ""


def outside_cards(by_card: Callable[[], dict[str, list[int]]]) -> frozenset[str]:
    """The cards a process outside every container holds (NVML, card by card)."""
    return frozenset(uuid for uuid, pids in by_card().items() if nvml.outside_containers(pids))


def _mtime(path: str) -> int:
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return -1


Holders = Callable[[], Any]
