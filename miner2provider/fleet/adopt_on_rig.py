"""``m2p miner adopt`` / ``release`` on the rig (issue 38), run as root by the rig's own python3 (3.8+).

Adopting a miner m2p has no adapter for (a hand-run miner, a miner under the owner's respawn wrapper, in a
screen or tmux): capture exactly how it runs (argv, program and its SHA-256, working folder, user, a filtered
environment, and the top process that keeps it running), stop that top process and the miner, and start the
same command in m2p's own unit (``m2p-miner.service``), which the time-share agent can stop and start
(``m2p_miner_unit: m2p-miner.service``).  ``release`` gives the miner back the same way.

Rolled back: when the miner does not come back in the unit holding a GPU, comes back slower, something else
holds a GPU after the stop, or anything at all fails once something was stopped (a file m2p cannot write,
nvidia-smi missing or not answering, any error), the unit and m2p's files go and the original top process is
started again as it was.  The answer says "it runs as it did before" only when m2p saw it again (a process of
its program holding a GPU, or the command started still running after the wait), else what it saw.  When
what came back after the stop is the miner's own program, something m2p did not see restarted it: m2p does
not start a second one.  A failure before the stop stops nothing and says so.

The top process:
- a wrapper: the outermost shell or interpreter running a script file that keeps the miner (``keep-mining.sh``);
- screen: the SCREEN session's server (one per session), started again by its own command (``screen -dmS``);
- tmux: the pane's process (the miner, or its wrapper, whose parent is the tmux server), never the server, which
  holds the owner's other sessions and windows.  The pane closes when it ends (tmux's default), and the
  original is started again detached, outside tmux: m2p starts no tmux server or session of its own;
- by hand: the miner itself (an interactive shell, a login or sudo that started it are left alone).
A watchdog: T-Rex runs twice by default (its ``--no-watchdog`` turns it off), GMiner and BzMiner too: a
watchdog process starts the miner proper (the worker, the same program) and starts it again when it exits.
When the miner's parent runs the same program (the same executable, and for an interpreter the same script),
that parent is the miner m2p captures (its arguments are the owner's command line) and stops; its workers end
with it (and are ended after it, should one outlive it).
Every process is recorded with its start time (field 22 of /proc/PID/stat) and signalled only while its PID
still names that process: a PID can be reused between the look and the act.  When the top process or the
miner is no longer the one captured, nothing is stopped.

The unit's command runs the miner in a clean environment: the captured one, plus the cards the time-share
agent chose (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, which the unit's EnvironmentFile gives it) and nothing
else of the unit's.  For a miner running as another user than root, ``runuser`` drops root first, itself from
an empty environment, and only then is the captured environment applied, so none of it reaches a process
running as root; and a captured environment that sets a variable which loads code (LD_PRELOAD and the rest
of _RUNS_CODE) is refused for such a miner, named and never shown (see _refuse_code_loading).

Slower: where the miner has a stats API m2p knows (T-Rex's ``/summary`` on the rig's loopback, its default port
4067 or ``m2p_trex_api_port``; github.com/trexminer/T-Rex/wiki/API), its total hashrate is read before the stop,
and the miner in the unit must reach 90 % of it within the window (a real miner builds its DAG first: tens of
seconds).  Without an API the answer says the hashrate was not compared.

What is captured holds wallets and pool passwords (a miner's command line and environment): it is written to a
root-only file on the rig and to a root-only script, and never printed.  The answer (JSON on stdout) names the
program, the supervisor and the outcome only; errors are told by their reason, never by a text that might
quote a command line.  A miner kept by a systemd unit or cron is refused: something else restarts it, and m2p
would fight it (name the unit in m2p_miner_unit instead).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HOME = Path(os.environ.get("M2P_ADOPT_DIR", "/etc/m2p/miner"))
RECORD = HOME / "adopted.json"  # root only: argv and environment hold wallets and pool passwords
RUN = HOME / "run"  # the unit's command: the captured one, root only
UNIT_NAME = "m2p-miner.service"
AS_FAST = 0.9  # the share of its hashrate before that the miner in the unit must reach (a reading's noise below)
UNIT = Path("/etc/systemd/system") / UNIT_NAME
# The cards the time-share agent starts the miner on beside a lease (per-card hand-over: CUDA_VISIBLE_DEVICES),
# written by the agent before it starts the unit and removed for a start on every card; in /run, so a reboot
# starts the miner on every card.  The role's mining_os record names the same file (tested).
CARDS_ENV = Path("/run/m2p/miner-cards.env")
# What of the unit's environment reaches the miner (from CARDS_ENV), over what was captured; nothing else does.
CARDS_VARIABLES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
PROC = Path("/proc")
SUPERVISING_SHELLS = {"sh", "bash", "dash", "zsh", "python", "python3", "perl"}
SCREENS = {"screen", "SCREEN", "tmux: server", "tmux"}
# Programs whose process is named by the script they run: two pythons running different scripts differ.
_INTERPRETERS = {"python", "perl", "ruby", "node", "sh", "bash", "dash", "zsh"}
# A login's environment, not the miner's: left out, so the unit starts the miner with what it needs.
_SESSION_ENV = ("SSH_", "XDG_", "DBUS_", "DISPLAY", "TERM", "SHLVL", "OLDPWD", "PWD", "_", "MAIL", "LS_COLORS",
                "SUDO_", "LOGNAME", "MOTD_SHOWN", "STY", "WINDOW", "TMUX", "TMUX_PANE", "TERM_PROGRAM",
                "TERM_PROGRAM_VERSION")
# Variables that make a program load or run code besides its own: the dynamic loader's (LD_*, and glibc's own
# list of those it drops for setuid programs), shells' start-up files and exported functions, interpreters'
# module paths and start-up hooks.  A name ending in "_" is a prefix.
_RUNS_CODE = ("LD_", "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "MALLOC_TRACE", "HOSTALIASES",
              "RESOLV_HOST_CONF", "BASH_ENV", "ENV", "BASH_FUNC_", "SHELLOPTS", "BASHOPTS", "PS4", "IFS",
              "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PERL5LIB", "PERL5OPT", "PERLLIB", "PERL5DB", "RUBYOPT",
              "RUBYLIB", "NODE_OPTIONS", "NODE_PATH")
STOP_GRACE_S = 30.0  # TERM, then KILL: a real miner takes 5-15 s to free its cards
RESPAWN_WAIT_S = 3.0  # after the stop: a supervisor m2p did not see would bring the miner back by now
NVIDIA_SMI_TIMEOUT_S = 20.0  # a driver in trouble hangs nvidia-smi: no answer is a failure, never "no process"
SYSTEMCTL_TIMEOUT_S = 120.0  # disable --now waits for the unit's stop (TimeoutStopSec=60)
UNIT_TEXT = """[Unit]
Description=The miner m2p adopted (m2p miner adopt; m2p miner release gives it back)
After=network-online.target

[Service]
ExecStart={run}
# The time-share agent's choice of cards beside a lease (CUDA_VISIBLE_DEVICES); none: every card.
EnvironmentFile=-{cards_env}
# The miner is started again whenever it ends, as its wrapper did, an exit 0 included (a miner that gives up on
# its pool exits 0); the time-share agent's systemctl stop is never undone by it.
Restart=always
RestartSec=10
KillMode=control-group
TimeoutStopSec=60

[Install]
WantedBy=multi-user.target
"""


class Failed(Exception):
    """A failure m2p names in its answer, in words that hold no captured value.  ``restart``: whether the
    rollback starts the original again (not when something else already did)."""

    def __init__(self, why: str, restart: bool = True) -> None:
        super().__init__(why)
        self.restart = restart


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _argv(pid: int) -> list[str]:
    return [a for a in _read(PROC / str(pid) / "cmdline").split("\0")][:-1]


def _named(name: str, names: tuple[str, ...]) -> bool:
    return any(name == n or (n.endswith("_") and name.startswith(n)) for n in names)


def _environ(pid: int) -> dict[str, str]:
    out = {}
    for item in _read(PROC / str(pid) / "environ").split("\0"):
        name, sep, value = item.partition("=")
        if sep and name and not _named(name, _SESSION_ENV):
            out[name] = value
    return out


def _status(pid: int, key: str) -> str:
    for line in _read(PROC / str(pid) / "status").splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].split()[0] if line.split(":", 1)[1].split() else ""
    return ""


def _ppid(pid: int) -> int:
    return int(_status(pid, "PPid") or 0)


def _comm(pid: int) -> str:
    return _read(PROC / str(pid) / "comm").strip()


def _unit(pid: int) -> str:
    for line in reversed(_read(PROC / str(pid) / "cgroup").splitlines()):
        last = line.rsplit("/", 1)[-1]
        if last.endswith((".service", ".scope")):
            return last
    return ""


def _started(pid: int) -> int:
    """When ``pid`` started (clock ticks after boot, field 22 of /proc/PID/stat; -1 when unreadable): with the
    PID it names one process, where the PID alone may name a later one."""
    fields = _read(PROC / str(pid) / "stat").rsplit(")", 1)[-1].split()  # the name before ")" may hold spaces
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else -1


def _alive(pid: int, start: int) -> bool:
    """Whether the process captured as ``pid`` started at ``start`` still runs (a zombie has ended)."""
    return start >= 0 and _started(pid) == start and _status(pid, "State") != "Z"


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (every status read: /proc/PID/task/*/children needs a kernel
    option not every kernel has)."""
    return [int(p.name) for p in PROC.iterdir() if p.name.isdigit() and _ppid(int(p.name)) == pid]


def _program(pid: int) -> tuple[str, str]:
    """What ``pid`` runs: its executable and, for an interpreter, its script (its first argument that is not an
    option); an unreadable process is like no other."""
    try:
        exe = os.readlink(PROC / str(pid) / "exe")
    except OSError:
        return "", f"unreadable {pid}"
    if Path(exe).name.rstrip("0123456789.") not in _INTERPRETERS:
        return exe, ""
    return exe, next((a for a in _argv(pid)[1:] if not a.startswith("-")), "")


def _runs_a_script(pid: int, comm: str) -> bool:
    """A shell or an interpreter running a script file (``bash keep-mining.sh``; a shebang script is named after
    itself), not an interactive shell (``-bash``) someone typed the miner into."""
    args = _argv(pid)
    if len(args) < 2 or args[1].startswith("-"):
        return False
    try:
        script = Path(os.readlink(PROC / str(pid) / "cwd")) / args[1]
    except OSError:
        return False
    return script.is_file() and (comm in SUPERVISING_SHELLS or script.name.startswith(comm))


def _is_login_unit(unit: str) -> bool:
    return (unit == "" or unit.startswith("session-") or unit.startswith("user@") or unit in
            {"init.scope", "ssh.service", "sshd.service"})


def _watchdog_of(pid: int) -> tuple[int, list[int]]:
    """The miner to capture for the GPU process ``pid`` and its workers: a parent running the same program is
    a watchdog (T-Rex's, GMiner's, BzMiner's), captured in its worker's place, its workers its children of the
    same program (also when ``pid`` names the watchdog itself)."""
    parent = _ppid(pid)
    if parent > 1 and _program(parent) == _program(pid):
        pid = parent
    return pid, [c for c in _children(pid) if _program(c) == _program(pid)]


def _keeper(pid: int) -> tuple[int, str]:
    """The top process that keeps the miner ``pid`` running, and its kind: up the parents through wrappers
    (shells running a script) to a screen, a tmux pane, a login or PID 1."""
    top, kind, parent = pid, "by hand", _ppid(pid)
    for _ in range(16):
        if parent <= 1:
            break
        comm = _comm(parent)
        if comm in ("cron", "crond", "CRON"):
            raise PermissionError("cron starts it: something else restarts it, and m2p would fight it")
        if comm in SCREENS:
            if "tmux" in comm:  # the pane's process, never the server: it holds the owner's other sessions
                return top, "tmux"
            return parent, "screen"
        if not _runs_a_script(parent, comm):  # a login shell, sshd, sudo: whoever started it by hand
            break
        top, kind = parent, "wrapper"
        parent = _ppid(parent)
    return top, kind


def capture(pid: int) -> dict[str, Any]:
    """How the miner ``pid`` runs (its watchdog's, where it has one), what keeps it running (the nearest
    wrapper, screen or tmux pane, else itself), and each process's start time."""
    if not (PROC / str(pid)).is_dir():
        raise LookupError(f"no process {pid}")
    pid, workers = _watchdog_of(pid)
    with open(PROC / str(pid) / "exe", "rb") as f:  # the program as it runs, even if replaced on disk since
        digest = hashlib.sha256(f.read()).hexdigest()
    exe = os.readlink(PROC / str(pid) / "exe")
    top, kind = _keeper(pid)
    unit = _unit(pid)
    if not _is_login_unit(unit) and unit != UNIT_NAME:
        raise PermissionError(f"the unit {unit} runs it: something else restarts it, and m2p would fight it "
                              f"(name it in m2p_miner_unit instead)")
    return {"pid": pid, "start": _started(pid), **_how(pid), "sha256": digest, "program": Path(exe).name,
            "runs": list(_program(pid)), "workers": [{"pid": w, "start": _started(w)} for w in workers],
            "supervisor": kind, "top": {"pid": top, "start": _started(top), **_how(top)}}


def _how(pid: int) -> dict[str, Any]:
    """How ``pid`` runs: its program (the executable itself, so a PATH or an argv[0] such as SCREEN never
    matters), its arguments, folder, user and filtered environment."""
    return {"exe": os.readlink(PROC / str(pid) / "exe"), "argv": _argv(pid), "comm": _comm(pid),
            "cwd": os.readlink(PROC / str(pid) / "cwd"), "env": _environ(pid),
            "user": pwd.getpwuid(int(_status(pid, "Uid") or 0)).pw_name}


def _refuse_code_loading(what: dict[str, Any]) -> None:
    """PermissionError naming each variable of _RUNS_CODE that a non-root process's captured environment sets
    (never its value).

    _command applies such an environment only after runuser has dropped root, so none of it runs as root; this
    refusal is the second lock, kept on purpose: the line is run by root's shell (in the unit, in a rollback, in
    a release from a record written earlier), and these variables are exactly what turns any slip in that order
    into root for whoever can start a process the owner would adopt.  A root process's environment is root's own
    choice, for itself: it is kept as it was."""
    named = sorted(name for name in what["env"] if _named(name, _RUNS_CODE))
    if named and what["user"] != "root":
        raise PermissionError(f"the environment of {what.get('comm') or 'the miner'} (user {what['user']}) sets "
                              f"{', '.join(named)}, which m2p does not carry into a command root starts for another "
                              "user: start it without and adopt it again")


def _program_argv(what: dict[str, Any]) -> list[str]:
    argv, comm = what["argv"], what.get("comm", "")
    if len(argv) > 1 and comm and comm not in SUPERVISING_SHELLS and Path(argv[1]).name.startswith(comm):
        return [argv[1], *argv[2:]]  # a script run by its shebang: run the script, so it is named as before
    if argv and os.path.isabs(argv[0]) and os.path.realpath(argv[0]) == os.path.realpath(what["exe"]):
        return list(argv)  # as it was: /usr/bin/python3, not the python3.11 it resolves to
    return [what["exe"], *argv[1:]]  # the executable itself: no PATH, no argv[0] such as SCREEN


def _command(what: dict[str, Any]) -> str:
    """One shell line that runs ``what`` (argv, cwd, env, user) exactly, in a clean environment: the captured
    one, and CARDS_VARIABLES where the line's own environment sets them (the unit's, from CARDS_ENV).  For a user
    other than root, runuser (from an empty environment) drops root before the captured one applies."""
    _refuse_code_loading(what)
    as_user = [] if what["user"] == "root" else [
        "/usr/bin/env", "-i", shutil.which("runuser") or "/usr/sbin/runuser", "-u", what["user"], "--"]
    clean = [*as_user, "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in sorted(what["env"].items()))]
    # ${NAME+"NAME=$NAME"}: one word where the shell's environment sets NAME (empty too), none where it does not.
    cards = " ".join(f'${{{n}+"{n}=${n}"}}' for n in CARDS_VARIABLES)
    return (f"cd {shlex.quote(what['cwd'])} && exec {' '.join(shlex.quote(a) for a in clean)} {cards} "
            + " ".join(shlex.quote(a) for a in _program_argv(what)))


def _end(procs: list[dict[str, Any]], grace_s: float) -> None:
    """TERM, then KILL after ``grace_s``; each process only while its PID still names it (its start time).
    (Between that look and the signal the window is a few instructions; a pidfd would close it, from 3.9.)"""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for proc in procs:
            if _alive(proc["pid"], proc["start"]):
                try:
                    os.kill(proc["pid"], sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_alive(p["pid"], p["start"]) for p in procs):
            time.sleep(0.2)


def _still_captured(found: dict[str, Any]) -> None:
    """Failed when the top process or the miner is no longer the process captured: nothing is stopped then."""
    for what in (found["top"], found):
        if not _alive(what["pid"], what["start"]):
            raise Failed(f"process {what['pid']} ({what['comm']}) is no longer the one m2p looked at: it ended, "
                         "or its PID names another process now")


def _stop(found: dict[str, Any]) -> None:
    """The top process and the miner together (a watchdog passes the stop to its workers), then any worker that
    outlived its watchdog; a worker no longer there (its watchdog may have replaced it since) is skipped, and
    the watchdog ends its own."""
    _end([found["top"], found] if found["top"]["pid"] != found["pid"] else [found], STOP_GRACE_S)
    _end(found["workers"], STOP_GRACE_S)


def _gpu_pids() -> list[int]:
    """The processes holding a GPU, by nvidia-smi; Failed when it cannot say (not installed, failing, or not
    answering in NVIDIA_SMI_TIMEOUT_S): no answer is never read as no process."""
    try:
        proc = subprocess.Popen(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except FileNotFoundError:
        raise Failed("nvidia-smi is not installed: m2p cannot see which processes hold a GPU") from None
    try:
        out, _ = proc.communicate(timeout=NVIDIA_SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # not waited for: one stuck in the driver ends only when the driver lets it
        raise Failed(f"nvidia-smi did not answer in {NVIDIA_SMI_TIMEOUT_S:.0f} s") from None
    if proc.returncode != 0:
        raise Failed(f"nvidia-smi failed (exit {proc.returncode})")
    return [int(x) for x in out.split() if x.strip().isdigit()]


def _listed(pids: list[int]) -> str:
    return ", ".join(f"pid {p} ({_comm(p) or 'ended'})" for p in pids)


def _held_in_unit(within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if any(_unit(pid) == UNIT_NAME for pid in _gpu_pids()):
            return True
        time.sleep(0.5)
    return False


def _trex_mhs(port: int) -> float | None:
    """T-Rex's total hashrate (MH/s, the sum of ``gpus[].hashrate`` in H/s) from ``/summary`` on the rig's
    loopback; None when nothing there answers with one (no API, a miner still starting)."""
    if port <= 0:
        return None
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    try:
        with direct.open(f"http://127.0.0.1:{port}/summary", timeout=3) as answer:
            data = json.loads(answer.read(1_000_000).decode())
        rates = [float(g["hashrate"]) for g in data.get("gpus") or []]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return sum(rates) / 1e6 if rates and all(math.isfinite(r) and r >= 0 for r in rates) else None


def _reaches(before: float, port: int, window_s: float) -> float | None:
    """The unit's miner's hashrate once it reaches 90 % of ``before``, else the last one read in ``window_s``."""
    deadline, last = time.monotonic() + window_s, None
    while True:
        last = _trex_mhs(port)
        if (last is not None and last >= AS_FAST * before) or time.monotonic() >= deadline:
            return last
        time.sleep(2.0)


def _systemctl(*args: str) -> int:
    """systemctl's exit status; 127 where there is none, 124 where it did not finish in SYSTEMCTL_TIMEOUT_S."""
    try:
        return subprocess.run(["systemctl", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=SYSTEMCTL_TIMEOUT_S).returncode
    except FileNotFoundError:
        return 127
    except subprocess.TimeoutExpired:
        return 124


def _start_original(top: dict[str, Any]) -> subprocess.Popen[bytes]:
    """The top process again, detached as it was started: its own session, no terminal, and of this process's
    environment only a PATH for sh (the line sets the miner's own)."""
    return subprocess.Popen(["sh", "-c", _command(top)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, cwd="/",
                            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})


def _holders(runs: list[str] | None) -> set[int] | None:
    """The processes of the program ``runs`` (any, when not recorded) holding a GPU outside m2p's unit; None when
    nvidia-smi cannot say (missing, hanging, failing: maybe why this is a rollback, which goes on regardless)."""
    try:
        return {p for p in _gpu_pids() if _unit(p) != UNIT_NAME and (runs is None or list(_program(p)) == runs)}
    except Exception:
        return None


def _seen_again(started: subprocess.Popen[bytes], runs: list[str] | None, already: set[int] | None,
                settle_s: float) -> bool:
    """Whether the original was seen running again within ``settle_s``: a process of its program holding a GPU
    that did not before it was started (``already``; None: nvidia-smi is not asked), or the command started
    still running at the end."""
    deadline = time.monotonic() + settle_s
    while True:
        if already is not None:
            holders = _holders(runs)
            if holders is None:
                already = None  # nvidia-smi failed once: the process alone tells from now on
            elif holders - already:
                return True
        if time.monotonic() >= deadline:
            return started.poll() is None
        time.sleep(0.5)


def _restarted(found: dict[str, Any], settle_s: float) -> str:
    """Start the original (``found``'s top process) again; what was seen of it, in words."""
    already = _holders(found.get("runs"))
    try:
        started = _start_original(found["top"])
    except OSError as exc:  # a refused environment too (an older record's): said, nothing started
        return f"m2p could not start it again ({_why(exc)}): start it as before by hand"
    if _seen_again(started, found.get("runs"), already, settle_s):
        return "it runs as it did before" + (", detached (its tmux pane closed when it stopped)"
                                             if found["supervisor"] == "tmux" else "")
    return (f"it was started again, but its command ended (exit {started.returncode}) and no process of it held a "
            f"GPU within {settle_s:.0f} s: start it as before by hand")


def _why(exc: BaseException) -> str:
    """An error in words that hold no captured value: m2p's own as they are, a system error's reason and file, a
    command's name and time-out, anything else its kind only (its text might quote a command line)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror + (f": {exc.filename}" if exc.filename else "")
    if isinstance(exc, (Failed, LookupError, OSError)):
        return str(exc)
    if isinstance(exc, subprocess.TimeoutExpired):
        name = Path(str(exc.cmd[0] if isinstance(exc.cmd, (list, tuple)) else "a command")).name
        return f"{name} did not answer in {exc.timeout:.0f} s"
    return f"unexpected {type(exc).__name__}"


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".new")
    fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(str(tmp), mode)
    os.replace(str(tmp), str(path))


def _install(found: dict[str, Any], run: str) -> None:
    """The record, the unit's command (both root only: they hold the captured values) and the unit."""
    _write(RECORD, json.dumps(found, indent=2, sort_keys=True), 0o600)
    _write(RUN, "#!/bin/sh\n# The miner m2p adopted, as it ran (root only: it holds wallets and passwords).\n"
                + run + "\n", 0o700)
    _write(UNIT, UNIT_TEXT.format(run=RUN, cards_env=CARDS_ENV), 0o644)
    code = _systemctl("daemon-reload")
    if code != 0:
        raise Failed(f"systemctl daemon-reload failed (exit {code})")


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except (FileNotFoundError, NotADirectoryError):  # absent (a file where a folder of its path would be: too)
        pass


def _remove_unit() -> None:
    _systemctl("disable", "--now", UNIT_NAME)
    for path in (UNIT, RUN, CARDS_ENV):
        _remove(path)
    try:
        CARDS_ENV.parent.rmdir()  # only when empty
    except OSError:
        pass
    _systemctl("daemon-reload")


def _forget_home() -> None:
    for folder in (HOME, HOME.parent):  # only when empty: m2p's folders (/etc/m2p too, once nothing of m2p is left)
        try:
            folder.rmdir()
        except OSError:
            return


def _undo(why: str) -> str:
    """Remove m2p's unit and files, whatever was written of them; ``why``, and what could not be removed."""
    left = []
    for step in (_remove_unit, lambda: _remove(RECORD), _forget_home):  # each tried, whatever the one before did
        try:
            step()
        except OSError as exc:
            left.append(_why(exc))
    return f"{why}; m2p's unit and files are not all removed ({'; '.join(left)})" if left else why


def _nothing_came_back(found: dict[str, Any], others: set[int]) -> None:
    """Failed when a process that did not hold a GPU before the stop holds one now, outside m2p's unit; one of
    the miner's own program means something m2p did not see started it again: no second one is started."""
    back = [p for p in _gpu_pids() if p not in others and _unit(p) != UNIT_NAME and p != os.getpid()]
    again = [p for p in back if list(_program(p)) == found["runs"]]
    if again:
        raise Failed(f"after the stop {_listed(again)} held a GPU: something m2p did not see started it again, so "
                     "m2p did not start it a second time", restart=False)
    if back:
        raise Failed(f"after the stop {_listed(back)} held a GPU, which it did not before")


def _in_unit(found: dict[str, Any], others: set[int], before: float | None, api_port: int, window_s: float,
             settle_s: float) -> dict[str, str]:
    """After the stop: nothing else holds a GPU anew, the unit starts the miner, it holds a GPU there, and where
    its hashrate can be read it is as fast as before.  The answer, else Failed saying why."""
    time.sleep(RESPAWN_WAIT_S)
    _nothing_came_back(found, others)
    code = _systemctl("enable", "--now", UNIT_NAME)
    if code != 0:
        raise Failed(f"systemctl enable --now {UNIT_NAME} failed (exit {code})")
    if not _held_in_unit(settle_s):
        raise Failed(f"it did not hold a GPU in {UNIT_NAME} within {settle_s:.0f} s")
    adopted = f"adopted: it runs in {UNIT_NAME} as it ran before"
    if before is None:
        return {"result": "changed", "message": adopted + (
            "; hashrate not compared (no stats API answered: T-Rex's, at m2p_trex_api_port)")}
    after = _reaches(before, api_port, window_s)
    if after is None or after < AS_FAST * before:
        reached = "no hashrate" if after is None else f"{after:.1f} MH/s"
        raise Failed(f"in {UNIT_NAME} it reached {reached} in {window_s:.0f} s, against {before:.1f} MH/s before")
    return {"result": "changed", "message": f"{adopted}, at {after:.1f} MH/s ({before:.1f} before)"}


def adopt(pid: int, api_port: int = 0, window_s: float = 120.0, settle_s: float = 20.0) -> dict[str, Any]:
    if RECORD.exists():
        return {"result": "converged", "message": f"a miner is adopted already ({UNIT_NAME})"}
    try:
        found = capture(pid)
        run = _command(found)
        _command(found["top"])  # a rollback's command: any refusal now, not once the miner is stopped
        mine = {found["pid"], found["top"]["pid"], *(w["pid"] for w in found["workers"])}
        others = set(_gpu_pids()) - mine  # nvidia-smi must answer before anything is stopped
    except (LookupError, PermissionError, OSError, Failed) as exc:
        return {"result": "refused", "message": f"{_why(exc)}; nothing was stopped"}
    said = {"program": found["program"], "supervisor": found["supervisor"]}
    before = _trex_mhs(api_port)
    try:
        _install(found, run)
        _still_captured(found)
    except Exception as exc:  # whatever it was, nothing is stopped yet: m2p's files go
        return {**said, "result": "failed", "message": f"not adopted ({_undo(_why(exc))}); nothing was stopped"}
    try:
        _stop(found)
        return {**said, **_in_unit(found, others, before, api_port, window_s, settle_s)}
    except Failed as exc:
        why, restart = str(exc), exc.restart
    except Exception as exc:  # anything at all once something was stopped: the original must run again
        why, restart = _why(exc), True
    why = _undo(why)
    message = f"not adopted ({why}); {_restarted(found, settle_s)}" if restart else f"not adopted ({why})"
    return {**said, "result": "failed", "message": message}


_AGAIN = {"wrapper": "its wrapper started again", "screen": "its screen started again",
          "tmux": "started again", "by hand": "started again as it was started"}


def release(settle_s: float = 20.0) -> dict[str, Any]:
    try:
        found = json.loads(RECORD.read_text())
    except FileNotFoundError:
        return {"result": "converged", "message": "no miner is adopted here"}
    _remove_unit()
    _remove(RECORD)
    _forget_home()
    return {"program": found["program"], "supervisor": found["supervisor"], "result": "changed",
            "message": f"released: {_AGAIN.get(found['supervisor'], 'started again')}; {_restarted(found, settle_s)}"}


class Interrupted(Failed):
    """A signal to adopt itself mid-way (its SSH session cut: SIGHUP; a kill: SIGTERM; Ctrl-C): handled as any
    failure, so that the miner runs again as it did.  SIGKILL cannot be: the miner may then be left stopped."""


CAUGHT = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def _interrupt(signum: int, frame: Any) -> None:
    for sig in CAUGHT:  # the rollback itself is not interrupted
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(f"adopt was sent {signal.Signals(signum).name} mid-way")


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While adopting: a signal raises Interrupted where adopt is, and its rollback runs; as before afterwards."""
    before = {sig: signal.signal(sig, _interrupt) for sig in CAUGHT}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def main(argv: list[str]) -> int:
    if os.geteuid() != 0:
        print(json.dumps({"result": "failed", "message": "needs root (sudo)"}))
        return 1
    if argv[:1] == ["adopt"] and len(argv) == 4:
        with interruptible():
            answer = adopt(int(argv[1]), api_port=int(argv[2]), window_s=float(argv[3]))
    elif argv == ["release"]:
        answer = release()
    else:
        answer = {"result": "failed", "message": "usage: adopt PID API_PORT WINDOW_S | release"}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
