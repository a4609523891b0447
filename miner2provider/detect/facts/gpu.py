"""NVIDIA GPUs as ``nvidia-smi`` reports them (and, on the rig itself, NVML).

Parsed here, never in Jinja.  Field list and format as in the real tool's
``--query-gpu ... --format=csv,noheader,nounits``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from miner2provider.detect.facts.base import Fact, Output, whole

QUERY_FIELDS = (
    "index", "name", "uuid", "pci.bus_id", "pci.device_id", "pci.sub_device_id",
    "memory.total", "driver_version",
)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    vendor_id: str  # "10de"
    device_id: str  # "2204"
    subsystem_id: str  # "0x38801462" as nvidia-smi prints it
    memory_mib: int
    driver_version: str

    @property
    def pci_id(self) -> str:
        return f"{self.vendor_id}:{self.device_id}"


@dataclass(frozen=True)
class Gpus:
    state: str  # ok | no-nvidia-smi | driver-error | no-gpu
    gpus: tuple[Gpu, ...]
    error: str = ""  # what nvidia-smi said when it failed

    @property
    def driver_version(self) -> str:
        return self.gpus[0].driver_version if self.gpus else ""

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.name for g in self.gpus))


def _pci_ids(device_field: str) -> tuple[str, str]:
    """``0x220410DE`` is device 2204 of vendor 10de."""
    raw = device_field.strip().lower().removeprefix("0x")
    if len(raw) == 8:
        return raw[4:], raw[:4]
    return "", ""


def gpu_from_fields(values: dict[str, str], row: int) -> Gpu:
    """``row``: the GPU's place in nvidia-smi's output, its index when the index column is unreadable."""
    vendor, device = _pci_ids(values["pci.device_id"])
    index = whole(values["index"])
    return Gpu(
        index=row if index is None else index,
        name=values["name"],
        uuid=values["uuid"],
        pci_bus_id=values["pci.bus_id"],
        vendor_id=vendor,
        device_id=device,
        subsystem_id=values["pci.sub_device_id"],
        memory_mib=whole(re.sub(r"[^0-9]", "", values["memory.total"])) or 0,
        driver_version=values["driver_version"],
    )


class GpusFact(Fact[Gpus]):
    """``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``, one row per GPU:

    ``0, NVIDIA GeForce RTX 3090, GPU-..., 00000000:01:00.0, 0x220410DE, 0x38801462, 24576, 550.127.05``
    Exit 127: no nvidia-smi; other non-zero exits: the driver is broken or absent.
    """

    name = "gpus"
    command = (
        "command -v nvidia-smi >/dev/null 2>&1 || exit 127; "
        "nvidia-smi --query-gpu=" + ",".join(QUERY_FIELDS) + " --format=csv,noheader,nounits"
    )

    @staticmethod
    def parse(out: Output) -> Gpus:
        if out.rc == 127:
            return Gpus("no-nvidia-smi", ())
        text = out.text.strip()
        # nvidia-smi exits 6 with this when the driver works but sees no card.
        if "No devices were found" in text or (out.rc == 0 and not text):
            return Gpus("no-gpu", ())
        if out.rc != 0:
            return Gpus("driver-error", (), text.splitlines()[0] if text else f"nvidia-smi exit {out.rc}")
        gpus: list[Gpu] = []
        for line in text.splitlines():
            cells = [c.strip() for c in line.split(", ")]
            if len(cells) != len(QUERY_FIELDS):
                return Gpus("driver-error", (), f"unexpected nvidia-smi row: {line[:120]}")
            gpus.append(gpu_from_fields(dict(zip(QUERY_FIELDS, cells, strict=True)), len(gpus)))
        return Gpus("ok", tuple(gpus))


class CudaFact(Fact[str]):
    """The CUDA version the driver supports, from nvidia-smi's table header:

    ``| NVIDIA-SMI 550.127.05   Driver Version: 550.127.05   CUDA Version: 12.4     |``
    """

    name = "cuda"
    command = "command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi 2>/dev/null | grep -m1 'CUDA Version'"

    @staticmethod
    def parse(out: Output) -> str:
        match = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", out.text)
        return match.group(1) if match else ""


def gpus_from_nvml(nvml) -> tuple[Gpus, str]:  # type: ignore[no-untyped-def]
    """Read GPUs through an NVML binding (``pynvml``) into the same ``Gpus`` as nvidia-smi gives.

    Takes the module as an argument so tests can hand in a recorded one; on a rig it is
    the real ``pynvml``.  Returns (gpus, cuda version "12.4").
    """
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return Gpus("driver-error", (), f"NVML: {exc}"), ""
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda_raw = nvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12040
        cuda = f"{cuda_raw // 1000}.{(cuda_raw % 1000) // 10}"
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            pci = nvml.nvmlDeviceGetPciInfo(handle)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(gpu_from_fields({
                "index": str(index),
                "name": _text(nvml.nvmlDeviceGetName(handle)),
                "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                "pci.bus_id": _text(pci.busId),
                "pci.device_id": f"0x{pci.pciDeviceId:08X}",
                "pci.sub_device_id": f"0x{pci.pciSubSystemId:08X}",
                "memory.total": str(mem.total // (1024 * 1024)),
                "driver_version": driver,
            }, index))
        return (Gpus("ok", tuple(gpus)) if gpus else Gpus("no-gpu", ())), cuda
    finally:
        nvml.nvmlShutdown()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
