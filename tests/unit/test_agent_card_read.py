"""The cards read through NVML in-process (agent/card_read.py, issue 56): every figure from its NVML call,
NVML_ERROR_NOT_SUPPORTED as None (nvidia-smi's ``[Not Supported]``), NVML_ERROR_GPU_IS_LOST as a lost card,
NVML opened once and kept open, nvidia-smi where NVML does not open, and no reading that raises out of the tick;
and the same Telemetry from both paths for the same cards (property).  NVML here is a FAKE module (no driver can
load here): its answers are the C API's as nvidia-ml-py's pynvml returns them (ints in the API's units, the
nvmlMemory_t and nvmlUtilization_t structs' fields), its errors pynvml's own classes (pynvml.NVMLError(code))."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from miner2provider.agent import card_read, telemetry
from miner2provider.agent.card_read import Nvml, by_nvidia_smi
from miner2provider.agent.telemetry import CardWatch, KernelLog
from miner2provider.rigside.status import Card

MIB = 1024 * 1024


class Err(int):
    """An NVML error code a fake call raises (pynvml.NVMLError(code)) instead of answering."""


NOT_SUPPORTED = Err(pynvml.NVML_ERROR_NOT_SUPPORTED)
# An RTX 3090 mining, in NVML's units (mW, bytes): the stand-in nvidia-smi's loaded card (gpu_standin IDLE/LOAD).
RTX3090 = {"uuid": "GPU-aaaaaaaa-1111-2222-3333-444444444444", "name": "NVIDIA GeForce RTX 3090",
           "pci": "00000000:01:00.0", "temperature": 61, "fan": 75, "power": 331270, "limit": 350000,
           "sm": 1695, "mem": 9501, "util": 100, "used": 5034 * MIB + 123, "total": 24576 * MIB, "gen": 4,
           "width": 16, "throttle": 0x24, "ecc": NOT_SUPPORTED}


class FakeNvml:
    """pynvml's calls the agent makes, over ``cards`` (one dict each, as RTX3090; a value that is an NVML error
    code is raised as pynvml raises it; ``lost``: every call about that card answers NVML_ERROR_GPU_IS_LOST)."""

    NVMLError = pynvml.NVMLError
    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_CLOCK_MEM = (pynvml.NVML_TEMPERATURE_GPU, pynvml.NVML_CLOCK_SM,
                                                           pynvml.NVML_CLOCK_MEM)
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                             pynvml.NVML_VOLATILE_ECC)
    NVML_ERROR_GPU_IS_LOST, NVML_ERROR_FUNCTION_NOT_FOUND = (pynvml.NVML_ERROR_GPU_IS_LOST,
                                                             pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def __init__(self, cards: list[dict[str, Any]], fail_init: int = 0, event_reasons: bool = True) -> None:
        self.cards, self.fail_init, self.calls, self.inits, self.shutdowns = cards, fail_init, 0, 0, 0
        if event_reasons:  # pynvml 12.535 and later; an older one has only the throttle name
            self.nvmlDeviceGetCurrentClocksEventReasons = lambda h: self._answer(h, "throttle")

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise pynvml.NVMLError(self.fail_init)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._answer(index, None)
        return index

    def _answer(self, handle: int, key: str | None) -> Any:
        self.calls += 1
        card = self.cards[handle]
        if card.get("lost"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        value = card.get(key) if key else None
        if isinstance(value, Err):
            raise pynvml.NVMLError(int(value))
        return value

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._answer(h, "pci").encode())  # bytes before nvidia-ml-py 11.515

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._answer(h, "uuid")

    def nvmlDeviceGetName(self, h: int) -> str:
        return self._answer(h, "name")

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._answer(h, "temperature")

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        return self._answer(h, "fan")

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._answer(h, "power")

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return self._answer(h, "limit")

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return self._answer(h, {pynvml.NVML_CLOCK_SM: "sm", pynvml.NVML_CLOCK_MEM: "mem"}[clock])

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=self._answer(h, "util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        used, total = self._answer(h, "used"), self.cards[h]["total"]  # one call, one struct
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._answer(h, "gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._answer(h, "width")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return self._answer(h, "throttle")

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        assert (kind, counter) == (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        return self._answer(h, "ecc")


def card(**changes: Any) -> dict[str, Any]:
    return {**RTX3090, **changes}


def no_smi(argv: list[str], **kwargs: Any) -> Any:
    raise AssertionError(f"nvidia-smi run although NVML answers: {argv}")


def watch(fake: Any, run: Any = no_smi, interval: float = 30.0) -> CardWatch:
    return CardWatch(interval, 85.0, KernelLog("/nonexistent/kmsg"), "/nonexistent", run=run, nvml=Nvml(fake))


def test_every_figure_comes_from_its_nvml_call_in_nvidia_smis_units():
    cards = watch(FakeNvml([card()]))
    cards.read(0.0, 1_800_000_000.0)
    assert cards.cards == (Card(0, RTX3090["uuid"], "NVIDIA GeForce RTX 3090", "00000000:01:00.0", "ok", "",
                                61.0, 75.0, 331.27, 350.0, 1695.0, 9501.0, 100.0, 5034.0, 24576.0, 4, 16, 0x24, None),)
    assert cards.error == "" and cards.status() is not None and cards.status().cards == cards.cards  # type: ignore[union-attr]


def test_what_a_card_does_not_support_is_none_and_an_older_nvml_gives_the_throttle_reasons_by_their_old_name():
    fake = FakeNvml([card(fan=NOT_SUPPORTED, power=NOT_SUPPORTED, limit=NOT_SUPPORTED, ecc=NOT_SUPPORTED,
                          gen=Err(pynvml.NVML_ERROR_UNKNOWN), width=Err(pynvml.NVML_ERROR_NO_PERMISSION))], event_reasons=False)
    cards = watch(fake)
    cards.read(0.0, 1_800_000_000.0)
    (cmp,) = cards.cards
    assert (cmp.fan_percent, cmp.power_w, cmp.power_limit_w, cmp.ecc_uncorrected, cmp.pcie_gen, cmp.pcie_width) == (
        None, None, None, None, None, None)
    assert (cmp.temperature_c, cmp.throttle, cmp.health, cards.error) == (61.0, 0x24, "ok", "")
    # A driver's NVML before R535 has no ...EventReasons symbol (NVML_ERROR_FUNCTION_NOT_FOUND): the old name.
    old_driver = FakeNvml([card()])
    old_driver.nvmlDeviceGetCurrentClocksEventReasons = lambda h: (_ for _ in ()).throw(
        pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
    reader = Nvml(old_driver)
    assert reader.open() and reader.read(())[0][0].throttle == 0x24
    assert reader.throttle == "nvmlDeviceGetCurrentClocksThrottleReasons"


def test_a_lost_card_is_said_lost_the_others_read_afresh_and_one_never_read_has_no_uuid():
    fake = FakeNvml([card(), card(uuid="GPU-b", pci="00000000:02:00.0")])
    cards = watch(fake)
    cards.read(0.0, 1_800_000_000.0)
    fake.cards[1]["lost"] = True
    fake.cards[0]["temperature"] = 70
    cards.read(30.0, 1_800_000_030.0)  # NVML: every interval (30 s), not the fallback's
    assert [(c.uuid, c.health) for c in cards.cards] == [(RTX3090["uuid"], "ok"), ("GPU-b", "lost")]
    assert cards.cards[0].temperature_c == 70.0 and cards.cards[1].temperature_c == 61.0  # as last read
    assert cards.error == "NVML: GPU 00000000:02:00.0: GPU is lost" and cards.unhealthy() == {"GPU-b"}
    assert "GPU is lost" in cards.cards[1].why
    fresh = watch(FakeNvml([card(), card(lost=True)]))  # lost before the agent ever read it
    fresh.read(0.0, 1_800_000_000.0)
    assert [(c.uuid, c.health) for c in fresh.cards] == [(RTX3090["uuid"], "ok"), (telemetry.UNKNOWN_CARD, "lost")]


def test_nvml_is_opened_once_and_kept_open_between_readings_and_reopened_after_the_library_failed():
    fake = FakeNvml([card()])
    cards = watch(fake)
    for n in range(5):
        cards.read(30.0 * n, 1_800_000_000.0 + 30 * n)
    assert (fake.inits, fake.shutdowns) == (1, 0)
    calls = fake.calls
    cards.read(150.0, 1_800_000_150.0)
    assert fake.calls - calls == 12  # a reading: 12 calls for 13 figures (UUID, name, PCI and handle kept)

    def driver_gone() -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    fake.nvmlDeviceGetCount = driver_gone  # type: ignore[method-assign]
    cards.read(180.0, 1_800_000_180.0)
    assert (fake.inits, fake.shutdowns) == (1, 1) and cards.error == "NVML: Driver Not Loaded"
    assert cards.cards[0].temperature_c == 61.0  # kept as last read
    del fake.nvmlDeviceGetCount
    cards.read(210.0, 1_800_000_210.0)
    assert (fake.inits, cards.error) == (2, "")


def smi_rows(cards: list[dict[str, Any]]) -> str:
    """nvidia-smi --query-gpu=card_read.QUERY --format=csv,noheader,nounits for the same cards, as nvidia-smi
    writes each field (its golden cases: tests/unit/facts/gpus, the stand-in's gpus.json)."""

    def field(value: Any, form: str = "{}") -> str:
        return "[Not Supported]" if isinstance(value, Err) else form.format(value)

    return "".join(
        f"{i}, {c['uuid']}, {c['name']}, {c['pci']}, {c['temperature']}, {field(c['fan'])}, "
        f"{field(watts(c['power']), '{:.2f}')}, {field(watts(c['limit']), '{:.2f}')}, {c['sm']}, {c['mem']}, "
        f"{c['util']}, {c['used'] // MIB}, {c['total'] // MIB}, {c['gen']}, {c['width']}, 0x{c['throttle']:016x}, "
        f"{field(c['ecc'])}\n" for i, c in enumerate(cards))


def watts(milliwatts: Any) -> Any:
    return milliwatts if isinstance(milliwatts, Err) else milliwatts / 1000


figure = st.integers(min_value=4, max_value=5000)
a_card = st.fixed_dictionaries({
    "temperature": st.integers(20, 110), "fan": st.one_of(st.just(NOT_SUPPORTED), st.integers(0, 100)),
    "power": st.one_of(st.just(NOT_SUPPORTED), st.integers(4000, 600_000)), "limit": st.integers(100_000, 600_000),
    "sm": figure, "mem": figure, "util": st.integers(0, 100), "used": st.integers(0, 80 * 1024 * MIB),
    "total": st.integers(1024, 80 * 1024).map(lambda m: m * MIB), "gen": st.integers(1, 5),
    "width": st.sampled_from([1, 4, 8, 16]), "throttle": st.integers(0, 0x1FF),
    "ecc": st.one_of(st.just(NOT_SUPPORTED), st.integers(0, 100))})


@settings(max_examples=60, deadline=None)
@given(st.lists(a_card, min_size=1, max_size=8))
def test_both_paths_give_the_same_telemetry_for_the_same_cards(figures):
    cards = [{**RTX3090, **f, "uuid": f"GPU-{i:08x}", "pci": f"00000000:{i + 1:02x}:00.0"} for i, f in enumerate(figures)]

    def nvidia_smi(argv: list[str], **kwargs: Any) -> Any:
        assert argv[1] == f"--query-gpu={card_read.QUERY}"
        return subprocess.CompletedProcess(argv, 0, smi_rows(cards), "")

    by_nvml, by_smi = watch(FakeNvml(cards)), watch(FakeNvml(cards, fail_init=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND),
                                                     run=nvidia_smi)
    by_nvml.read(0.0, 1_800_000_000.0)
    by_smi.read(0.0, 1_800_000_000.0)
    assert by_nvml.status() == by_smi.status() and by_nvml.cards
    assert [c.health for c in by_nvml.cards] == ["hot" if f["temperature"] > 85 else "ok" for f in figures]


def test_without_nvml_nvidia_smi_reads_every_other_interval(tmp_path):
    calls: list[list[str]] = []

    def nvidia_smi(argv: list[str], **kwargs: Any) -> Any:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, smi_rows([RTX3090]), "")

    # pynvml itself where a driver's file is there but not its library (libnvidia-ml): nvmlInit raises
    # LibraryNotFound; where the driver is not loaded at all pynvml is not imported (DRIVER).
    driver = tmp_path / "version"
    driver.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05\n")
    for loaded in (True, False):
        calls.clear()
        cards = CardWatch(30.0, 85.0, KernelLog(str(tmp_path / "kmsg")), run=nvidia_smi,
                          nvml=Nvml(driver=str(driver if loaded else tmp_path / "none")))
        for mono in (0.0, 30.0, 59.0, 60.0, 90.0, 120.0):
            cards.read(mono, 1_800_000_000.0 + mono)
        assert len(calls) == 1 + 2 and cards.cards[0].power_w == 331.27 and cards.nvml.lib is None
    assert by_nvidia_smi(lambda argv, **kw: subprocess.CompletedProcess(argv, 9, "", "NVML: Driver Not Loaded")) == (
        [], set(), "nvidia-smi: NVML: Driver Not Loaded")


@pytest.mark.parametrize("broken", ["count", "figure", "import"])
def test_a_failed_reading_never_raises_out_of_the_tick(broken, monkeypatch):
    fake = FakeNvml([card()])
    if broken == "count":
        fake.nvmlDeviceGetCount = lambda: 1 / 0  # type: ignore[assignment,method-assign]
    elif broken == "figure":
        fake.nvmlDeviceGetFanSpeed = lambda h: (_ for _ in ()).throw(OSError("ctypes: bad call"))  # type: ignore[method-assign]
    cards = watch(fake)
    if broken == "import":  # no pynvml at all (a zipapp built without it): the fallback, itself failing
        monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
        cards = CardWatch(30.0, 85.0, KernelLog("/nonexistent"), run=lambda *a, **k: (_ for _ in ()).throw(
            FileNotFoundError(2, "No such file or directory")))
    cards.read(0.0, 1_800_000_000.0)
    assert cards.cards == () and cards.error.startswith(("NVML: ", "nvidia-smi: "))
    assert cards.status() is not None and cards.status().error  # type: ignore[union-attr]
