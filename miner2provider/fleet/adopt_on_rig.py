"""``m2p miner adopt`` / ``release`` on the rig (issue 38), run as root by the rig's own python3 (3.8+).

Adopting a miner m2p has no adapter for (a hand-run miner, a miner under the owner's respawn wrapper, in a
screen or tmux): capture exactly how it runs (argv, program and its SHA-256, working folder, user, a filtered
environment, and the top process that keeps it running), stop that top process and the miner, and start the
same command in m2p's own unit (``m2p-miner.service``), which the time-share agent can stop and start
(``m2p_miner_unit: m2p-miner.service``).  When the miner does not come back in the unit holding a GPU, or comes
back slower, the adoption is rolled back: the unit goes and the original top process is started again, as it
was.  ``release`` gives the miner back the same way.

Slower: where the miner has a stats API m2p knows (T-Rex's ``/summary`` on the rig's loopback, its default port
4067 or ``m2p_trex_api_port``; github.com/trexminer/T-Rex/wiki/API), its total hashrate is read before the stop,
and the miner in the unit must reach 90 % of it within the window (a real miner builds its DAG first: tens of
seconds).  Without an API the answer says the hashrate was not compared.

What is captured holds wallets and pool passwords (a miner's command line and environment): it is written to a
root-only file on the rig and to a root-only script, and never printed.  The answer (JSON on stdout) names the
program, the supervisor and the outcome only.  A miner kept by a systemd unit or cron is refused: something else
restarts it, and m2p would fight it (name the unit in m2p_miner_unit instead).
"""

from __future__ import annotations

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
PROC = Path("/proc")
SUPERVISING_SHELLS = {"sh", "bash", "dash", "zsh", "python", "python3", "perl"}
SCREENS = {"screen", "SCREEN", "tmux: server", "tmux"}
# A login's environment, not the miner's: left out, so the unit starts the miner with what it needs.
_SESSION_ENV = ("SSH_", "XDG_", "DBUS_", "DISPLAY", "TERM", "SHLVL", "OLDPWD", "PWD", "_", "MAIL", "LS_COLORS",
                "SUDO_", "LOGNAME", "MOTD_SHOWN", "STY", "WINDOW", "TMUX")
UNIT_TEXT = """[Unit]
Description=The miner m2p adopted (m2p miner adopt; m2p miner release gives it back)
After=network-online.target

[Service]
ExecStart={run}
# The time-share agent's choice of cards beside a lease (CUDA_VISIBLE_DEVICES); none: every card.
EnvironmentFile=-{cards_env}
# The time-share agent stops and starts it; a miner that crashes is started again, as its wrapper did.
Restart=on-failure
RestartSec=10
KillMode=control-group
TimeoutStopSec=60

[Install]
WantedBy=multi-user.target
"""


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _argv(pid: int) -> list[str]:
    return [a for a in _read(PROC / str(pid) / "cmdline").split("\0")][:-1]


def _environ(pid: int) -> dict[str, str]:
    out = {}
    for item in _read(PROC / str(pid) / "environ").split("\0"):
        name, sep, value = item.partition("=")
        if sep and name and not any(name == p or (p.endswith("_") and name.startswith(p)) for p in _SESSION_ENV):
            out[name] = value
    return out


def _status(pid: int, key: str) -> str:
    for line in _read(PROC / str(pid) / "status").splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].split()[0] if line.split(":", 1)[1].split() else ""
    return ""


def _comm(pid: int) -> str:
    return _read(PROC / str(pid) / "comm").strip()


def _unit(pid: int) -> str:
    for line in reversed(_read(PROC / str(pid) / "cgroup").splitlines()):
        last = line.rsplit("/", 1)[-1]
        if last.endswith((".service", ".scope")):
            return last
    return ""


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


def capture(pid: int) -> dict[str, Any]:
    """How the miner ``pid`` runs and what keeps it running (the nearest wrapper, screen or tmux, else itself)."""
    if not (PROC / str(pid)).is_dir():
        raise LookupError(f"no process {pid}")
    with open(PROC / str(pid) / "exe", "rb") as f:  # the program as it runs, even if replaced on disk since
        digest = hashlib.sha256(f.read()).hexdigest()
    exe = os.readlink(PROC / str(pid) / "exe")
    top, kind, parent = pid, "by hand", int(_status(pid, "PPid") or 0)
    for _ in range(16):  # up the parents: wrappers (shells running a script) up to a screen, a login or PID 1
        if parent <= 1:
            break
        comm = _comm(parent)
        if comm in ("cron", "crond", "CRON"):
            raise PermissionError("cron starts it: something else restarts it, and m2p would fight it")
        if comm in SCREENS:
            top, kind = parent, "tmux" if "tmux" in comm else "screen"
            break
        if not _runs_a_script(parent, comm):  # a login shell, sshd, sudo: whoever started it by hand
            break
        top, kind = parent, "wrapper"
        parent = int(_status(parent, "PPid") or 0)
    unit = _unit(pid)
    if not _is_login_unit(unit) and unit != UNIT_NAME:
        raise PermissionError(f"the unit {unit} runs it: something else restarts it, and m2p would fight it "
                              f"(name it in m2p_miner_unit instead)")
    return {"pid": pid, **_how(pid), "sha256": digest, "program": Path(exe).name, "supervisor": kind,
            "top": {"pid": top, **_how(top)}}


def _how(pid: int) -> dict[str, Any]:
    """How ``pid`` runs: its program (the executable itself, so a PATH or an argv[0] such as SCREEN never
    matters), its arguments, folder, user and filtered environment."""
    return {"exe": os.readlink(PROC / str(pid) / "exe"), "argv": _argv(pid), "comm": _comm(pid),
            "cwd": os.readlink(PROC / str(pid) / "cwd"), "env": _environ(pid),
            "user": pwd.getpwuid(int(_status(pid, "Uid") or 0)).pw_name}


def _command(what: dict[str, Any]) -> str:
    """One shell line that runs ``what`` (argv, cwd, env, user) exactly, in a clean environment."""
    env = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(what["env"].items()))
    user = [] if what["user"] == "root" else [shutil.which("runuser") or "/usr/sbin/runuser", "-u", what["user"], "--"]
    argv, comm = what["argv"], what.get("comm", "")
    if len(argv) > 1 and comm and comm not in SUPERVISING_SHELLS and Path(argv[1]).name.startswith(comm):
        program = [argv[1], *argv[2:]]  # a script run by its shebang: run the script, so it is named as before
    elif argv and os.path.isabs(argv[0]) and os.path.realpath(argv[0]) == os.path.realpath(what["exe"]):
        program = argv  # as it was: /usr/bin/python3, not the python3.11 it resolves to
    else:
        program = [what["exe"], *argv[1:]]  # the executable itself: no PATH, no argv[0] such as SCREEN
    return (f"cd {shlex.quote(what['cwd'])} && exec /usr/bin/env -i {env} "
            + " ".join(shlex.quote(a) for a in [*user, *program]))


def _end(pids: list[int], grace_s: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any((PROC / str(p)).exists() and _status(p, "State") != "Z"
                                                  for p in pids):
            time.sleep(0.2)


def _gpu_pids() -> list[int]:
    done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return [int(x) for x in done.stdout.split() if x.strip().isdigit()]


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
    return subprocess.run(["systemctl", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode


def _start_original(top: dict[str, Any]) -> None:
    """The top process again, detached as it was started (its own session, no terminal)."""
    subprocess.Popen(["setsid", "sh", "-c", _command(top)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)


def _write(path: Path, text: str, mode: int) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".new")
    fd = os.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(str(tmp), mode)
    os.replace(str(tmp), str(path))


def _remove_unit() -> None:
    _systemctl("disable", "--now", UNIT_NAME)
    for path in (UNIT, RUN, CARDS_ENV):
        try:
            path.unlink()
        except FileNotFoundError:
            pass
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


def adopt(pid: int, api_port: int = 0, window_s: float = 120.0, settle_s: float = 20.0) -> dict[str, Any]:
    if RECORD.exists():
        return {"result": "converged", "message": f"a miner is adopted already ({UNIT_NAME})"}
    try:
        found = capture(pid)
    except (LookupError, PermissionError, OSError) as exc:
        return {"result": "refused", "message": f"{exc}; nothing was stopped"}
    said = {"program": found["program"], "supervisor": found["supervisor"]}
    before = _trex_mhs(api_port)
    _write(RECORD, json.dumps(found, indent=2, sort_keys=True), 0o600)
    _write(RUN, "#!/bin/sh\n# The miner m2p adopted, as it ran (root only: it holds wallets and passwords).\n"
                + _command(found) + "\n", 0o700)
    _write(UNIT, UNIT_TEXT.format(run=RUN, cards_env=CARDS_ENV), 0o644)
    _systemctl("daemon-reload")
    _end([found["top"]["pid"], pid], grace_s=30.0)
    time.sleep(3.0)  # a supervisor m2p did not see would bring it back by now
    back = [p for p in _gpu_pids() if _unit(p) != UNIT_NAME and p != os.getpid()]
    held = not back and _systemctl("enable", "--now", UNIT_NAME) == 0 and _held_in_unit(settle_s)
    after = None
    if held:
        adopted = f"adopted: it runs in {UNIT_NAME} as it ran before"
        if before is None:
            return {**said, "result": "changed", "message": adopted + (
                "; hashrate not compared (no stats API answered: T-Rex's, at m2p_trex_api_port)")}
        after = _reaches(before, api_port, window_s)
        if after is not None and after >= AS_FAST * before:
            return {**said, "result": "changed", "message": f"{adopted}, at {after:.1f} MH/s ({before:.1f} before)"}
    _remove_unit()
    RECORD.unlink()
    _forget_home()
    if not back:
        _start_original(found["top"])
    if back:
        why = "something else started it again"
    elif not held:
        why = f"it did not hold a GPU in {UNIT_NAME} within {settle_s:.0f} s"
    else:
        reached = "no hashrate" if after is None else f"{after:.1f} MH/s"
        why = f"in {UNIT_NAME} it reached {reached} in {window_s:.0f} s, against {before:.1f} MH/s before"
    return {**said, "result": "failed", "message": f"not adopted ({why}); it runs as it did before"}


def release(settle_s: float = 20.0) -> dict[str, Any]:
    try:
        found = json.loads(RECORD.read_text())
    except FileNotFoundError:
        return {"result": "converged", "message": "no miner is adopted here"}
    _remove_unit()
    _start_original(found["top"])
    RECORD.unlink()
    _forget_home()
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline and not _gpu_pids():
        time.sleep(0.5)
    held = bool(_gpu_pids())
    return {"program": found["program"], "supervisor": found["supervisor"], "result": "changed",
            "message": "released: started again by its " + ("wrapper" if found["supervisor"] == "wrapper" else
                                                            found["supervisor"])
            + ("" if held else f" (no GPU held yet after {settle_s:.0f} s)")}


def main(argv: list[str]) -> int:
    if os.geteuid() != 0:
        print(json.dumps({"result": "failed", "message": "needs root (sudo)"}))
        return 1
    if argv[:1] == ["adopt"] and len(argv) == 4:
        answer = adopt(int(argv[1]), api_port=int(argv[2]), window_s=float(argv[3]))
    elif argv == ["release"]:
        answer = release()
    else:
        answer = {"result": "failed", "message": "usage: adopt PID API_PORT WINDOW_S | release"}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
