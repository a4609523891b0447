"""The nvidia-smi stand-in, run locally against a config written by the harness."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from m2p_sandbox import gpu_standin

SCRIPT = Path(gpu_standin.__file__).parent / "nvidia-smi"


@pytest.fixture
def standin(tmp_path, monkeypatch):
    conf = tmp_path / "gpus.json"
    conf.write_text(json.dumps(gpu_standin.rig_config("r1", ["a5000", "cmp90hx"])))
    source = SCRIPT.read_text().replace('"/etc/m2p-standin/gpus.json"', repr(str(conf)))
    script = tmp_path / "nvidia-smi"
    script.write_text(source)

    def run(*args):
        p = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)
        return p.returncode, p.stdout

    return run


def test_query_rows_match_captured_output(standin):
    code, out = standin("--query-gpu=name,memory.total,driver_version,pci.device_id",
                        "--format=csv,noheader")
    assert code == 0
    # Same shape as the row captured in provider-configs#82 (driver differs by design).
    assert out.splitlines()[0] == "NVIDIA RTX A5000, 24564 MiB, 550.127.05, 0x223110DE"
    assert out.splitlines()[1] == "NVIDIA CMP 90HX, 10240 MiB, 550.127.05, 0x220D10DE"


def test_header_and_units(standin):
    code, out = standin("--query-gpu=index,memory.total", "--format=csv")
    assert out.splitlines()[0] == "index, memory.total [MiB]"
    code, out = standin("--query-gpu=memory.total", "--format=csv,noheader,nounits")
    assert out.split() == ["24564", "10240"]


def test_unknown_field_and_bad_arguments_fail_like_the_real_tool(standin):
    assert standin("--query-gpu=nope", "--format=csv") == (
        2, 'Field "nope" is not a valid field to query.\n')
    code, out = standin("--bogus")
    assert code == 2 and "Invalid combination of input arguments" in out


def test_unknown_card_is_refused():
    from m2p_sandbox.errors import SandboxError

    with pytest.raises(SandboxError, match="unknown stand-in card"):
        gpu_standin.rig_config("r", ["gtx9999"])
