"""What one telemetry reading costs the agent, per path (agent/card_read.py), in CPU seconds.

    .venv/bin/python benchmarks/card_read.py [--cards 8] [--readings 2000] [--calls 20]

- NVML kept open: the agent's own Python work for one reading of ``--cards`` cards, through a FAKE NVML
  module whose calls answer at once (no driver can load here).  On a rig each of the reading's 12 calls per
  card is also a call into libnvidia-ml (mostly an ioctl to the driver): not measured here.
- NVML absent: what the agent tries before falling back, per reading: without the NVIDIA driver (a sandbox
  rig, a rig of AMD cards) one look for /proc/driver/nvidia/version; with the driver but not its library,
  pynvml's nvmlInit failing to load libnvidia-ml.so.1.
- nvidia-smi: one ``--query-gpu`` call of the sandbox's STAND-IN (a Python script; the real one, a C program
  that initialises NVML at every call, costs tens to hundreds of ms of CPU with several cards, which
  cannot be measured here), CPU of the child from its rusage.
- The agent's memory for pynvml: RSS of a fresh python3 before and after ``import pynvml`` (from bytecode).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pynvml

from m2p_sandbox import gpu_standin
from miner2provider.agent import card_read

HERE = Path(__file__).resolve().parents[1]


def fake_nvml(cards: int) -> SimpleNamespace:
    """pynvml's calls as the agent makes them, each answering at once (the cost left is the agent's)."""
    memory, rates = SimpleNamespace(used=5034 << 20, total=24576 << 20), SimpleNamespace(gpu=100, memory=40)
    not_supported = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def ecc(handle: int, kind: int, counter: int) -> int:
        raise not_supported  # a GeForce: every reading meets one NotSupported, as on a mining rig

    answers = {name: (lambda *args: 1) for name in dir(pynvml) if name.startswith("nvmlDevice")}
    answers.update(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: cards,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetUUID=lambda h: f"GPU-{h:08x}",
        nvmlDeviceGetName=lambda h: "NVIDIA GeForce RTX 3090",
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=f"00000000:{h + 1:02x}:00.0"),
        nvmlDeviceGetMemoryInfo=lambda h: memory, nvmlDeviceGetUtilizationRates=lambda h: rates,
        nvmlDeviceGetPowerUsage=lambda h: 331270, nvmlDeviceGetTotalEccErrors=ecc)
    constants = {name: getattr(pynvml, name) for name in dir(pynvml) if name.startswith("NVML_")}
    return SimpleNamespace(NVMLError=pynvml.NVMLError, **constants, **answers)


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def per_reading_nvml(cards: int, readings: int) -> float:
    reader = card_read.Nvml(fake_nvml(cards))
    assert reader.open()
    rows, _, error = reader.read(())
    assert len(rows) == cards and not error, error
    start = cpu()
    for _ in range(readings):
        reader.read(())
    return (cpu() - start) / readings


def per_reading_absent(readings: int, driver: str) -> float:
    start = cpu()
    for _ in range(readings):
        assert not card_read.Nvml(driver=driver).open()
    return (cpu() - start) / readings


def per_call_standin(cards: int, calls: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        config = gpu_standin.rig_config("r1", ["rtx3090"] * cards)
        config["kmsg"] = os.devnull
        Path(tmp, "gpus.json").write_text(json.dumps(config))
        env = {"M2P_STANDIN_GPUS": str(Path(tmp, "gpus.json")), "M2P_STANDIN_GPU_LOG": os.devnull,
               "PATH": os.environ["PATH"], "M2P_STANDIN_MINER": "none"}
        script = Path(gpu_standin.__file__).parent / "nvidia-smi"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        for _ in range(calls):
            rows, _, error = card_read.by_nvidia_smi(
                lambda argv, **kw: subprocess.run([sys.executable, str(script), *argv[1:]], env=env, **kw))
            assert len(rows) == cards and not error, error
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / calls


def pynvml_rss_kb() -> tuple[int, int]:
    probe = ("import sys\n"
             "def rss():\n    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])\n"
             "before = rss()\nimport pynvml\nprint(before, rss())")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    before, after = map(int, out.stdout.split())
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=8)
    parser.add_argument("--readings", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    started = time.monotonic()
    nvml_s = per_reading_nvml(args.cards, args.readings)
    no_driver_s = per_reading_absent(args.readings, "/nonexistent/driver")
    no_library_s = per_reading_absent(args.readings, __file__)
    smi_s = per_call_standin(args.cards, args.calls)
    before, after = pynvml_rss_kb()
    print(f"cards: {args.cards}")
    print(f"NVML kept open, the agent's Python per reading: {nvml_s * 1e3:.3f} ms "
          f"({nvml_s / 30 * 100:.4f} % of a core at one reading per 30 s; the driver's own ioctls not included)")
    print(f"NVML absent, per reading: no driver {no_driver_s * 1e3:.4f} ms, "
          f"a driver without libnvidia-ml (pynvml's failed open) {no_library_s * 1e3:.3f} ms")
    print(f"stand-in nvidia-smi per call (child CPU): {smi_s * 1e3:.1f} ms "
          f"({smi_s / 30 * 100:.3f} % at 30 s, {smi_s / 60 * 100:.3f} % at 60 s)")
    print(f"RSS of python3: {before / 1024:.1f} MB, after import pynvml {after / 1024:.1f} MB "
          f"(+{(after - before) / 1024:.1f} MB)")
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
