"""Issue 38's adoption, the parts that need no rig: which GPU process is adopted (a known miner, or the one the
owner names; never an unknown one by itself, never a container's), and that the command m2p's unit runs is the
captured one exactly (run here by sh: arguments and environment with spaces, quotes and $(...) arrive as they
were, and nothing of the caller's environment leaks in but the time-share agent's cards).

Issue 51: the rig side run for real against real processes on this machine (a python "miner", the stand-in miner
with its watchdog, a tmux server, a process running as nobody), with only what needs a rig answered by the test:
systemctl (``_systemctl``) and nvidia-smi (``_gpu_pids``), and m2p's files in a tmp folder.  Every failure after
the stop starts the original again, and the answer says it runs only when it was seen running.  These tests run
as root (as the rig side does, and as scripts/test does).  On a sandbox rig: tests/integration/test_agent.py."""

from __future__ import annotations

import configparser
import contextlib
import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

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
    for name in adopt_on_rig.CARDS_VARIABLES:  # the agent's cards, when set, do reach it (the next test)
        monkeypatch.delenv(name, raising=False)
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


PROBE = "import json, os, sys; print(json.dumps([os.getuid(), sys.argv[1:], dict(os.environ)]))"


def _probe_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k != "LC_CTYPE"}  # python's own, in the C locale


def test_the_agents_cards_reach_an_adopted_miner_and_nothing_else_of_the_units_environment(tmp_path):
    """The unit's EnvironmentFile (the time-share agent's choice of cards) sets CUDA_VISIBLE_DEVICES and
    CUDA_DEVICE_ORDER for the run script: they reach the miner over what was captured, and nothing else of the
    script's environment does.  Unset, the captured choice stays and nothing is added."""
    captured = {"exe": sys.executable, "argv": ["python3", "-c", PROBE], "cwd": str(tmp_path), "user": "root",
                "env": {"WALLET": "0xw", "CUDA_VISIBLE_DEVICES": "0"}}
    line = adopt_on_rig._command(captured)

    def run(**env: str) -> dict[str, str]:
        done = subprocess.run(["sh", "-c", line], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True,
                              text=True, check=True)
        return _probe_env(json.loads(done.stdout)[2])

    assert run(CUDA_VISIBLE_DEVICES="GPU-2b, 1", CUDA_DEVICE_ORDER="PCI_BUS_ID", CALLERS_SECRET="no") == {
        "WALLET": "0xw", "CUDA_VISIBLE_DEVICES": "GPU-2b, 1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert run(CUDA_VISIBLE_DEVICES="") == {"WALLET": "0xw", "CUDA_VISIBLE_DEVICES": ""}  # set empty: no card
    assert run(CALLERS_SECRET="no") == {"WALLET": "0xw", "CUDA_VISIBLE_DEVICES": "0"}


def test_the_unit_starts_the_miner_again_however_it_ended():
    """A miner that exits 0 (one that gives up on its pool) is started again as a crashed one is; the agent's own
    systemctl stop is never undone by Restart=always."""
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.read_string(adopt_on_rig.UNIT_TEXT.format(run=adopt_on_rig.RUN, cards_env=adopt_on_rig.CARDS_ENV))
    assert unit["Service"]["Restart"] == "always"


def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("needs root: the rig side runs as root and drops to the miner's user with runuser "
                    "(run the unit tests as root, as scripts/test does)")


def test_another_users_miner_gets_its_environment_only_after_root_is_dropped():
    """Run for real as root for user nobody: runuser drops root from an empty environment, and only then does env
    apply the captured environment (and the agent's cards); the program runs as nobody with exactly that."""
    _as_root()
    captured = {"exe": "/usr/bin/python3", "argv": ["/usr/bin/python3", "-c", PROBE, "a b"], "cwd": "/",
                "user": "nobody", "env": {"WALLET": "0x 'w'", "PATH": "/usr/bin:/bin"}}
    line = adopt_on_rig._command(captured)
    words = shlex.split(line)
    runuser, applied = words.index(shutil.which("runuser") or "/usr/sbin/runuser"), words.index("WALLET=0x 'w'")
    assert words[runuser - 2:runuser] == ["/usr/bin/env", "-i"] and runuser < applied
    assert words[runuser + 1:applied] == ["-u", "nobody", "--", "/usr/bin/env", "-i", "PATH=/usr/bin:/bin"]
    done = subprocess.run(["sh", "-c", line], env={"PATH": "/usr/bin:/bin", "CALLERS_SECRET": "no",
                                                   "CUDA_VISIBLE_DEVICES": "1"}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    uid, argv, env = json.loads(done.stdout)
    assert (uid, argv) == (65534, ["a b"])
    assert _probe_env(env) == {**captured["env"], "CUDA_VISIBLE_DEVICES": "1"}


@pytest.mark.parametrize("name", ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH", "BASH_ENV", "ENV",
                                  "BASH_FUNC_ls%%", "IFS", "PYTHONPATH", "PYTHONSTARTUP", "PERL5OPT", "NODE_OPTIONS"])
def test_a_non_root_miners_code_loading_variable_is_refused_by_its_name(name):
    """Second lock, after the order above: m2p never carries into a command root starts for another user a
    variable that loads code, and says which (never its value); a root miner's are its own and kept."""
    captured = {"exe": "/usr/bin/python3", "argv": ["/usr/bin/python3", "-c", PROBE], "cwd": "/", "comm": "t-rex",
                "user": "nobody", "env": {"WALLET": "0xw", name: "/home/u/secret-hook-value"}}
    with pytest.raises(PermissionError) as refused:
        adopt_on_rig._command(captured)
    assert f"t-rex (user nobody) sets {name}," in str(refused.value)
    assert "secret-hook-value" not in str(refused.value) and "0xw" not in str(refused.value)
    assert shlex.quote(f"{name}=/home/u/secret-hook-value") in adopt_on_rig._command({**captured, "user": "root"})


# --- the rig side against real processes ---------------------------------------------------------------------

MINER = """import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a miner frees its cards and exits on TERM
open(__file__ + ".ready", "w").close()  # mining: a test adopts it only from now on
while True:
    time.sleep(0.1)
"""


class Rig:
    """adopt_on_rig's files in a tmp folder; systemctl (``enable`` fails unless a test says) and nvidia-smi
    answered here: ``gpus`` answers the look before the stop, then ``after`` every later call (a list, or an
    exception raised).  Every process with the folder in its command line is ended after the test."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.enable = folder, 1
        self.calls: list[tuple[str, ...]] = []
        self.gpus: list[int] | Callable[[], list[int]] = []
        self.after: list[int] | BaseException | Callable[[], list[int]] = []
        self.asked = 0

    def systemctl(self, *args: str) -> int:
        self.calls.append(args)
        return self.enable if args[0] == "enable" else 0

    def gpu_pids(self) -> list[int]:
        self.asked += 1
        if self.asked == 1:
            return self.gpus() if callable(self.gpus) else self.gpus
        if isinstance(self.after, BaseException):
            raise self.after
        return self.after() if callable(self.after) else self.after

    def miner(self) -> tuple[subprocess.Popen[str], int]:
        """A miner started by hand: its script in its own folder, from a shell someone typed into (``sh -c``,
        so no wrapper); the shell and the miner's PID, once it mines."""
        work = self.folder / "work"
        work.mkdir(exist_ok=True)
        (work / "miner.py").write_text(MINER)
        ready = work / "miner.py.ready"
        ready.unlink(missing_ok=True)
        shell = subprocess.Popen(["sh", "-c", f"{sys.executable} {work / 'miner.py'}; exit $?"], cwd=work,
                                 env={"PATH": os.environ["PATH"], "MINER_WALLET": "w-0xSECRET"}, text=True)
        _appears(ready)
        return shell, _child(shell.pid)

    def running(self, program: Path) -> list[int]:
        """The live processes that run ``program`` (an argument of theirs exactly)."""
        return [p for p in _pids() if str(program) in adopt_on_rig._argv(p)
                and adopt_on_rig._status(p, "State") not in ("Z", "")]

    def left(self) -> list[str]:
        """What is in the folder besides the miners' own and the empty systemd folder the test made."""
        return sorted(str(p.relative_to(self.folder)) for p in self.folder.rglob("*") if p.parts[
            len(self.folder.parts)] not in ("work", "t-rex", "tmux.sock") and p != self.folder / "systemd")


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _child(pid: int, within_s: float = 10.0) -> int:
    """The one live child of ``pid`` (waited for)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = [c for c in adopt_on_rig._children(pid) if adopt_on_rig._status(c, "State") != "Z"]
        if len(found) == 1:
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"process {pid} has no single child after {within_s} s")


def _appears(path: Path, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path} after {within_s} s"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    return adopt_on_rig._status(pid, "State") not in ("Z", "")


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    _as_root()
    home = tmp_path / "etc-m2p" / "miner"
    here = Rig(tmp_path)
    for name, value in {"HOME": home, "RECORD": home / "adopted.json", "RUN": home / "run",
                        "UNIT": tmp_path / "systemd" / adopt_on_rig.UNIT_NAME,
                        "CARDS_ENV": tmp_path / "run-m2p" / "miner-cards.env", "RESPAWN_WAIT_S": 0.1,
                        "STOP_GRACE_S": 5.0, "_systemctl": here.systemctl, "_gpu_pids": here.gpu_pids}.items():
        monkeypatch.setattr(adopt_on_rig, name, value)
    (tmp_path / "systemd").mkdir()
    yield here
    for pid in _pids():  # the test's miners, those m2p started again among them
        if f"{tmp_path}/" in " ".join(adopt_on_rig._argv(pid)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


REAL_GPU_PIDS = adopt_on_rig._gpu_pids  # the fixture answers for nvidia-smi; one test asks the real one
ADOPT = {"settle_s": 1.0}  # the original, started again, is seen running once it runs for that long
STARTS_IN_UNIT = ("enable", "--now", adopt_on_rig.UNIT_NAME)


def test_a_stop_ends_only_the_process_its_pid_named_when_it_was_seen(rig):
    """A PID can name another process between the look and the act: with the start time seen then, m2p signals
    nothing that started at another time."""
    _, pid = rig.miner()
    start = adopt_on_rig._started(pid)
    assert start > 0 and start == int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    adopt_on_rig._end([{"pid": pid, "start": start + 1}], grace_s=0.5)
    assert _alive(pid)
    adopt_on_rig._end([{"pid": pid, "start": start}], grace_s=5.0)
    assert not _alive(pid)


def test_a_miner_whose_pid_names_another_process_now_is_not_stopped(rig, monkeypatch):
    shell, pid = rig.miner()
    seen = adopt_on_rig.capture

    def seen_earlier(named: int) -> dict:  # the PID named an earlier process when m2p looked
        return {**seen(named), "start": adopt_on_rig._started(named) - 1}

    monkeypatch.setattr(adopt_on_rig, "capture", seen_earlier)
    answer = adopt_on_rig.adopt(pid, **ADOPT)
    assert answer["result"] == "failed" and answer["message"] == (
        f"not adopted (process {pid} ({adopt_on_rig._comm(pid)}) is no longer the one m2p looked at: it ended, or its "
        "PID names another process now); nothing was stopped")
    assert _alive(pid) and shell.poll() is None and rig.left() == [] and STARTS_IN_UNIT not in rig.calls


def test_a_failure_before_the_stop_stops_nothing_and_leaves_no_file(rig, monkeypatch):
    """The unit cannot be written (its folder is a file): m2p's files go, and the miner was never touched."""
    _, pid = rig.miner()
    (rig.folder / "blocker").write_text("")
    monkeypatch.setattr(adopt_on_rig, "UNIT", rig.folder / "blocker" / adopt_on_rig.UNIT_NAME)
    answer = adopt_on_rig.adopt(pid, **ADOPT)
    assert answer["message"] == f"not adopted (File exists: {rig.folder / 'blocker'}); nothing was stopped"
    assert _alive(pid) and rig.left() == ["blocker"] and STARTS_IN_UNIT not in rig.calls


@pytest.mark.parametrize(("error", "said"), [
    (FileNotFoundError(errno.ENOENT, "No such file or directory", "nvidia-smi"),
     "No such file or directory: nvidia-smi"),
    (subprocess.TimeoutExpired(["/usr/bin/nvidia-smi", "--query-compute-apps=pid"], 20), "nvidia-smi did not answer in 20 s"),
    (adopt_on_rig.Failed("nvidia-smi failed (exit 9)"), "nvidia-smi failed (exit 9)"),
    (RuntimeError("w-0xSECRET in a message"), "unexpected RuntimeError"),  # its text is never shown
])
def test_any_failure_after_the_stop_removes_the_unit_and_starts_the_original_again(rig, error, said):
    shell, pid = rig.miner()
    program = rig.folder / "work" / "miner.py"
    rig.after = error
    answer = adopt_on_rig.adopt(pid, **ADOPT)
    assert answer == {"program": adopt_on_rig.Path(os.readlink(f"/proc/{rig.running(program)[0]}/exe")).name,
                      "supervisor": "by hand", "result": "failed",
                      "message": f"not adopted ({said}); it runs as it did before"}
    again, = rig.running(program)
    assert again != pid and not _alive(pid) and shell.wait(timeout=5) == 0
    assert rig.left() == [] and ("disable", "--now", adopt_on_rig.UNIT_NAME) in rig.calls
    assert Path(f"/proc/{again}/cwd").resolve() == rig.folder / "work"
    assert b"MINER_WALLET=w-0xSECRET" in Path(f"/proc/{again}/environ").read_bytes().split(b"\0")


def test_nvidia_smi_missing_failing_or_hanging_is_a_failure_never_no_process(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(adopt_on_rig.Failed, match="nvidia-smi is not installed"):
        adopt_on_rig._gpu_pids()
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexit 9\n")
    fake.chmod(0o755)
    with pytest.raises(adopt_on_rig.Failed, match=r"^nvidia-smi failed \(exit 9\)$"):
        adopt_on_rig._gpu_pids()
    fake.write_text("#!/bin/sh\nexec /bin/sleep 30\n")
    monkeypatch.setattr(adopt_on_rig, "NVIDIA_SMI_TIMEOUT_S", 1.0)
    began = time.monotonic()
    with pytest.raises(adopt_on_rig.Failed, match=r"^nvidia-smi did not answer in 1 s$"):
        adopt_on_rig._gpu_pids()
    assert time.monotonic() - began < 5
    fake.write_text("#!/bin/sh\nprintf '4242\\n77\\n'\n")
    assert adopt_on_rig._gpu_pids() == [4242, 77]


def test_without_nvidia_smi_nothing_is_stopped(rig, monkeypatch, tmp_path):
    _, pid = rig.miner()
    monkeypatch.setattr(adopt_on_rig, "_gpu_pids", REAL_GPU_PIDS)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    answer = adopt_on_rig.adopt(pid, **ADOPT)
    assert answer == {"result": "refused", "message": "nvidia-smi is not installed: m2p cannot see which processes "
                                                      "hold a GPU; nothing was stopped"}
    assert _alive(pid) and rig.left() == []


def test_another_gpu_process_after_the_stop_is_named_and_the_original_runs_again(rig):
    """Something that did not hold a GPU before holds one after the stop: not adopted, said with what it is,
    and the original started again (it used to be left stopped while the answer said it ran)."""
    _, pid = rig.miner()
    program = rig.folder / "work" / "miner.py"
    other = subprocess.Popen(["sleep", "60"])
    try:
        rig.after = [other.pid]
        answer = adopt_on_rig.adopt(pid, **ADOPT)
    finally:
        other.kill()
        other.wait()
    assert answer["message"] == (f"not adopted (after the stop pid {other.pid} (sleep) held a GPU, which it did not "
                                 "before); it runs as it did before")
    assert not _alive(pid) and len(rig.running(program)) == 1 and STARTS_IN_UNIT not in rig.calls


def test_the_miners_own_program_back_after_the_stop_is_not_started_a_second_time(rig):
    """What came back runs the miner's own program: something m2p did not see started it again; starting the
    original too would run it twice, so m2p says what it saw and does not say it runs as before."""
    _, pid = rig.miner()
    program = rig.folder / "work" / "miner.py"
    respawned: list[int] = []

    def an_unseen_supervisor() -> list[int]:
        if not respawned:
            respawned.append(rig.miner()[1])
        return respawned

    rig.after = an_unseen_supervisor
    answer = adopt_on_rig.adopt(pid, **ADOPT)
    assert answer["message"] == (f"not adopted (after the stop pid {respawned[0]} ({adopt_on_rig._comm(respawned[0])}) "
                                 "held a GPU: something m2p did not see started it again, so m2p did not start it a "
                                 "second time)")
    assert rig.running(program) == respawned and rig.left() == []


def test_an_original_that_does_not_start_again_is_said_so(rig, monkeypatch):
    """Its folder went while it was stopped: started again, it ends at once; the answer says that, never that it
    runs as before."""
    _, pid = rig.miner()

    def enable_fails_and_the_folder_goes(*args: str) -> int:
        if args[0] == "enable":
            shutil.rmtree(rig.folder / "work")
        return Rig.systemctl(rig, *args)

    monkeypatch.setattr(adopt_on_rig, "_systemctl", enable_fails_and_the_folder_goes)
    answer = adopt_on_rig.adopt(pid, **ADOPT)
    assert answer["message"] == (
        f"not adopted (systemctl enable --now {adopt_on_rig.UNIT_NAME} failed (exit 1)); it was started again, but "
        "its command ended (exit 2) and no process of it held a GPU within 1 s: start it as before by hand")
    assert not _alive(pid) and rig.running(rig.folder / "work" / "miner.py") == []


def test_in_tmux_only_the_miners_pane_ends_never_the_server(rig):
    """The miner is its tmux pane's process: that pane ends with it, the server and the owner's other window
    stay, and the original runs again detached (m2p starts no tmux of its own)."""
    socket, program = rig.folder / "tmux.sock", rig.folder / "work" / "miner.py"
    program.parent.mkdir()
    program.write_text(MINER)
    tmux = ["tmux", "-S", str(socket), "-f", "/dev/null"]
    env = {"PATH": os.environ["PATH"], "TERM": "xterm", "MINER_WALLET": "w-0xSECRET"}
    subprocess.run([*tmux, "new-session", "-d", "-s", "owner", "-c", str(program.parent),
                    f"exec {sys.executable} {program}"], env=env, check=True)
    try:
        subprocess.run([*tmux, "new-window", "-d", "-t", "owner", "exec sleep 300"], env=env, check=True)
        _appears(program.with_name("miner.py.ready"))
        panes = subprocess.run([*tmux, "list-panes", "-s", "-t", "owner", "-F", "#{pane_pid}"], env=env,
                               capture_output=True, text=True, check=True).stdout.split()
        pid, other = (int(p) for p in panes)
        server = adopt_on_rig._ppid(pid)
        assert adopt_on_rig._comm(server) == "tmux: server"
        found = adopt_on_rig.capture(pid)
        assert (found["top"]["pid"], found["supervisor"]) == (pid, "tmux")
        assert "TMUX" not in found["env"] and "TMUX_PANE" not in found["env"] and found["env"]["MINER_WALLET"]
        answer = adopt_on_rig.adopt(pid, **ADOPT)
        assert answer["message"] == (f"not adopted (systemctl enable --now {adopt_on_rig.UNIT_NAME} failed (exit 1)); "
                                     "it runs as it did before, detached (its tmux pane closed when it stopped)")
        assert _alive(server) and _alive(other) and not _alive(pid)
        again, = rig.running(program)
        assert adopt_on_rig._ppid(again) != server
        assert subprocess.run([*tmux, "has-session", "-t", "owner"], env=env).returncode == 0
    finally:
        subprocess.run([*tmux, "kill-server"], env=env)


STANDIN = Path(__file__).resolve().parents[2] / "sandbox/m2p_sandbox/gpu_standin/standin-cuda"


def test_a_watchdogs_worker_is_adopted_as_its_watchdog_and_both_end(rig):
    """T-Rex's way, with the stand-in miner's watchdog mode: the GPU process is the worker, whose parent runs the
    same program; the watchdog is what m2p captures (the owner's command line) and stops, the worker ends with
    it, and the watchdog is what starts again."""
    program = rig.folder / "t-rex" / "standin-cuda"  # the owner's copy, in the owner's folder
    program.parent.mkdir()
    shutil.copy(STANDIN, program)
    conf = rig.folder / "t-rex" / "miner.json"
    conf.write_text(json.dumps({"watchdog_parent": True, "respawn_s": 0.2, "exit_s": 0.3, "resident_mb": 1}))
    shell = subprocess.Popen(["sh", "-c", f"{sys.executable} {program} --name t-rex --every 60; exit $?"],
                             cwd=program.parent, stdout=subprocess.DEVNULL,
                             env={"PATH": os.environ["PATH"], "M2P_STANDIN_MINER_CONFIG": str(conf),
                                  "M2P_STANDIN_GPU_LOG": str(rig.folder / "t-rex" / "gpu.log")})
    watchdog = _child(shell.pid)
    worker = _child(watchdog)
    _appears(rig.folder / "t-rex" / "gpu.log")  # the worker attached to the cards: mining
    found = adopt_on_rig.capture(worker)
    assert (found["pid"], found["top"]["pid"], found["supervisor"]) == (watchdog, watchdog, "by hand")
    assert found["argv"] == [sys.executable, str(program), "--name", "t-rex", "--every", "60"]
    assert found["workers"] == [{"pid": worker, "start": adopt_on_rig._started(worker)}]
    assert "M2P_STANDIN_WATCHDOG_WORKER" not in found["env"]

    answer = adopt_on_rig.adopt(worker, **ADOPT)
    assert answer["message"] == (f"not adopted (systemctl enable --now {adopt_on_rig.UNIT_NAME} failed (exit 1)); "
                                 "it runs as it did before")
    assert not _alive(watchdog) and not _alive(worker) and shell.wait(timeout=5) == 0
    again = rig.running(program)
    assert len(again) == 2 and {adopt_on_rig._ppid(p) for p in again} & set(again)  # a watchdog and its worker


def test_a_non_root_miner_with_a_code_loading_variable_is_refused_and_left_running(rig):
    """Run as nobody with LD_PRELOAD (empty: nothing preloaded) in its environment: refused by name before anything
    is stopped."""
    code = "import time  # " + str(rig.folder) + "/ (the fixture ends it)\nwhile True: time.sleep(0.1)"
    shell = subprocess.Popen(["sh", "-c", "runuser -u nobody -- /usr/bin/env LD_PRELOAD= WALLET=0xw /usr/bin/python3 "
                                          f"-c {shlex.quote(code)}; exit $?"], cwd="/")
    runuser = _child(shell.pid)
    pid = _child(runuser)
    try:
        assert adopt_on_rig._status(pid, "Uid") == "65534"
        answer = adopt_on_rig.adopt(pid, **ADOPT)
        assert answer == {"result": "refused", "message": "the environment of python3 (user nobody) sets LD_PRELOAD, "
                          "which m2p does not carry into a command root starts for another user: start it without "
                          "and adopt it again; nothing was stopped"}
        assert _alive(pid) and rig.left() == []
    finally:
        for leftover in (pid, runuser):
            with contextlib.suppress(ProcessLookupError):
                os.kill(leftover, signal.SIGKILL)  # the miner and its runuser: not the shell's to end
        shell.kill()


def test_release_starts_the_original_again_and_says_it_runs_once_it_holds_a_gpu(rig):
    """The record an adoption left (the miner stopped since, as in m2p's unit): release removes m2p's files and
    starts the original; it is said to run as soon as a process of its program holds a GPU it did not before."""
    shell, pid = rig.miner()
    program = rig.folder / "work" / "miner.py"
    adopt_on_rig._write(adopt_on_rig.RECORD, json.dumps(adopt_on_rig.capture(pid)), 0o600)
    adopt_on_rig._end([{"pid": pid, "start": adopt_on_rig._started(pid)}], grace_s=5.0)
    rig.gpus = rig.after = lambda: rig.running(program)
    began = time.monotonic()
    answer = adopt_on_rig.release(settle_s=30.0)
    assert answer["message"] == "released: started again as it was started; it runs as it did before"
    assert time.monotonic() - began < 10 and len(rig.running(program)) == 1 and rig.left() == []


def test_a_signal_to_adopt_mid_way_rolls_back_and_the_miner_runs_as_before(rig):
    """Adopt's own SSH session cut (SIGHUP) or a kill (SIGTERM) once the miner is stopped: the rollback runs as for
    any failure, and the original runs again."""
    shell, pid = rig.miner()
    program = rig.folder / "work" / "miner.py"

    def killed_mid_way() -> list[int]:
        os.kill(os.getpid(), signal.SIGTERM)
        return []
    rig.after = killed_mid_way
    before = signal.getsignal(signal.SIGTERM)
    with adopt_on_rig.interruptible():
        answer = adopt_on_rig.adopt(pid, **ADOPT)
    assert signal.getsignal(signal.SIGTERM) is before  # as it was once adopt is done
    assert answer["message"] == "not adopted (adopt was sent SIGTERM mid-way); it runs as it did before", answer
    again, = rig.running(program)
    assert again != pid and not _alive(pid) and rig.left() == []
