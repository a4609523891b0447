"""GPUs read through NVML give the same facts as nvidia-smi.

STAND-IN: ``RecordedNvml`` replays what pynvml returns for a rig with one RTX 3090
(no GPU here); the call names and value shapes are pynvml's (nvidia-ml-py).
"""

import json
from pathlib import Path
from types import SimpleNamespace

from miner2provider.detect.facts import FACTS_BY_NAME
from miner2provider.detect.facts.base import Output
from miner2provider.detect.facts.gpu import gpus_from_nvml


class RecordedNvml:
    class NVMLError(Exception):
        pass

    def __init__(self, fail_init=False):
        self.fail_init = fail_init
        self.shut = False

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlSystemGetDriverVersion(self):
        return "550.127.05"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA GeForce RTX 3090"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-11111111-2222-3333-4444-555555555555"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=b"00000000:01:00.0", pciDeviceId=0x220410DE, pciSubSystemId=0x38801462)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=24576 * 1024 * 1024)


def test_nvml_reading_matches_nvidia_smi_shape():
    nvml = RecordedNvml()
    gpus, cuda = gpus_from_nvml(nvml)
    assert cuda == "12.4"
    (g,) = gpus.gpus
    assert (g.name, g.pci_id, g.subsystem_id, g.memory_mib, g.pci_bus_id) == (
        "NVIDIA GeForce RTX 3090", "10de:2204", "0x38801462", 24576, "00000000:01:00.0")
    assert nvml.shut


def test_driver_not_loaded_is_a_driver_error():
    gpus, cuda = gpus_from_nvml(RecordedNvml(fail_init=True))
    assert (gpus.state, gpus.error, cuda) == ("driver-error", "NVML: Driver Not Loaded", "")


class RecordedH100(RecordedNvml):
    """Values pynvml returned on a real H100 80GB HBM3 (device machine, 2026-11-23); the same card's
    nvidia-smi row is the golden case facts/gpus/h100-real.json."""

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H100 80GB HBM3"  # nvidia-ml-py >= 11.515 returns str, older bytes

    def nvmlDeviceGetUUID(self, h):
        return "GPU-0cef5b8d-97df-3858-e876-6bbec7f8a483"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId="00000000:00:06.0", pciDeviceId=0x233010DE, pciSubSystemId=0x16C110DE)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=81559 * 1024 * 1024)


def test_nvml_and_nvidia_smi_agree_on_a_real_card():
    golden = json.loads((Path(__file__).parent / "facts/gpus/h100-real.json").read_text())
    smi = FACTS_BY_NAME["gpus"].parse(Output(golden["output"], golden["rc"]))
    nvml, cuda = gpus_from_nvml(RecordedH100())
    assert nvml == smi
    assert cuda == FACTS_BY_NAME["cuda"].parse(
        Output(json.loads((Path(__file__).parent / "facts/cuda/r580-real.json").read_text())["output"], 0))
