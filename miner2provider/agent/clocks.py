"""The cards' clocks and power limits around a hand-over: reset to defaults (NVML, else nvidia-smi) before a
lease gets a card, the mining OS's own tuning re-applied before the miner mines on every card again."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from miner2provider.agent.nvml import _opened_nvml, _uuid
from miner2provider.agent.shell import _checked, _shell, with_os_environment


@dataclass(frozen=True)
class Clocks:
    """The cards' clocks and power limits.  Mining OSes tune them for hashing (HiveOS's nvidia-oc: a
    power limit through nvidia-smi, clock offsets through nvidia-settings); CUDA work on a memory
    offset tuned for one hash crashes or computes wrong.  reset() puts every card on its defaults
    before a lease gets it; reapply() runs the mining OS's own command (its configuration stays the
    source of truth) before the miner starts again.  No command known for the OS: the cards mine on
    their defaults until the OS applies its settings itself (its next boot)."""

    apply_cmd: str = ""
    timeout_s: float = 60.0
    environment_file: str = ""  # as Miner's: HiveOS's nvidia-oc finds gpu-detect and $NVIDIA_OC_CONF through it

    def reset(self, nvml: Any = None, run: Callable[..., Any] = subprocess.run,
              cards: frozenset[str] | None = None) -> list[str]:
        """``cards`` (UUIDs) on their defaults, None: every card.  Only the cards a lease gets: the others go on
        mining on the owner's tuning beside it (per-card hand-over).  Returns what this driver cannot reset
        (an NVML without the offset calls: ``FUNCTION_NOT_FOUND``), to be said; anything else that fails
        raises (a lease on mining clocks may compute wrong: the gate refuses it)."""
        nvml = _opened_nvml(nvml)
        if nvml is None:  # nvidia-smi does the same (offsets apart)
            self._reset_with_nvidia_smi(run, cards)
            return []
        left: list[str] = []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                if cards is None or _uuid(nvml, handle) in cards:
                    left += _reset_card(nvml, handle, index)
        finally:
            nvml.nvmlShutdown()
        return left

    def _reset_with_nvidia_smi(self, run: Callable[..., Any], cards: frozenset[str] | None) -> None:
        def smi(*args: str) -> str:
            proc = run(["nvidia-smi", *args], capture_output=True, text=True, timeout=self.timeout_s)
            out: str = (proc.stdout + proc.stderr).strip()
            # Older cards (before Volta) cannot lock clocks: nothing to reset there.
            if proc.returncode != 0 and "not supported" not in out.lower():
                raise RuntimeError(f"nvidia-smi {' '.join(args)} exited {proc.returncode}: {out[-200:]}")
            return out

        # nvidia-smi's -i takes a UUID as well as an index (nvidia-smi(1)): a card named by UUID is that card.
        chosen = [()] if cards is None else [("-i", uuid) for uuid in sorted(cards)]
        for card in chosen:
            smi(*card, "-rgc")
            smi(*card, "-rmc")
        for line in smi("--query-gpu=index,uuid,power.default_limit", "--format=csv,noheader,nounits").splitlines():
            index, uuid, watts = (part.strip() for part in (line.split(",") + ["", ""])[:3])
            if cards is not None and uuid not in cards:
                continue
            if index.isdigit() and watts.replace(".", "", 1).isdigit():  # "[N/A]": no settable limit
                smi("-i", index, "-pl", watts)

    def tuned(self, cards: frozenset[str] | None = None, nvml: Any = None,
              run: Callable[..., Any] = subprocess.run) -> frozenset[str]:
        """The ``cards`` (UUIDs; None: every card) that are off their defaults: a power limit other than the
        default, or a clock offset where this NVML reads one (a dashboard OC push during a lease: HiveOS's
        nvidia-oc tunes every card, the leased ones too)."""
        nvml = _opened_nvml(nvml)
        if nvml is None:
            query = ["nvidia-smi", "--query-gpu=uuid,power.limit,power.default_limit", "--format=csv,noheader,nounits"]
            out = run(query, capture_output=True, text=True, timeout=self.timeout_s)
            if out.returncode != 0:
                raise RuntimeError(f"nvidia-smi --query-gpu exited {out.returncode}: {out.stdout.strip()[-200:]}")
            rows = [[part.strip() for part in line.split(",")] for line in out.stdout.splitlines()]
            return frozenset(row[0] for row in rows if len(row) == 3 and (cards is None or row[0] in cards)
                             and _number(row[1]) is not None and _number(row[1]) != _number(row[2]))
        try:
            found: set[str] = set()
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _uuid(nvml, handle)
                if (cards is None or uuid in cards) and _off_defaults(nvml, handle):
                    found.add(uuid)
            return frozenset(found)
        finally:
            nvml.nvmlShutdown()

    def reapply(self) -> None:
        if self.apply_cmd:
            _checked(_shell(self.apply_cmd, self.timeout_s, env=with_os_environment(self.environment_file)),
                     self.apply_cmd)


NVML_ERROR_FUNCTION_NOT_FOUND = 13  # nvml.h: "Local version of NVML doesn't implement this function"


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]": a card without a settable limit
        return None


def _off_defaults(nvml: Any, handle: Any) -> bool:
    """A power limit other than the default, or a clock offset; what this card or NVML cannot read counts as
    on its defaults (nothing m2p could reset there either)."""
    reads: list[Any] = []
    for name in ("nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetPowerManagementDefaultLimit",
                 "nvmlDeviceGetGpcClkVfOffset", "nvmlDeviceGetMemClkVfOffset"):
        call = getattr(nvml, name, None)
        try:
            reads.append(call(handle) if call is not None else None)
        except nvml.NVMLError:
            reads.append(None)
    limit, default, gpc, mem = reads
    return (limit is not None and default is not None and limit != default) or bool(gpc) or bool(mem)


def _reset_card(nvml: Any, handle: Any, index: int) -> list[str]:
    """Locked clocks off, clock offsets to 0, the default power limit; a call this card or this pynvml does not
    have is skipped (nothing of it to reset).  A call this driver's NVML lacks (FUNCTION_NOT_FOUND: the offset
    calls came with driver 470+) is returned, to be said: the rest is still reset."""
    not_supported = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)
    not_found = getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("nvmlDeviceResetGpuLockedClocks", ()), ("nvmlDeviceResetMemoryLockedClocks", ()),
        ("nvmlDeviceSetGpcClkVfOffset", (0,)), ("nvmlDeviceSetMemClkVfOffset", (0,)),
    ]
    left: list[str] = []
    try:
        calls.append(("nvmlDeviceSetPowerManagementLimit", (nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle),)))
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == not_found:
            left.append(f"GPU {index}: nvmlDeviceGetPowerManagementDefaultLimit")
        elif getattr(exc, "value", None) != not_supported:
            raise RuntimeError(f"GPU {index}: default power limit: {exc}") from None
    for name, args in calls:
        call = getattr(nvml, name, None)
        if call is None:
            continue
        try:
            call(handle, *args)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == not_found:
                left.append(f"GPU {index}: {name}")
            elif getattr(exc, "value", None) != not_supported:
                raise RuntimeError(f"GPU {index}: {name}: {exc}") from None
    return left
