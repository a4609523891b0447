"""What the agent touches on the rig itself: the miner (through the mining OS's own
commands) and the GPUs' truth (NVML: which processes hold a GPU)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Miner:
    """The mining OS adapter: shell commands from roles/mining_os (HiveOS ``miner stop``,
    msOS ``core/stop``, a systemd unit on plain Ubuntu).  ``running`` exits 0 while it mines."""

    running_cmd: str
    start_cmd: str
    stop_cmd: str
    # A watchdog that acts on a rig without hashrate (HiveOS ``wd``: restarts the miner or reboots on low hashrate
    # or high load): held while any lease runs, and given back as it was after them.  ``watchdog_stop_cmd`` must
    # really stop it (HiveOS's own ``wd stop`` does nothing: its unit, masked for this boot so that nothing of the
    # OS starts it again); ``watchdog_release_cmd`` undoes what the stop did, and ``watchdog_start_cmd`` starts
    # it again where it ran before.
    watchdog_running_cmd: str = ""
    watchdog_stop_cmd: str = ""
    watchdog_release_cmd: str = ""
    watchdog_start_cmd: str = ""
    timeout_s: float = 60.0
    # The generic adapter (a mining OS whose own stop command is unknown, issue 15): the folders its
    # miners run from.  stop() runs stop_cmd (the OS's own hold: a pause flag, its agent stopped,
    # so nothing restarts them) and then ends every process running from there itself (TERM, then
    # KILL after grace_s); with no running_cmd, such a process is the miner running.
    processes: tuple[str, ...] = ()
    grace_s: float = 10.0
    proc: str = "/proc"
    # How long a start is given to show a running miner before its exit code is believed (below), where the OS
    # really starts its miner later (``start_believed``: msOS's console); everywhere else a start is judged by a
    # miner process holding the cards it was started on within ``start_hold_s`` (NVML), whatever it exited.
    start_settle_s: float = 5.0
    start_believed: bool = False
    start_hold_s: float = 30.0
    # Something the OS's start takes for a running miner when none runs (HiveOS: a `miner` screen session left
    # holding only a bash, after a start with no miner set; its `miner start` then says "already running" and
    # starts nothing): exits 0 while it is there.  The OS's own stop clears it before a start.
    leftover_cmd: str = ""
    # The miner starts in a transient scope of its own (systemd-run --scope), never in the agent's unit:
    # HiveOS's `miner start` runs `screen -dm`, which stays in its caller's cgroup, so an agent restart
    # (a new config, an upgrade, a crash) would kill the miner and the agent's MemoryMax would cap it.
    own_scope: bool = True
    # The OS's start command passes its caller's environment on to the miner (HiveOS: ``miner start`` runs it
    # in screen, which keeps the environment), so the miner can be started on some cards only (per-card
    # hand-over, decide.py): with ``CUDA_VISIBLE_DEVICES`` naming them, CUDA makes no context on the others.
    per_card: bool = False
    # Where the OS's start does not pass the caller's environment (``systemctl start``), a file its unit reads
    # (``EnvironmentFile=``: m2p's own m2p-miner.service): the agent writes the cards there before a start on
    # some, and removes it before a start on every card.
    cards_env_file: str = ""
    cards_env_unit: str = ""  # the unit file that must read cards_env_file (a unit written before it does not)
    # The mining OS's own environment, which its commands need and systemd never gives them (HiveOS: PATH with
    # /hive/bin:/hive/sbin, RIG_CONF, ... only in /etc/environment, which logins read; its own `hive` boot script
    # sources it first).  Without it HiveOS's `miner start` starts nothing and exits 0.  Empty: none needed.
    environment_file: str = ""
    # The OS's own configuration that says whether its miner can be started on some cards (flight_sheet.py:
    # HiveOS's rig.conf and wallet.conf); read, never printed.
    config_files: tuple[str, ...] = ()

    def takes_cards(self) -> bool:
        """The miner can be started on some cards: the OS passes the environment on, or the unit reads the
        file (an m2p-miner.service adopted before the file existed does not: whole-rig hand-over there)."""
        if not self.per_card:
            return False
        if not self.cards_env_file:
            return True
        try:
            return f"EnvironmentFile=-{self.cards_env_file}\n" in Path(self.cards_env_unit).read_text()
        except OSError:
            return False

    def _sh(self, cmd: str) -> subprocess.CompletedProcess[str]:
        return _probe(cmd, self.timeout_s)

    def running(self) -> bool:
        if self.running_cmd:
            return self._sh(self.running_cmd).returncode == 0
        return bool(self.miner_pids())

    def start(self, cards: tuple[str, ...] = (), holding: Callable[[], bool] | None = None) -> None:
        """``cards``: the cards' UUIDs the miner may use (): every card.  ``holding``: whether a miner process
        (outside every container) holds those cards now (NVML).

        Judged by what runs afterwards, never by the script's exit code alone: HiveOS's `miner start` exits 0
        having started nothing when its environment is missing or no miner is set, and older ones exit 1 having
        started it whenever the watchdog is off (hiveos-linux hive/bin/miner @04c15d05 ends with
        ``[[ $WD_ENABLED == 1 ]] && wd start``).  Only where the OS starts the miner later (``start_believed``)
        is a start that exits 0 with no miner yet believed: the next ticks see it."""
        if not self.start_cmd:
            return
        env = visible_only(cards)
        if self.cards_env_file:
            _write_cards_env(Path(self.cards_env_file), env)
        self._clear_leftover()
        proc = self._os_shell(self.start_cmd, env, scope=self.own_scope)
        if holding is not None and not self.start_believed:
            if _within(self.start_hold_s, holding, every_s=1.0):
                return
            raise RuntimeError(f"miner start ({self.start_cmd}) exited {proc.returncode} but no miner process holds "
                               f"{'its cards' if cards else 'a GPU'} after {self.start_hold_s:g} s: {_tail(proc)}")
        if self._settles(True, self.start_settle_s) or proc.returncode == 0:
            return
        raise RuntimeError(f"miner start ({self.start_cmd}) exited {proc.returncode} and no miner runs: "
                           f"{_tail(proc)}")

    def _clear_leftover(self) -> None:
        """What the OS would take for a running miner, cleared by its own stop when no miner runs."""
        if self.leftover_cmd and self.stop_cmd and not self.running() and self._sh(self.leftover_cmd).returncode == 0:
            self._os_shell(self.stop_cmd)

    def stop(self, gpu_holders: Callable[[], list[int]] | None = None) -> None:
        """The OS's own stop, judged by the miner's state (msOS's real core/stop always exits 1); then
        whatever still holds a GPU outside every container (``gpu_holders``: a miner that ignored the
        stop, or survived its screen) is given ``grace_s`` to go and then ended, TERM then KILL."""
        proc = self._os_shell(self.stop_cmd) if self.stop_cmd else None
        if self.processes:  # the generic adapter: the OS's hold must hold, or the OS restarts what m2p ends
            if proc is not None:
                _checked(proc, f"miner stop ({self.stop_cmd})")
            self._end(self.miner_pids())
        if gpu_holders is not None:
            self._end_leftovers(gpu_holders)
        if self.running_cmd and not self._settles(False, self.grace_s):
            raise RuntimeError(f"the miner still runs after {self.stop_cmd}"
                               + (f" (it exited {proc.returncode}: {_tail(proc)})" if proc is not None else ""))

    def _settles(self, running: bool, within_s: float) -> bool:
        return _within(within_s, lambda: self.running() == running)

    def _end_leftovers(self, gpu_holders: Callable[[], list[int]]) -> None:
        """Real miners take seconds to free their cards (a CUDA context per card) and some ignore the
        first stop: wait ``grace_s`` for the GPUs to be free, then end what still holds them."""
        holders: list[int] = []

        def free() -> bool:
            holders[:] = [pid for pid in gpu_holders() if pid > 1 and pid != os.getpid()]
            return not holders
        if not _within(self.grace_s, free):
            self._end(holders)

    def miner_pids(self) -> list[int]:
        """Processes whose program lives under one of ``processes`` (an interpreter's script counts)."""
        return [pid for pid, program in _programs(self.proc) if any(
            program.startswith(folder.rstrip("/") + "/") for folder in self.processes)] if self.processes else []

    def _end(self, pids: list[int]) -> None:
        left = list(pids)

        def gone() -> bool:
            left[:] = [pid for pid in left if _alive(pid, self.proc)]
            return not left
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in left:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            if _within(self.grace_s if sig == signal.SIGTERM else 5.0, gone, every_s=0.1):
                return
        raise RuntimeError(f"miner processes {' '.join(map(str, left))} did not end after SIGKILL")

    def watchdog_running(self) -> bool:
        return bool(self.watchdog_running_cmd) and self._sh(self.watchdog_running_cmd).returncode == 0

    def hold_watchdog(self) -> None:
        """Stop the watchdog (whether it runs or not: masked, nothing of the OS starts it during the lease)."""
        self._checked(self.watchdog_stop_cmd, "watchdog stop")

    def release_watchdog(self, was_running: bool) -> None:
        """The watchdog as it was before the hold: released, and started again where it ran."""
        self._checked(self.watchdog_release_cmd, "watchdog release")
        if was_running:
            self._checked(self.watchdog_start_cmd, "watchdog start")

    def _checked(self, cmd: str, what: str) -> None:
        if cmd:
            _checked(self._os_shell(cmd), f"miner {what} ({cmd})")

    def _os_shell(self, cmd: str, env: dict[str, str] | None = None,
                  scope: bool = False) -> subprocess.CompletedProcess[str]:
        """One of the mining OS's own commands, with its environment file over ``env`` (None: the agent's)."""
        return _shell(cmd, self.timeout_s, scope=scope, env=with_os_environment(self.environment_file, env))


@dataclass(frozen=True)
class Clocks:
    """The cards' clocks and power limits.  Mining OSes tune them for hashing (HiveOS's nvidia-oc: a
    power limit through nvidia-smi, clock offsets through nvidia-settings); CUDA work on a memory
    offset tuned for one hash crashes or computes wrong.  reset() puts every card on its defaults
    before a lease gets it; reapply() runs the mining OS's own command (its configuration stays the
    source of truth) before the miner starts again.  No command known for the OS: the cards mine on
    their defaults until the OS applies its settings itself (its next boot)."""

    apply_cmd: str = ""
    timeout_s: float = 60.0
    environment_file: str = ""  # as Miner's: HiveOS's nvidia-oc finds gpu-detect and $NVIDIA_OC_CONF through it

    def reset(self, nvml: Any = None, run: Callable[..., Any] = subprocess.run,
              cards: frozenset[str] | None = None) -> list[str]:
        """``cards`` (UUIDs) on their defaults, None: every card.  Only the cards a lease gets: the others go on
        mining on the owner's tuning beside it (per-card hand-over).  Returns what this driver cannot reset
        (an NVML without the offset calls: ``FUNCTION_NOT_FOUND``), to be said; anything else that fails
        raises (a lease on mining clocks may compute wrong: the gate refuses it)."""
        nvml = _opened_nvml(nvml)
        if nvml is None:  # nvidia-smi does the same (offsets apart)
            self._reset_with_nvidia_smi(run, cards)
            return []
        left: list[str] = []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                if cards is None or _uuid(nvml, handle) in cards:
                    left += _reset_card(nvml, handle, index)
        finally:
            nvml.nvmlShutdown()
        return left

    def _reset_with_nvidia_smi(self, run: Callable[..., Any], cards: frozenset[str] | None) -> None:
        def smi(*args: str) -> str:
            proc = run(["nvidia-smi", *args], capture_output=True, text=True, timeout=self.timeout_s)
            out: str = (proc.stdout + proc.stderr).strip()
            # Older cards (before Volta) cannot lock clocks: nothing to reset there.
            if proc.returncode != 0 and "not supported" not in out.lower():
                raise RuntimeError(f"nvidia-smi {' '.join(args)} exited {proc.returncode}: {out[-200:]}")
            return out

        # nvidia-smi's -i takes a UUID as well as an index (nvidia-smi(1)): a card named by UUID is that card.
        chosen = [()] if cards is None else [("-i", uuid) for uuid in sorted(cards)]
        for card in chosen:
            smi(*card, "-rgc")
            smi(*card, "-rmc")
        for line in smi("--query-gpu=index,uuid,power.default_limit", "--format=csv,noheader,nounits").splitlines():
            index, uuid, watts = (part.strip() for part in (line.split(",") + ["", ""])[:3])
            if cards is not None and uuid not in cards:
                continue
            if index.isdigit() and watts.replace(".", "", 1).isdigit():  # "[N/A]": no settable limit
                smi("-i", index, "-pl", watts)

    def tuned(self, cards: frozenset[str] | None = None, nvml: Any = None,
              run: Callable[..., Any] = subprocess.run) -> frozenset[str]:
        """The ``cards`` (UUIDs; None: every card) that are off their defaults: a power limit other than the
        default, or a clock offset where this NVML reads one (a dashboard OC push during a lease: HiveOS's
        nvidia-oc tunes every card, the leased ones too)."""
        nvml = _opened_nvml(nvml)
        if nvml is None:
            query = ["nvidia-smi", "--query-gpu=uuid,power.limit,power.default_limit", "--format=csv,noheader,nounits"]
            out = run(query, capture_output=True, text=True, timeout=self.timeout_s)
            if out.returncode != 0:
                raise RuntimeError(f"nvidia-smi --query-gpu exited {out.returncode}: {out.stdout.strip()[-200:]}")
            rows = [[part.strip() for part in line.split(",")] for line in out.stdout.splitlines()]
            return frozenset(row[0] for row in rows if len(row) == 3 and (cards is None or row[0] in cards)
                             and _number(row[1]) is not None and _number(row[1]) != _number(row[2]))
        try:
            found: set[str] = set()
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _uuid(nvml, handle)
                if (cards is None or uuid in cards) and _off_defaults(nvml, handle):
                    found.add(uuid)
            return frozenset(found)
        finally:
            nvml.nvmlShutdown()

    def reapply(self) -> None:
        if self.apply_cmd:
            _checked(_shell(self.apply_cmd, self.timeout_s, env=with_os_environment(self.environment_file)),
                     self.apply_cmd)


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


NVML_ERROR_FUNCTION_NOT_FOUND = 13  # nvml.h: "Local version of NVML doesn't implement this function"


def _uuid(nvml: Any, handle: Any) -> str:
    uuid = nvml.nvmlDeviceGetUUID(handle)
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]": a card without a settable limit
        return None


def _off_defaults(nvml: Any, handle: Any) -> bool:
    """A power limit other than the default, or a clock offset; what this card or NVML cannot read counts as
    on its defaults (nothing m2p could reset there either)."""
    reads: list[Any] = []
    for name in ("nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetPowerManagementDefaultLimit",
                 "nvmlDeviceGetGpcClkVfOffset", "nvmlDeviceGetMemClkVfOffset"):
        call = getattr(nvml, name, None)
        try:
            reads.append(call(handle) if call is not None else None)
        except nvml.NVMLError:
            reads.append(None)
    limit, default, gpc, mem = reads
    return (limit is not None and default is not None and limit != default) or bool(gpc) or bool(mem)


def _reset_card(nvml: Any, handle: Any, index: int) -> list[str]:
    """Locked clocks off, clock offsets to 0, the default power limit; a call this card or this pynvml does not
    have is skipped (nothing of it to reset).  A call this driver's NVML lacks (FUNCTION_NOT_FOUND: the offset
    calls came with driver 470+) is returned, to be said: the rest is still reset."""
    not_supported = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)
    not_found = getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND)
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("nvmlDeviceResetGpuLockedClocks", ()), ("nvmlDeviceResetMemoryLockedClocks", ()),
        ("nvmlDeviceSetGpcClkVfOffset", (0,)), ("nvmlDeviceSetMemClkVfOffset", (0,)),
    ]
    left: list[str] = []
    try:
        calls.append(("nvmlDeviceSetPowerManagementLimit", (nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle),)))
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == not_found:
            left.append(f"GPU {index}: nvmlDeviceGetPowerManagementDefaultLimit")
        elif getattr(exc, "value", None) != not_supported:
            raise RuntimeError(f"GPU {index}: default power limit: {exc}") from None
    for name, args in calls:
        call = getattr(nvml, name, None)
        if call is None:
            continue
        try:
            call(handle, *args)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == not_found:
                left.append(f"GPU {index}: {name}")
            elif getattr(exc, "value", None) != not_supported:
                raise RuntimeError(f"GPU {index}: {name}: {exc}") from None
    return left


INTERPRETERS = ("sh", "bash", "dash", "python3", "python", "perl", "node")


def _programs(proc: str) -> Iterator[tuple[int, str]]:
    """(pid, the program it runs): its executable, or for an interpreter the script it was given,
    made absolute against the process's working directory (miners are often started as ./t-rex)."""
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            exe = os.readlink(f"{proc}/{entry}/exe")
            argv = Path(f"{proc}/{entry}/cmdline").read_bytes().split(b"\0")
            cwd = os.readlink(f"{proc}/{entry}/cwd")
        except OSError:  # gone, or a kernel thread
            continue
        program = exe
        name = os.path.basename(exe).rstrip("0123456789.")
        if name in INTERPRETERS and len(argv) > 1 and argv[1] and not argv[1].startswith(b"-"):
            program = os.path.normpath(os.path.join(cwd, os.fsdecode(argv[1])))
        yield int(entry), program


def _alive(pid: int, proc: str) -> bool:
    try:
        return Path(f"{proc}/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _opened_nvml(nvml: Any = None) -> Any:
    """NVML initialised (``nvml``, else pynvml: nvidia-ml-py, the real path); None where there is none to open
    (no pynvml, as on a controller, or no libnvidia-ml: no driver loaded).  The caller shuts it down."""
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
    except Exception:
        return None
    return nvml


def _compute_apps(run: Callable[..., Any], fields: str) -> str:
    """``nvidia-smi --query-compute-apps=<fields>``'s rows (NVML's answer where pynvml is missing)."""
    proc = run(["nvidia-smi", f"--query-compute-apps={fields}", "--format=csv,noheader"],
               capture_output=True, text=True, timeout=20)
    if proc.returncode != 0:
        raise RuntimeError(
            f"nvidia-smi --query-compute-apps exited {proc.returncode}: {proc.stdout.strip()[-200:]}")
    out: str = proc.stdout
    return out


def gpu_processes(nvml: Any = None, run: Callable[..., Any] = subprocess.run) -> list[int]:
    """PIDs of compute processes on any GPU: through NVML (pynvml), else nvidia-smi.
    Graphics processes (Xorg on HiveOS) are not counted: they hold a few MiB and no lease needs them gone."""
    nvml = _opened_nvml(nvml)
    if nvml is None:
        return sorted({int(line) for line in _compute_apps(run, "pid").split() if line.strip().isdigit()})
    try:
        pids: set[int] = set()
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            pids.update(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        return sorted(pids)
    finally:
        nvml.nvmlShutdown()


def gpu_processes_by_card(nvml: Any = None, run: Callable[..., Any] = subprocess.run) -> dict[str, list[int]]:
    """Each card's compute processes, by the card's UUID (gpu_processes, card by card)."""
    nvml = _opened_nvml(nvml)
    if nvml is None:
        by_card: dict[str, list[int]] = {}
        for line in _compute_apps(run, "pid,gpu_uuid").splitlines():
            pid, _, uuid = (part.strip() for part in line.partition(","))
            if pid.isdigit() and uuid:
                by_card.setdefault(uuid, []).append(int(pid))
        return by_card
    try:
        out: dict[str, list[int]] = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            out[_uuid(nvml, handle)] = sorted(p.pid for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        return out
    finally:
        nvml.nvmlShutdown()


GPU_INFO_DIR = "/proc/driver/nvidia/gpus"


def card_uuids(info_dir: str = GPU_INFO_DIR) -> dict[int, str]:
    """Each card's device minor (``/dev/nvidiaN``: what a container is given) to its UUID, from the driver's
    own ``<info_dir>/<PCI address>/information`` (lines ``Device Minor: 0``, ``GPU UUID: GPU-...``), in PCI
    bus order (the entries' names: fixed-width lower-case hex, so sorted as text is sorted by bus).  The
    minor is not nvidia-smi's index: the driver numbers cards as it probes them, nvidia-smi by PCI address,
    and rigs have been seen where nvidia-smi's index 3 is /dev/nvidia0.  Bus order is HiveOS's (gpu-detect,
    nvidia-oc's per-card lists, the dashboard's GPU numbers) and CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID:
    the order the agent names the cards in CUDA_VISIBLE_DEVICES.  {} where the driver says nothing."""
    out: dict[int, str] = {}
    try:
        entries = sorted(os.listdir(info_dir))
    except OSError:
        return out
    for entry in entries:
        try:
            text = Path(info_dir, entry, "information").read_text()
        except OSError:
            continue
        fields = dict((key.strip(), value.strip()) for key, _, value in
                      (line.partition(":") for line in text.splitlines()) if _)
        minor, uuid = fields.get("Device Minor", ""), fields.get("GPU UUID", "")
        if minor.isdigit() and uuid.startswith("GPU-"):
            out[int(minor)] = uuid
    return out


# kubelet's pod hierarchy at the cgroup root: /kubepods/... (cgroupfs driver), /kubepods.slice/... (systemd).
POD_CGROUP = re.compile(r"^\d+:[^:\n]*:/kubepods(?:\.slice)?(?:/|$)", re.MULTILINE)


def in_a_container(pid: int, proc: str = "/proc") -> bool:
    """The process runs in a Kubernetes pod: its cgroup path starts with kubelet's ``kubepods``
    hierarchy.  The first path component, not a substring: a user can name a cgroup of their own
    (``/user.slice/.../kubepods``) but only root makes one at the root.  A process that has ended
    counts as outside: it holds nothing, and NVML will say so."""
    try:
        return POD_CGROUP.search(Path(f"{proc}/{pid}/cgroup").read_text()) is not None
    except OSError:
        return False


def outside_containers(pids: list[int], proc: str = "/proc") -> list[int]:
    """GPU processes that are not a lease's: the miner, or anything else of the host's."""
    return [pid for pid in pids if not in_a_container(pid, proc)]
