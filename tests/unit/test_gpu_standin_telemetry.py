"""The nvidia-smi STAND-IN's telemetry (issue 56), run directly with a temporary gpus.json: the fields the agent
reads in nvidia-smi's CSV (units, ``[N/A]`` and ``[Not Supported]`` as a GeForce answers them), a card under a
miner's load, a hot card, a lost card (the real message on stderr, exit 15, no card printed) and an Xid written
once into the stand-in's kernel log in /dev/kmsg's format, which the detect probe's Xid fact reads as NVRM's."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

from m2p_sandbox import gpu_standin
from miner2provider.detect.facts.base import Output
from miner2provider.detect.facts.health import XidFact

SCRIPT = Path(gpu_standin.__file__).parent / "nvidia-smi"
FIELDS = ("index,uuid,name,temperature.gpu,fan.speed,power.draw,power.limit,clocks.sm,clocks.mem,utilization.gpu,"
          "memory.used,memory.total,pcie.link.gen.current,pcie.link.width.current,clocks_throttle_reasons.active,"
          "ecc.errors.uncorrected.volatile.total")


def rig(tmp_path: Path, **changes: dict[str, object]) -> Path:
    """gpus.json of two RTX 3090s, card N's row changed by ``changes["cardN"]``; its kernel log in tmp_path."""
    config = gpu_standin.rig_config("r1", ["rtx3090", "rtx3090"])
    for index, row in enumerate(config["gpus"]):  # type: ignore[arg-type]
        row.update(changes.get(f"card{index}", {}))
    config["kmsg"] = str(tmp_path / "kmsg")
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(config))
    return path


def smi(config: Path, *args: str, miner: str = "") -> subprocess.CompletedProcess[str]:
    # A miner's name no process on this machine has (sandbox rigs' stand-in miners are visible from here).
    env = {"M2P_STANDIN_GPUS": str(config), "M2P_STANDIN_GPU_LOG": os.devnull,
           "M2P_STANDIN_MINER": miner or f"no-such-miner-{secrets.token_hex(4)}", "PATH": os.environ["PATH"]}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=30)


def rows(config: Path, fmt: str = "csv,noheader,nounits", miner: str = "") -> list[list[str]]:
    proc = smi(config, f"--query-gpu={FIELDS}", f"--format={fmt}", miner=miner)
    assert proc.returncode == 0, proc.stderr
    return [line.split(", ") for line in proc.stdout.splitlines()]


def test_an_idle_geforce_answers_every_telemetry_field_and_n_a_for_its_ecc(tmp_path):
    first = rows(rig(tmp_path))[0]
    assert first[:3] == ["0", first[1], "NVIDIA GeForce RTX 3090"] and first[1].startswith("GPU-")
    assert first[3:] == ["38", "30", "18.52", "350.00", "210", "405", "0", "1", "24576", "1", "16",
                         "0x0000000000000001", "[N/A]"]


def test_with_units_the_header_names_the_fields_as_nvidia_smi_does_and_n_a_carries_no_unit(tmp_path):
    header, first, _ = rows(rig(tmp_path), "csv")
    assert header == ["index", "uuid", "name", "temperature.gpu", "fan.speed [%]", "power.draw [W]",
                      "power.limit [W]", "clocks.current.sm [MHz]", "clocks.current.memory [MHz]",
                      "utilization.gpu [%]", "memory.used [MiB]", "memory.total [MiB]", "pcie.link.gen.current",
                      "pcie.link.width.current", "clocks_throttle_reasons.active",
                      "ecc.errors.uncorrected.volatile.total"]
    assert first[3:8] == ["38", "30 %", "18.52 W", "350.00 W", "210 MHz"] and first[-1] == "[N/A]"


def test_a_card_a_miner_holds_reports_its_load_and_the_other_stays_idle(tmp_path):
    config = rig(tmp_path)
    uuid = json.loads(config.read_text())["gpus"][1]["uuid"]
    name = f"m2p-test-miner-{secrets.token_hex(4)}"
    (tmp_path / name).symlink_to("/bin/sleep")
    miner = subprocess.Popen([str(tmp_path / name), "30"], env={"CUDA_VISIBLE_DEVICES": uuid})
    try:
        idle, loaded = rows(config, miner=name)
    finally:
        miner.kill()
        miner.wait()
    assert idle[9] == "0" and idle[3] == "38"
    assert loaded[3:8] == ["63", "75", "315.00", "350.00", "1695"] and loaded[9] == "100"
    assert loaded[14] == "0x0000000000000004"  # the software power cap, as a miner at the limit is


def test_a_hot_card_and_a_field_the_driver_cannot_read_come_from_gpus_json(tmp_path):
    config = rig(tmp_path, card0={"temperature.gpu": "92", "power.draw": "[Not Supported]"})
    hot, other = rows(config)
    assert hot[3] == "92" and hot[5] == "[Not Supported]" and other[3] == "38"
    assert rows(config, "csv,noheader")[0][5] == "[Not Supported]"  # no unit after it either


def test_a_lost_card_stops_every_answer_with_the_real_message_and_exit_15(tmp_path):
    config = rig(tmp_path, card1={"lost": True})
    for args in ([f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits"],
                 ["--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"], []):
        proc = smi(config, *args)
        assert (proc.returncode, proc.stdout) == (15, "")
        assert proc.stderr == ("Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.  "
                               "Reboot the system to recover this GPU\n")


def test_an_xid_is_written_once_to_the_kernel_log_as_nvrm_writes_it_and_79_loses_the_card(tmp_path):
    config = rig(tmp_path, card0={"xid": [13]})
    assert smi(config, "-L").returncode == 0
    assert smi(config, "-L").returncode == 0  # written once, not at every call
    lines = (tmp_path / "kmsg").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("3,0,") and ",-;NVRM: Xid (PCI:0000:01:00): 13, pid=" in lines[0]
    xid = XidFact.parse(Output((tmp_path / "kmsg").read_text(), 0))
    assert (xid.count, xid.codes) == (1, (13,))

    changed = json.loads(config.read_text())
    changed["gpus"][1]["xid"] = [79]
    config.write_text(json.dumps(changed))
    proc = smi(config, "-L")
    assert proc.returncode == 15 and "0000:02:00.0: GPU is lost" in proc.stderr
    assert XidFact.parse(Output((tmp_path / "kmsg").read_text(), 0)).codes == (13, 79)
    assert (tmp_path / "kmsg").read_text().splitlines()[1].startswith("3,1,")


def test_a_real_kernel_log_is_never_written(tmp_path):
    config = rig(tmp_path, card0={"xid": [79]})
    changed = json.loads(config.read_text())
    changed["kmsg"] = os.devnull  # a character device, as /dev/kmsg is
    config.write_text(json.dumps(changed))
    assert smi(config, "-L").returncode == 0
    assert "xid_logged" not in json.loads(config.read_text())["gpus"][0]
