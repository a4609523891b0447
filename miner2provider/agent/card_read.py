"""How the agent reads its cards' figures: NVML in-process (pynvml, opened once and kept open) where it opens,
one ``nvidia-smi --query-gpu`` call where it does not; the same typed Card rows either way.  Reading only.

Why NVML first: nvidia-smi is a process of its own that loads and initialises NVML at every call (tens of ms of
CPU per call with the driver's persistence mode on, a good part of a second on a weak CPU without it), while
an NVML kept open answers each figure in microseconds of the agent's own CPU.  The calls, each from NVIDIA's
NVML API reference, Device Queries (docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html), named as
nvidia-ml-py's pynvml names them (12.x and 13.x, the range pyproject.toml allows), each the source of the
nvidia-smi field beside it (nvidia-smi --help-query-gpu).  Py38."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any, Callable, List, Set, Tuple

from miner2provider.agent import nvml
from miner2provider.rigside.status import Card

# nvidia-smi --help-query-gpu's names, in Card's order after the index, UUID, name and PCI address.
QUERY = ("index,uuid,name,pci.bus_id,temperature.gpu,fan.speed,power.draw,power.limit,clocks.sm,clocks.mem,"
         "utilization.gpu,memory.used,memory.total,pcie.link.gen.current,pcie.link.width.current,"
         "clocks_throttle_reasons.active,ecc.errors.uncorrected.volatile.total")
FIGURES = ("temperature_c", "fan_percent", "power_w", "power_limit_w", "sm_mhz", "memory_mhz", "utilization_percent",
           "memory_used_mib", "memory_total_mib")
COUNTS = ("pcie_gen", "pcie_width", "throttle", "ecc_uncorrected")
CALL_TIMEOUT_S = 10.0  # nvidia-smi can hang on a card that is falling off the bus; the tick must not wait for long
PCI = re.compile(r"([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})")
LOST = re.compile(r"Unable to determine the device handle for GPU ?([0-9a-fA-F:.]+): GPU is lost")
MIB = 1024 * 1024
# The NVIDIA kernel module's own file: without it NVML cannot open (NVML_ERROR_DRIVER_NOT_LOADED), and pynvml is
# not even imported (4 MB of the agent's memory here; a rig of AMD cards, a sandbox rig).
DRIVER = "/proc/driver/nvidia/version"
# nvmlDeviceGetCurrentClocksThrottleReasons is deprecated since CUDA 13.0 for ...EventReasons (NVML's
# Deprecation Notices), which an older driver's NVML (before R535) lacks: the new name first, then the old one.
THROTTLE = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
# (cards read, PCI addresses (pci_key) said lost, why the reading failed or what of it did: "" when nothing).
Reading = Tuple[List[Card], Set[str], str]


def pci_key(text: str) -> str:
    """A PCI address in one form (0000:01:00) from nvidia-smi's (00000000:01:00.0) or NVRM's (PCI:0000:01:00)."""
    match = PCI.search(text)
    if match is None:
        return ""
    return f"{int(match.group(1), 16):04x}:{match.group(2).lower()}:{match.group(3).lower()}"


def parse(text: str) -> list[Card]:
    """``--query-gpu=QUERY --format=csv,noheader,nounits``'s rows: ``[N/A]``, ``[Not Supported]`` and anything
    else that is no number read as None; a row of another width is left out."""
    cards = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 17 or not parts[0].isdigit():
            continue
        figures: dict[str, Any] = {key: _number(value) for key, value in zip(FIGURES, parts[4:13])}
        figures.update((key, _whole(value)) for key, value in zip(COUNTS, parts[13:]))
        cards.append(Card(int(parts[0]), parts[1][:100], parts[2][:100], parts[3][:20], **figures))
    return cards


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if 0 <= value < 1e9 else None


def _whole(text: Any) -> int | None:
    try:
        value = int(text, 16) if isinstance(text, str) and text.lower().startswith("0x") else int(text)
    except (TypeError, ValueError):
        return None
    return value if 0 <= value < 2**64 else None


def by_nvidia_smi(run: Callable[..., Any]) -> Reading:
    """One ``nvidia-smi --query-gpu`` call: every card, or none and why (a lost card fails the whole call)."""
    try:
        proc = run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                   capture_output=True, text=True, timeout=CALL_TIMEOUT_S)
        rows, said, code = parse(proc.stdout), f"{proc.stdout}\n{proc.stderr}", proc.returncode
    except subprocess.TimeoutExpired:
        rows, said, code = [], f"no answer in {CALL_TIMEOUT_S:g} s", -1
    except (OSError, subprocess.SubprocessError) as exc:
        rows, said, code = [], getattr(exc, "strerror", None) or str(exc)[:200], -1
    lost = {pci_key(m.group(1)) for m in LOST.finditer(said)}
    if code == 0 and rows:
        return rows, lost, ""
    return [], lost, f"nvidia-smi: {(said.strip().splitlines() or [f'exit {code}'])[-1][:200]}"


class Lost(Exception):
    """NVML_ERROR_GPU_IS_LOST: "the target GPU has fallen off the bus or is otherwise inaccessible"."""


@dataclass
class Nvml:
    """NVML initialised once and kept so (nvmlInit is the expensive part: it loads and attaches the driver's
    state, which nvidia-smi does again at every call); shut down only when a reading finds the library itself
    failing (a driver unloaded), then opened again at the next reading.  NVML counts initialisations (nvmlInit_v2:
    "a reference count ... is maintained"), so nvml.py's own init and shutdown per call only count while this one
    is held.  Device handles are NVML's own (nvmlDeviceGetHandleByIndex_v2; nothing frees one): kept per index
    with the card's UUID, name and PCI address while NVML is held.  ``module``: pynvml (None: imported at the
    first reading) or the tests' fake."""

    module: Any = None
    lib: Any = None  # NVML, initialised (None: not open)
    cards: dict[int, tuple[Any, str, str, str]] = field(default_factory=dict)  # index -> (handle, UUID, name, PCI)
    throttle: str = ""  # the THROTTLE call this NVML answers
    driver: str = DRIVER

    def open(self) -> bool:
        if self.lib is None and (self.module is not None or os.path.exists(self.driver)):
            self.lib = nvml._opened_nvml(self.module)  # None: no pynvml or no libnvidia-ml (a driver's library)
        return self.lib is not None

    def close(self) -> None:
        lib, self.lib, self.cards, self.throttle = self.lib, None, {}, ""
        try:
            if lib is not None:
                lib.nvmlShutdown()
        except Exception:  # noqa: BLE001 - a library that failed already: nothing more to release
            pass

    def read(self, before: tuple[Card, ...]) -> Reading:
        """Every card NVML counts; a lost card as last read (``before``, by index) and said lost."""
        lib = self.lib
        try:
            count = lib.nvmlDeviceGetCount()  # nvmlDeviceGetCount_v2
        except lib.NVMLError as exc:
            self.close()
            return [], set(), f"NVML: {exc}"
        rows, lost, said = [], set(), []
        last = {card.index: card for card in before}
        for index in range(count):
            try:
                rows.append(self._card(lib, index))
            except (Lost, lib.NVMLError) as exc:
                known = self.cards.get(index)
                pci = known[3] if known else last[index].pci if index in last else ""
                if isinstance(exc, Lost):
                    lost.add(pci_key(pci))  # "" where never read: telemetry.py lists it as a card of unknown UUID
                    rows.extend(card for card in before if card.index == index and pci_key(card.pci) == pci_key(pci))
                said.append(f"GPU {pci or index}: {exc}")
        return rows, lost, f"NVML: {'; '.join(said)[:300]}" if said else ("" if rows else "NVML: no card")

    def _card(self, lib: Any, index: int) -> Card:
        if index not in self.cards:
            handle = self._ask(lib, lib.nvmlDeviceGetHandleByIndex, index, needed=True)  # ..._v2
            pci = self._ask(lib, lib.nvmlDeviceGetPciInfo, handle, needed=True).busId  # pci.bus_id
            self.cards[index] = (handle, _text(self._ask(lib, lib.nvmlDeviceGetUUID, handle, needed=True)),
                                 _text(self._ask(lib, lib.nvmlDeviceGetName, handle, needed=True)), _text(pci))
        handle, uuid, name, pci = self.cards[index]

        def ask(call: Callable[..., Any], *args: Any) -> Any:
            return self._ask(lib, call, handle, *args)

        memory, rates = ask(lib.nvmlDeviceGetMemoryInfo), ask(lib.nvmlDeviceGetUtilizationRates)
        figures = (
            ask(lib.nvmlDeviceGetTemperature, lib.NVML_TEMPERATURE_GPU),  # temperature.gpu, °C
            ask(lib.nvmlDeviceGetFanSpeed),  # fan.speed: the intended speed, % of the fan's maximum
            _watts(ask(lib.nvmlDeviceGetPowerUsage)),  # power.draw (mW)
            # power.limit, nvidia-smi's "Power Limit", the limit the owner sets (nvidia-smi -pl, HiveOS's PL):
            # nvmlDeviceGetPowerManagementLimit; nvmlDeviceGetEnforcedPowerLimit is its enforced.power.limit.
            _watts(ask(lib.nvmlDeviceGetPowerManagementLimit)),
            ask(lib.nvmlDeviceGetClockInfo, lib.NVML_CLOCK_SM), ask(lib.nvmlDeviceGetClockInfo, lib.NVML_CLOCK_MEM),
            None if rates is None else rates.gpu,  # utilization.gpu: nvmlUtilization_t.gpu, %
            None if memory is None else memory.used // MIB, None if memory is None else memory.total // MIB,
        )
        counts = (ask(lib.nvmlDeviceGetCurrPcieLinkGeneration), ask(lib.nvmlDeviceGetCurrPcieLinkWidth),
                  self._throttle(lib, handle),
                  ask(lib.nvmlDeviceGetTotalEccErrors, lib.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, lib.NVML_VOLATILE_ECC))
        read: dict[str, Any] = dict(zip(FIGURES, map(_number, figures)))
        read.update(zip(COUNTS, map(_whole, counts)))
        return Card(index, uuid[:100], name[:100], pci[:20], **read)

    def _throttle(self, lib: Any, handle: Any) -> Any:
        for name in ([self.throttle] if self.throttle else THROTTLE):
            call = getattr(lib, name, None)  # an older pynvml lacks the new name
            if call is None:
                continue
            try:
                value = call(handle)
            except lib.NVMLError as exc:
                if getattr(exc, "value", None) == getattr(lib, "NVML_ERROR_FUNCTION_NOT_FOUND", 13):
                    continue  # an older driver's NVML lacks the symbol (nvml.h: 13)
                return self._failed(lib, exc)
            self.throttle = name
            return value
        return None

    def _ask(self, lib: Any, call: Callable[..., Any], *args: Any, needed: bool = False) -> Any:
        """One NVML call's answer; None where the card does not say it (NVML_ERROR_NOT_SUPPORTED: nvidia-smi's
        ``[Not Supported]``, as a GeForce's ECC or a passive card's fan) or any other error of that one field
        (nvidia-smi's ``[Unknown Error]``); Lost for NVML_ERROR_GPU_IS_LOST.  ``needed``: an error is raised."""
        try:
            return call(*args)
        except lib.NVMLError as exc:
            if needed:
                self._failed(lib, exc)
                raise
            return self._failed(lib, exc)

    @staticmethod
    def _failed(lib: Any, exc: Exception) -> None:
        if getattr(exc, "value", None) == getattr(lib, "NVML_ERROR_GPU_IS_LOST", 15):  # nvml.h: 15
            raise Lost("GPU is lost") from exc
        return None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _watts(milliwatts: Any) -> float | None:
    """NVML's mW as nvidia-smi says W (two decimals)."""
    return None if milliwatts is None else round(milliwatts / 1000, 2)
