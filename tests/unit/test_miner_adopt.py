"""Issue 38's adoption, the parts that need no rig: which GPU process is adopted (a known miner, or the one the
owner names; never an unknown one by itself, never a container's), and that the command m2p's unit runs is the
captured one exactly (run here by sh: arguments and environment with spaces, quotes and $(...) arrive as they
were, and nothing of the caller's environment leaks in).  On a sandbox rig: tests/integration/test_miner_adopt.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from miner2provider.core.errors import UsageError
from miner2provider.detect.facts.holders import Ancestor, Holder
from miner2provider.fleet import adopt_on_rig, miner

TREX = Holder(42, "t-rex", ("GPU-1",), ancestors=(Ancestor("bash", "keep-mining.sh"),))
UNKNOWN = Holder(58, "python3.11", ("GPU-1",))
LEASE = Holder(77, "python3", ("GPU-2",), in_container=True)


def test_a_known_miner_is_chosen_and_said_with_what_keeps_it():
    assert miner.choose((TREX, UNKNOWN, LEASE), None) is TREX
    assert miner.said(TREX) == "t-rex (pid 42, 1 GPUs; wrapper keep-mining.sh)"


@pytest.mark.parametrize(("holders", "pid", "said"), [
    ((UNKNOWN, LEASE), None, r"only python3.11 \(pid 58\): m2p never touches an unknown GPU process unless you name"),
    ((LEASE,), None, "no process holds a GPU outside a container"),
    ((TREX, UNKNOWN), 77, r"process 77 holds no GPU outside a container on this rig \(holders: t-rex \(pid 42\)"),
    ((LEASE,), 77, "process 77 holds no GPU outside a container"),  # a lease's container: never
    ((TREX, Holder(43, "lolminer", ("GPU-2",))), None, "several miners hold GPUs"),
])
def test_nothing_is_adopted_that_the_owner_did_not_name(holders, pid, said):
    with pytest.raises(UsageError, match=said):
        miner.choose(holders, pid)


def test_an_unknown_process_is_adopted_only_by_its_pid():
    assert miner.choose((UNKNOWN, LEASE), 58) is UNKNOWN


def test_the_units_command_is_the_captured_one_exactly(tmp_path, monkeypatch):
    monkeypatch.setenv("CALLERS_SECRET", "must-not-leak")
    probe = "import json, os, sys; print(json.dumps([sys.argv[1:], os.getcwd(), dict(os.environ)]))"
    captured = {"exe": sys.executable, "argv": ["python3", "-c", probe, "a b", "'q'", "$(id)", "--pass=x;y"],
                "cwd": str(tmp_path), "env": {"WALLET": "0x 'w' $HOME", "PATH": "/usr/bin:/bin"}, "user": "root"}
    line = adopt_on_rig._command(captured)
    done = subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True)
    argv, cwd, env = json.loads(done.stdout)
    assert argv == ["a b", "'q'", "$(id)", "--pass=x;y"] and cwd == str(tmp_path)
    assert {k: v for k, v in env.items() if k not in {"LC_CTYPE"}} == captured["env"]


def test_a_logins_environment_is_left_out(monkeypatch, tmp_path):
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "environ").write_bytes(b"WALLET=0xabc\0SSH_CONNECTION=1 2 3 4\0TERM=xterm\0PWD=/root\0"
                                         b"CUDA_VISIBLE_DEVICES=0\0XDG_SESSION_ID=3\0")
    monkeypatch.setattr(adopt_on_rig, "PROC", proc)
    assert adopt_on_rig._environ(7) == {"WALLET": "0xabc", "CUDA_VISIBLE_DEVICES": "0"}
