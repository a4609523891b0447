"""How the agent runs the mining OS's commands: without a shell where plain words do, with the OS's own
environment (HiveOS's /etc/environment), in a scope of their own, bounded in time; the cards a start may see."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def _within(seconds: float, done: Callable[[], bool], every_s: float = 0.25) -> bool:
    """Poll ``done`` until it is true (True) or ``seconds`` have passed (False)."""
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
    return True


SCOPE_PREFIX = "m2p-miner-"  # the miner's transient scopes: m2p-miner-<ms since the epoch>.scope


def in_own_scope(argv: list[str]) -> list[str]:
    """``argv`` run in a new transient scope (its processes, and what they fork, are that scope's: not the
    caller's unit, its limits or its restarts).  Unchanged where systemd does not run the host."""
    if not Path("/run/systemd/system").is_dir() or shutil.which("systemd-run") is None:
        return argv
    unit = f"{SCOPE_PREFIX}{int(time.time() * 1000)}"
    # --nice=0: not the agent's own Nice= (a forked process inherits it; the scope does not reset it).
    return ["systemd-run", "--scope", f"--unit={unit}", "--nice=0", "--description=miner started by m2p-agent",
            *argv]


def visible_only(cards: tuple[str, ...]) -> dict[str, str] | None:
    """The environment that shows CUDA only ``cards`` (UUIDs; CUDA's documented CUDA_VISIBLE_DEVICES accepts
    them, in any device order); None: the agent's own, every card visible.  CUDA_DEVICE_ORDER=PCI_BUS_ID too,
    so a miner that numbers the cards itself numbers them as nvidia-smi does."""
    if not cards:
        return None
    env = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    return {**env, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(cards)}


def os_environment(path: str) -> dict[str, str]:
    """The mining OS's environment file (``NAME=value`` lines, as pam_env reads /etc/environment: ``#`` comments,
    an optional ``export``, values in single or double quotes), for the OS's commands the agent runs as root.
    Only a file root owns and no one else may write is read: nothing run as root takes its environment from an
    unprivileged user.  A file that is missing or not safe fails the command that needs it, said."""
    try:
        info = os.stat(path)  # through the link: HiveOS's /etc/environment -> /hive/etc/environment
        text = Path(path).read_text()
    except OSError as exc:
        raise RuntimeError(f"the mining OS's environment {path}: {exc.strerror}") from None
    if info.st_uid != 0 or info.st_mode & 0o022:
        raise RuntimeError(f"the mining OS's environment {path} is not root's alone (owner uid {info.st_uid}, "
                           f"mode {info.st_mode & 0o777:o}): not read")
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, value = line.partition("=")
        if not sep or line.startswith("#") or not name.replace("_", "a").isalnum() or name[0].isdigit():
            continue
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[name] = value
    return out


def with_os_environment(path: str, env: dict[str, str] | None = None) -> dict[str, str] | None:
    """``env`` (None: the agent's own) with the mining OS's environment file over it (``path``; empty: none).
    The cards the agent chose (CUDA_VISIBLE_DEVICES) stay the agent's: the file never widens them."""
    if not path:
        return env
    base = dict(os.environ if env is None else env)
    cards: dict[str, str] = {key: base[key] for key in ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES") if key in base}
    return {**base, **os_environment(path), **cards}


def _write_cards_env(path: Path, env: dict[str, str] | None) -> None:
    """The unit's environment file: the two variables of ``env`` (None: the file removed, every card)."""
    if env is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{key}={env[key]}\n" for key in ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")))
    os.replace(tmp, path)


def _shell(cmd: str, timeout_s: float, scope: bool = False,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["/bin/sh", "-c", cmd]
    return _run(in_own_scope(argv) if scope else argv, cmd, timeout_s, env)


def _run(argv: list[str], cmd: str, timeout_s: float,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:  # a hung mining-OS command fails like one that exits non-zero
        raise RuntimeError(f"{cmd} did not finish within {timeout_s:g} s") from None


_SHELL_SYNTAX = frozenset("|&;<>()$`\\\"'*?[]#~={}%!\n")


def _probe(cmd: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """A check the agent runs every tick (``screen -ls miner``, ``systemctl is-active ...``): plain words run
    without a shell in between (one process started a tick, not two: an idle agent's CPU); anything a shell
    would read differently (quotes, pipes, variables, globs, redirections) goes to ``/bin/sh -c`` as before,
    and so does a first word that is no program on PATH (a shell builtin such as ``command``, or nothing: sh
    answers for it, 127)."""
    argv = cmd.split()
    if not argv or any(c in _SHELL_SYNTAX for c in cmd) or shutil.which(argv[0]) is None:
        return _shell(cmd, timeout_s)
    try:
        return _run(argv, cmd, timeout_s)
    except OSError as exc:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: {exc.strerror}")


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    return (proc.stderr or proc.stdout or "").strip()[-200:]


def _checked(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        raise RuntimeError(f"{what} exited {proc.returncode}: {_tail(proc)}")
