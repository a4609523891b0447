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


def test_the_hashrate_is_read_where_the_owner_says_else_at_t_rexs_default(tmp_path):
    """m2p_trex_api_port wins; a miner named t-rex is read at T-Rex's default port; any other miner is not read."""
    from miner2provider.core.inventory import Host

    plain = Host("rig07", "10.0.0.7", 22, "user", None, None, None, ("all",), {})
    named = Host("rig07", "10.0.0.7", 22, "user", None, None, None, ("all",), {"m2p_trex_api_port": 4068})
    assert miner.stats_port(plain, TREX) == 4067
    assert miner.stats_port(named, UNKNOWN) == 4068
    assert miner.stats_port(plain, UNKNOWN) == 0


def test_t_rexs_summary_is_read_from_the_rigs_loopback_and_anything_else_is_no_hashrate(trex_api):
    """adopt_on_rig's reader: T-Rex's /summary (gpus[].hashrate in H/s) summed to MH/s; an API that answers
    something else, or nothing, is no hashrate (the adoption then says it did not compare)."""
    answers = [json.dumps({"algorithm": "kawpow", "gpus": [{"hashrate": 58_000_000}, {"hashrate": 29_500_000}]}),
               "<html>not T-Rex</html>", json.dumps({"gpus": [{"hashrate": -1}]})]
    port, asked = trex_api(lambda: answers.pop(0))
    assert adopt_on_rig._trex_mhs(port) == 87.5
    assert adopt_on_rig._trex_mhs(port) is None
    assert adopt_on_rig._trex_mhs(port) is None
    assert adopt_on_rig._trex_mhs(0) is None
    assert asked == ["/summary"] * 3
