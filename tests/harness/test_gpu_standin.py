"""The nvidia-smi stand-in, run locally against a config written by the harness."""

import json
import os
import signal
import subprocess
import sys
import time
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


MINER = Path(gpu_standin.__file__).parent / "standin-cuda"


def _children(pid: int) -> list[int]:
    """The live children of ``pid`` (this kernel may lack /proc/PID/task/*/children: every status is read)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = dict(line.split(":\t", 1) for line in (entry / "status").read_text().splitlines() if ":\t" in line)
        except (OSError, ValueError):
            continue
        if status.get("PPid", "").strip() == str(pid) and not status.get("State", "").startswith("Z"):
            found.append(int(entry.name))
    return found


def _one_child(pid: int, other_than: int = 0, within_s: float = 10.0) -> int:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = [c for c in _children(pid) if c != other_than]
        if len(found) == 1:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"process {pid} has no single child but {_children(pid)} after {within_s} s")


def _attached(log: Path, times: int, within_s: float = 10.0) -> None:
    """Wait until ``times`` workers have attached to the cards (so each is past its start when it is signalled)."""
    deadline = time.monotonic() + within_s
    while (log.read_text() if log.exists() else "").count("miner attached") < times:
        assert time.monotonic() < deadline, f"not {times} attached in {within_s} s"
        time.sleep(0.05)


def test_the_watchdog_parent_starts_a_killed_worker_again_and_a_stop_ends_both(tmp_path):
    """T-Rex's way (its built-in watchdog, off with --no-watchdog): the process started keeps the miner proper as
    its child, the same program with the same arguments, and starts it again when it dies; a TERM to the
    watchdog ends the worker first, then the watchdog."""
    conf = tmp_path / "miner.json"
    conf.write_text(json.dumps({"watchdog_parent": True, "respawn_s": 0.2, "exit_s": 0.3, "resident_mb": 1}))
    env = {**os.environ, "M2P_STANDIN_MINER_CONFIG": str(conf), "M2P_STANDIN_GPU_LOG": str(tmp_path / "gpu.log")}
    env.pop("M2P_STANDIN_WATCHDOG_WORKER", None)
    parent = subprocess.Popen([sys.executable, str(MINER), "--name", "t-rex", "--every", "60"], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        worker = _one_child(parent.pid)
        _attached(tmp_path / "gpu.log", 1)
        assert Path(f"/proc/{worker}/cmdline").read_bytes() == Path(f"/proc/{parent.pid}/cmdline").read_bytes()
        assert Path(f"/proc/{worker}/exe").resolve() == Path(f"/proc/{parent.pid}/exe").resolve()
        os.kill(worker, signal.SIGKILL)
        again = _one_child(parent.pid, other_than=worker)
        assert parent.poll() is None and again != worker
        _attached(tmp_path / "gpu.log", 2)
        os.kill(parent.pid, signal.SIGTERM)
        assert parent.wait(timeout=10) == 0
        assert not Path(f"/proc/{again}").exists()  # ended, and reaped by the watchdog before it exited
        out = parent.stdout.read() if parent.stdout else ""
        assert f"watchdog: worker {worker} started" in out and f"watchdog: worker {again} started" in out, out
        assert "t-rex: releasing the cards' CUDA contexts" in out, out  # the worker stopped as a miner does
        # Only the workers, never the watchdog, attach to the cards: one each.
        assert (tmp_path / "gpu.log").read_text() == "miner attached\n" * 2
    finally:
        for pid in [parent.pid, *_children(parent.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        parent.wait(timeout=10)
