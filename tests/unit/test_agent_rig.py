"""The generic miner adapter (issue 15): m2p ends the processes running from a mining OS's miner folder
itself, TERM then KILL, after the OS's own hold command.  Real processes, started here."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from miner2provider.agent.rig import Miner, _programs


def start(folder: Path, name: str, *, ignore_term: bool, relative: bool) -> subprocess.Popen[bytes]:
    """A stand-in miner: a python script in ``folder`` (run as ./name from there when relative)."""
    script = folder / name
    script.write_text("import signal, time\n"
                      + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
                      + "print('ready', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, f"./{name}" if relative else str(script)], cwd=folder,
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


@pytest.fixture
def miners(tmp_path):
    folder = tmp_path / "opt/mmp/miners/standin"
    folder.mkdir(parents=True)
    started: list[subprocess.Popen[bytes]] = []
    yield folder, started
    for proc in started:
        proc.kill()
        proc.wait()


def test_stop_runs_the_hold_then_ends_the_miners_term_first_then_kill(miners, tmp_path):
    folder, started = miners
    polite = start(folder, "polite-miner", ignore_term=False, relative=True)
    stubborn = start(folder, "stubborn-miner", ignore_term=True, relative=False)
    elsewhere = start(tmp_path, "not-a-miner", ignore_term=False, relative=True)
    started += [polite, stubborn, elsewhere]
    hold = tmp_path / "held"
    miner = Miner(running_cmd="", start_cmd="", stop_cmd=f"touch {hold}",
                  processes=(str(tmp_path / "opt/mmp/miners"),), grace_s=0.5)
    assert sorted(miner.miner_pids()) == sorted([polite.pid, stubborn.pid])
    assert miner.running()
    t0 = time.monotonic()
    miner.stop()
    assert hold.exists()  # the OS's own hold ran first
    assert polite.wait(5) == -15 and stubborn.wait(5) == -9  # TERM ended one; the other needed KILL
    assert time.monotonic() - t0 >= 0.5  # KILL only after the grace
    assert not miner.running() and elsewhere.poll() is None  # a process outside the folder is left alone


def test_a_failing_hold_stops_nothing_and_says_so(miners, tmp_path):
    folder, started = miners
    started.append(start(folder, "m", ignore_term=False, relative=True))
    miner = Miner(running_cmd="", start_cmd="", stop_cmd="echo no dashboard >&2; exit 3",
                  processes=(str(tmp_path / "opt/mmp/miners"),))
    with pytest.raises(RuntimeError, match="exited 3: no dashboard"):
        miner.stop()
    assert started[0].poll() is None


def test_programs_resolve_an_interpreters_relative_script_against_its_cwd(miners):
    folder, started = miners
    proc = start(folder, "rel-miner", ignore_term=False, relative=True)
    started.append(proc)
    assert dict(_programs("/proc"))[proc.pid] == str(folder / "rel-miner")


def test_without_processes_nothing_is_swept():
    assert Miner(running_cmd="", start_cmd="", stop_cmd="").miner_pids() == []
    assert not Miner(running_cmd="", start_cmd="", stop_cmd="").running()
