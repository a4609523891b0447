"""The mining OS's miner, driven through the OS's own commands (roles/mining_os): running, start (on every card
or on some), stop (and what it leaves holding the GPUs), the OS's watchdog."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from miner2provider.agent.shell import (
    _checked,
    _probe,
    _shell,
    _tail,
    _within,
    _write_cards_env,
    visible_only,
    with_os_environment,
)


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
