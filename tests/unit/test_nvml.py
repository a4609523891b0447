"""GPUs read through NVML give the same facts as nvidia-smi.

STAND-IN: ``RecordedNvml`` replays what pynvml returns for a rig with one RTX 3090
(no GPU here); the call names and value shapes are pynvml's (nvidia-ml-py).
"""

from types import SimpleNamespace

from miner2provider.facts.gpu import gpus_from_nvml


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
