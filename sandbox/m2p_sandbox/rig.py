"""Sandbox rigs: real systemd hosts with sshd, booted with systemd-nspawn.

A rig is an overlay (flavour layer + base, per-rig upper dir) booted by
``systemd-nspawn --boot`` inside its own network namespace, under a small supervisor
process that restarts it when it reboots and tears everything down when it stops or
when the process that owns the rig dies (so a killed test run leaves nothing behind).

State lives under ``M2P_SANDBOX_ROOT`` (default /var/lib/m2p-sandbox):
``rigs/<id>/{rig.json, upper, work, merged, flavour, id_ed25519, console.log}``.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import paramiko

from m2p_sandbox import base, flavours, gpu_standin, network, processes, pythons
from m2p_sandbox.errors import SandboxError

BOOT_TIMEOUT = float(os.environ.get("M2P_SANDBOX_BOOT_TIMEOUT", "90"))


def sandbox_root() -> Path:
    return Path(os.environ.get("M2P_SANDBOX_ROOT", "/var/lib/m2p-sandbox"))


def cache_dir() -> Path:
    return Path(os.environ.get("M2P_SANDBOX_CACHE", "/var/cache/m2p-sandbox"))


def ended_dir() -> Path:
    """Why each rig ended, kept after its teardown removes its directory (a rig id is a slot, reused: the
    file is emptied when the slot is taken again)."""
    return sandbox_root() / "ended"


AT_ONCE = signal.SIGUSR1  # what asks a rig's supervisor to stop it without the poweroff
TAKEN = "--- slot taken by"  # an end log's mark where the slot's next rig begins
END_LOG_BYTES = 256 * 1024


def end_log(rig_dir: Path) -> Path:
    return ended_dir() / f"{rig_dir.name}.log"


def note_end(rig_dir: Path, text: str) -> None:
    """One line of why ``rig_dir``'s rig is stopping or stopped (who asked, nspawn's exit, the console's tail)."""
    ended_dir().mkdir(parents=True, exist_ok=True)
    with open(end_log(rig_dir), "a") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {text}\n")


def rigs_dir() -> Path:
    return sandbox_root() / "rigs"


@dataclass(frozen=True)
class RigSpec:
    """What to boot: a hostname, a flavour and, optionally, stand-in GPUs and an old python3
    (``("3.8",)``: the rig's python3 is 3.8; more versions go beside it, see ``pythons``)."""

    name: str
    flavour: str = "plain"
    gpus: tuple[str, ...] = ()
    python: tuple[str, ...] = ()
    # STAND-IN for a board with this much RAM: the rig's /proc/meminfo says it (0: this machine's, as it is).
    memory_mb: int = 0


@dataclass
class Rig:
    """A booted rig, as the tests and Molecule see it."""

    id: str
    name: str
    flavour: str
    slot: int
    address: str
    user: str
    key_file: str
    dir: str
    gpus: list[str] = field(default_factory=list)
    python: list[str] = field(default_factory=list)
    memory_mb: int = 0
    owner_pid: int | None = None
    owner_start: int | None = None
    port: int = 22

    @property
    def path(self) -> Path:
        return Path(self.dir)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_dir(cls, rig_dir: Path) -> Rig:
        return cls(**json.loads((rig_dir / "rig.json").read_text()))

    def save(self) -> None:
        tmp = self.path / "rig.json.tmp"
        tmp.write_text(self.to_json())
        os.replace(tmp, self.path / "rig.json")


# -- allocation ----------------------------------------------------------------------


@contextmanager
def _allocation_lock() -> Iterator[None]:
    sandbox_root().mkdir(parents=True, exist_ok=True)
    # Python opens files close-on-exec, so a rig's nspawn never inherits this lock.
    with open(sandbox_root() / ".alloc.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _reserve(spec: RigSpec, owner_pid: int | None) -> Rig:
    """Pick a free slot, create the rig's directory and network; under the lock."""
    with _allocation_lock():
        rigs_dir().mkdir(parents=True, exist_ok=True)
        taken = set()
        for rig_json in rigs_dir().glob("*/rig.json"):
            try:
                taken.add(json.loads(rig_json.read_text())["slot"])
            except (OSError, ValueError, KeyError):
                continue
        slot = 2
        while slot in taken or network.slot_in_use(slot) or (rigs_dir() / network.namespace_name(slot)).exists():
            slot += 1
        network.ensure_bridge()
        rig_id = network.namespace_name(slot)
        rig_dir = rigs_dir() / rig_id
        rig_dir.mkdir()
        # The slot's earlier rigs' stories stay in the file (a rig lost under a test is read about after the run),
        # up to END_LOG_BYTES; this rig's starts at its mark.
        with contextlib.suppress(OSError):
            if end_log(rig_dir).stat().st_size > END_LOG_BYTES:
                end_log(rig_dir).unlink()
        address = str(network.address_for(slot))
        rig = Rig(
            id=rig_id,
            name=spec.name,
            flavour=spec.flavour,
            slot=slot,
            address=address,
            user=base.TEST_USER,
            key_file=str(rig_dir / "id_ed25519"),
            dir=str(rig_dir),
            gpus=list(spec.gpus),
            python=list(spec.python),
            memory_mb=spec.memory_mb,
            owner_pid=owner_pid,
            owner_start=processes.start_time(owner_pid) if owner_pid else None,
        )
        note_end(rig_dir, taken_mark(rig))
        rig.save()
        network.plumb(slot)
        return rig


def taken_mark(rig: Rig) -> str:
    """The end log's line where ``rig``'s story begins: its name and owner, so a later rig of the same slot and
    name (a test's next rig) opens a section of its own."""
    return f"{TAKEN} {rig.name} (owner {rig.owner_pid} started {rig.owner_start})"


# -- preparing the root filesystem ---------------------------------------------------


def _run(cmd: list[str], **kw: object) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise SandboxError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")


def _mount_overlay(rig: Rig, base_rootfs: Path, flavour: flavours.Flavour) -> Path:
    lower = [base_rootfs]
    if rig.python:
        lower.insert(0, pythons.layer(tuple(rig.python), base_rootfs, cache_dir()))
    layer = rig.path / "flavour"
    # A private copy: git checkouts do not keep ownership, and the layer must be root's.
    shutil.copytree(flavour.root, layer, symlinks=True, ignore=shutil.ignore_patterns(".keep"))
    _run(["chown", "-R", "--no-dereference", "root:root", str(layer)])
    for sub in ("upper", "work", "merged"):
        (rig.path / sub).mkdir()
    opts = f"lowerdir={':'.join(map(str, [layer, *lower]))},upperdir={rig.path / 'upper'},workdir={rig.path / 'work'}"
    _run(["mount", "-t", "overlay", "overlay", "-o", opts, str(rig.path / "merged")])
    return rig.path / "merged"


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _personalise(rig: Rig, root: Path, flavour: flavours.Flavour) -> None:
    """Hostname, host keys, the test user's key, flavour users and dpkg entries."""
    _write(root / "etc/hostname", rig.name + "\n")
    _write(
        root / "etc/hosts",
        f"127.0.0.1\tlocalhost\n127.0.1.1\t{rig.name}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    )
    (root / "etc/machine-id").write_text(os.urandom(16).hex() + "\n")
    # Each rig its own host key, so a test can meet a changed one.
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{rig.name}",
          "-f", str(root / "etc/ssh/ssh_host_ed25519_key")])
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"m2p-sandbox@{rig.name}",
          "-f", rig.key_file])
    home = root / "home" / base.TEST_USER
    _write(home / ".ssh/authorized_keys", Path(rig.key_file + ".pub").read_text(), 0o600)
    (home / ".ssh").chmod(0o700)
    _run(["chroot", str(root), "chown", "-R", f"{base.TEST_USER}:{base.TEST_USER}", f"/home/{base.TEST_USER}/.ssh"])
    for user in flavour.users:
        groups = ["--groups", "sudo"] if user.sudo else []
        _run(["chroot", str(root), "useradd", "--create-home", "--shell", "/bin/bash", *groups, user.name])
        if user.password is not None:
            _run(["chroot", str(root), "chpasswd"], input=f"{user.name}:{user.password}\n")
    for entry in flavour.dpkg_status:
        with open(root / "var/lib/dpkg/status", "a") as status:
            status.write("\n" + entry.read_text().strip() + "\n")
    gpu_standin.install_miner(root)
    if rig.gpus:
        gpu_standin.install(root, rig.gpus, rig.name)
    if rig.memory_mb:
        _write(root / MEMINFO.lstrip("/"), small_board_meminfo(Path("/proc/meminfo").read_text(), rig.memory_mb))
        # Bound from inside at boot, before anything reads it (nspawn refuses a --bind onto its own /proc).
        _write(root / "etc/systemd/system/m2p-standin-meminfo.service", MEMINFO_UNIT)
        wants = root / "etc/systemd/system/sysinit.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        (wants / "m2p-standin-meminfo.service").symlink_to("../m2p-standin-meminfo.service")


MEMINFO = "/usr/local/share/m2p-standin/meminfo"
MEMINFO_UNIT = f"""[Unit]
Description=STAND-IN: this rig's RAM as a small board shows it (m2p's sandbox)
DefaultDependencies=no
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/mount --bind -o ro {MEMINFO} /proc/meminfo
"""


def small_board_meminfo(real: str, total_mb: int) -> str:
    """This machine's /proc/meminfo as a board with ``total_mb`` of usable RAM shows it: MemTotal is what the kernel
    leaves after firmware and its own reservations (a 4 GB board: about 3854 MB; tests/unit/facts/memory), and
    MemFree, MemAvailable, swap and the caches are cut to fit it, so no reader sees more free than total.  A STAND-IN
    for a small board: a file bound over the rig's /proc/meminfo (as LXCFS does for containers), read by m2p's probe
    and by Ansible's facts alike; the figures do not move as the rig works."""
    total_kb = total_mb * 1024
    caps = {"MemTotal": total_kb, "MemFree": total_kb * 6 // 10, "MemAvailable": total_kb * 7 // 10,
            "Cached": total_kb // 10, "Buffers": total_kb // 50, "SwapTotal": 0, "SwapFree": 0}
    lines = []
    for line in real.splitlines():
        key, _, rest = line.partition(":")
        value = rest.split()
        if key in caps:
            lines.append(f"{key + ':':<16}{caps[key]:>8} kB")
        elif value and value[-1] == "kB" and int(value[0]) > total_kb:
            lines.append(f"{key + ':':<16}{total_kb // 20:>8} kB")
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


# -- booting -------------------------------------------------------------------------


def nspawn_command(rig: Rig) -> list[str]:
    return [
        "systemd-nspawn",
        "--quiet",
        "--boot",
        # This machine's PID 1 is not systemd: no machined to register with, no unit to move to.
        "--register=no",
        "--keep-unit",
        f"--directory={rig.path / 'merged'}",
        f"--machine={rig.name}",
        f"--network-namespace-path=/run/netns/{rig.id}",
        # A namespace path does not grant this inside (unlike --private-network).
        "--capability=CAP_NET_ADMIN",
        # The tun device, as a rig's kernel has it: userspace WireGuard (wireguard-go) opens it (role tunnel).
        "--bind=/dev/net/tun",
        "--resolv-conf=off",
        "--timezone=off",
        "--link-journal=no",
        "--console=read-only",
    ]


def _start_supervisor(rig: Rig) -> None:
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    with open(rig.path / "console.log", "ab") as console:
        subprocess.Popen(
            [sys.executable, "-m", processes.SUPERVISOR_MODULE, str(rig.path)],
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C in the test terminal must not skip teardown
            env=env,
        )


def ssh_banner(address: str, port: int = 22, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(16).startswith(b"SSH-")
    except OSError:
        return False


def can_log_in(rig: Rig) -> bool:
    """sshd answers before boot ends; until systemd-user-sessions removes /run/nologin,
    logins fail.  Ready means: the test user logs in with its key and runs a command."""
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # the rig's key is brand new
    try:
        client.connect(rig.address, port=rig.port, username=rig.user, key_filename=rig.key_file,
                       timeout=2, banner_timeout=2, auth_timeout=2,
                       allow_agent=False, look_for_keys=False)
        _, out, _ = client.exec_command("test ! -e /run/nologin && echo ready", timeout=5)
        return out.read().strip() == b"ready"
    except (OSError, paramiko.SSHException, EOFError):
        return False
    finally:
        client.close()


def wait_ssh(rig: Rig, timeout: float = BOOT_TIMEOUT) -> None:
    """Wait until ``rig`` takes SSH logins.  The rig is judged, not its slot: once stopped, its slot (address, key
    path, directory) may hold another worker's rig, whose login and supervisor must not pass for this one's (a
    four-worker run: a stopped rig's wait logged into the rig that took its slot, and did not raise)."""
    deadline = time.monotonic() + timeout
    next_look = 0.0
    while time.monotonic() < deadline:
        banner = ssh_banner(rig.address, rig.port)
        up = bool(banner) and can_log_in(rig)
        if not _still_holds(rig) or not _supervisors(rig.path):
            raise SandboxError(f"rig {rig.name} ({rig.id}) stopped while booting: {_why_ended(rig)}")
        if up:
            return
        if banner and time.monotonic() >= next_look:
            next_look = time.monotonic() + SESSIONS_LOOK_S
            refused = _sessions_refused(rig)
            if refused:
                raise SandboxError(f"rig {rig.name} ({rig.id}) refuses logins for good: {refused}")
        time.sleep(0.1)
    raise SandboxError(
        f"rig {rig.name} ({rig.id}) not SSH-ready after {timeout:.0f}s (banner: "
        f"{ssh_banner(rig.address, rig.port)}): {console_tail(rig.path)} | inside: {_inside_state(rig)}"
    )


def _supervisors(rig_dir: Path) -> list[int]:
    """The rig's supervisor, judged on two looks half a second apart: a process in the middle of its exec has an
    empty /proc/PID/cmdline (the kernel sets the new command line's bounds after it switches to the new memory,
    and Popen's vfork parent runs on before that: here 298 of 300 looks right after Popen read empty), so a
    supervisor just started can be missed once, more often on loaded cores.  One look was a CI rehearsal's
    "stopped while booting: (empty end log)": a rig whose supervisor had written nothing, because it was
    starting, not ending."""
    found = processes.supervisor_pids(rig_dir)
    if not found:
        time.sleep(0.5)
        found = processes.supervisor_pids(rig_dir)
    return found


# A rig whose sshd answers but refuses logins is looked into this often: one whose systemd-user-sessions.service
# failed keeps /run/nologin (tmpfiles' "System is booting up"), so PAM refuses every login but root's until the
# boot timeout (seen about once a CI run, 2026-11-29/30, each a 45 s wait before the retry); said at once instead.
SESSIONS_LOOK_S = 3.0


def _inside(rig: Rig, script: str) -> subprocess.CompletedProcess[str] | None:
    """``script`` run by sh inside the rig, through its namespaces; None when nothing runs there."""
    inode = network.namespace_inode(rig.slot)
    pids = sorted(processes.pids_in_netns(inode)) if inode else []
    if not pids:
        return None
    return subprocess.run(["nsenter", "-t", str(pids[0]), "-m", "-p", "-n", "--", "sh", "-c", script],
                          capture_output=True, text=True, timeout=20)


def _sessions_refused(rig: Rig) -> str:
    """Why the rig will never take a login, when its systemd-user-sessions.service failed ("" otherwise): the
    unit's own journal, for the cause not yet known."""
    proc = _inside(rig, "systemctl is-failed --quiet systemd-user-sessions.service && "
                        "journalctl -b --no-pager -n 12 -u systemd-user-sessions.service")
    if proc is None or proc.returncode != 0:
        return ""
    said = " | ".join(proc.stdout.strip().splitlines())
    return f"systemd-user-sessions.service failed inside it (/run/nologin stays): {said}"


def _inside_state(rig: Rig) -> str:
    """What the rig's own systemd says, read through its namespaces (for a failed boot's report)."""
    proc = _inside(rig, "systemctl is-system-running; systemctl list-jobs --no-legend | head -n 5; "
                        "systemctl --failed --no-legend; "
                        "journalctl -b --no-pager -n 15 -u ssh -u systemd-logind -u systemd-user-sessions")
    if proc is None:
        return "no processes"
    return " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])


def _why_ended(rig: Rig) -> str:
    """What the rig's end log says (who asked it to stop, nspawn's exit, its console's last lines): its
    directory, console log included, is gone by the time its supervisor is.  Only ``rig``'s own section: a rig
    that took the slot since has written its own after it."""
    try:
        _, mark, after = end_log(rig.path).read_text(errors="replace").rpartition(taken_mark(rig) + "\n")
    except OSError:
        return f"(no end log) {console_tail(rig.path)}"
    if not mark:
        return f"(no section of its own in the end log) {console_tail(rig.path)}"
    own = [line.strip() for line in itertools.takewhile(lambda line: TAKEN not in line, after.splitlines())]
    return " | ".join(line for line in own if line) or f"(empty end log) {console_tail(rig.path)}"


def console_tail(rig_dir: Path, count: int = 5) -> str:
    try:
        lines = (rig_dir / "console.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no console log)"
    return " | ".join(lines[-count:]) or "(empty console log)"


def prepare(spec: RigSpec, base_rootfs: Path, owner_pid: int | None) -> Rig:
    flavour = flavours.load(spec.flavour)
    rig = _reserve(spec, owner_pid)
    try:
        root = _mount_overlay(rig, base_rootfs, flavour)
        _personalise(rig, root, flavour)
    except BaseException:
        teardown(rig.path)
        raise
    return rig


def boot(specs: Iterable[RigSpec], owner_pid: int | None = None) -> list[Rig]:
    """Boot rigs together and return them once every one answers on SSH.

    ``owner_pid``: when that process dies, its rigs tear themselves down.  A rig that is
    not login-ready in time is torn down and booted once more: rarely (a few times in
    hundreds of boots here) sshd answered but logins never completed; the first failure's
    diagnostic (the rig's own systemd state) is kept in ``boot_retries.log``.
    """
    image = base.ensure_base(cache_dir())
    wanted = list(specs)
    rigs: list[Rig] = []
    try:
        rigs = _boot_once(wanted, image.rootfs, owner_pid, BOOT_TIMEOUT / 2, allow_fail=True)
        failed = [i for i, r in enumerate(rigs) if r is None]
        if failed:
            retried = _boot_once([wanted[i] for i in failed], image.rootfs, owner_pid, BOOT_TIMEOUT,
                                 allow_fail=False)
            for i, r in zip(failed, retried, strict=True):
                rigs[i] = r
    except BaseException:
        for rig in rigs:
            if rig is not None:
                stop(rig)
        raise
    return rigs


def _boot_once(specs: list[RigSpec], base_rootfs: Path, owner_pid: int | None, timeout: float,
               allow_fail: bool) -> list[Rig]:
    rigs: list[Rig] = []
    try:
        for spec in specs:
            rigs.append(prepare(spec, base_rootfs, owner_pid))
        for rig in rigs:
            _start_supervisor(rig)
        errors: dict[int, SandboxError] = {}

        def waiter(i: int, r: Rig) -> None:
            try:
                wait_ssh(r, timeout)
            except SandboxError as exc:
                errors[i] = exc

        threads = [threading.Thread(target=waiter, args=(i, r)) for i, r in enumerate(rigs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    except BaseException:
        for rig in rigs:
            stop(rig)
        raise
    if errors and not allow_fail:
        for rig in rigs:
            stop(rig)
        raise next(iter(errors.values()))
    for i, exc in errors.items():
        with open(sandbox_root() / "boot_retries.log", "a") as log:
            log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {exc}\n")
        stop(rigs[i])
        rigs[i] = None  # type: ignore[call-overload]
    return rigs


# -- stopping ------------------------------------------------------------------------


def stop(rig: Rig | Path, timeout: float = 30.0, why: str = "", at_once: bool = False) -> None:
    """Shut a rig down cleanly (its supervisor powers it off), then make sure it is gone; ``at_once``: killed
    without the poweroff (a test's teardown).  Who asked, and ``why``, go in the rig's end log, so a rig stopped
    under a test that still waits for it says by whom."""
    rig_dir = rig.path if isinstance(rig, Rig) else rig
    if isinstance(rig, Rig) and not _still_holds(rig):
        return  # stopped already, and its slot is another rig's now: never stop that one
    sups = _supervisors(rig_dir)  # one just started too: missed, it would tear down a later rig of this slot
    if sups:
        asker = " ".join(processes.cmdline(os.getpid()))[:300]
        how = " at once" if at_once else ""
        note_end(rig_dir, f"stop{how} asked by pid {os.getpid()} ({asker}){': ' + why if why else ''}")
    processes.kill_all(sups, AT_ONCE if at_once else signal.SIGTERM)
    left = processes.wait_gone(sups, timeout)
    if left:
        processes.kill_all(left, signal.SIGKILL)
        processes.wait_gone(left, 5)
    if isinstance(rig, Rig) and not _still_holds(rig):
        # Its supervisor tore it down and freed the slot, and another worker's rig holds it already: a teardown of
        # the folder now would kill, unmount and remove that rig (a CI run: "could not unmount .../merged ()", the
        # new rig's root mounted there between this teardown's unmount and its check).
        return
    teardown(rig_dir)


def _still_holds(rig: Rig) -> bool:
    """Whether ``rig``'s directory is still ``rig``'s: a rig stopped twice (a test's own stop, then its fixture's)
    may find its slot taken by another worker's rig in between (a CI run: the second stop killed the other
    worker's new rig as it booted).  Read under the allocation lock, under which a slot is taken and its rig.json
    written: a directory without one then is a leftover of this rig's, and one whose rig.json names another owner
    or rig is not this rig's."""
    with _allocation_lock():
        try:
            now = Rig.from_dir(rig.path)
        except FileNotFoundError:
            return rig.path.exists()
        except (OSError, ValueError, TypeError):
            return True
    return (now.id, now.name, now.owner_pid, now.owner_start) == (rig.id, rig.name, rig.owner_pid, rig.owner_start)


def teardown(rig_dir: Path) -> None:
    """Remove every trace of one rig: processes, mount, veth, namespace, directory.

    Idempotent, and safe to run from the supervisor, from ``stop`` or from a sweep.
    """
    try:
        rig = Rig.from_dir(rig_dir)
        slot: int | None = rig.slot
    except (OSError, ValueError, TypeError):
        rig, slot = None, None
    if slot is not None:
        inode = network.namespace_inode(slot)
        if inode is not None:
            # Whatever still runs inside the rig's namespace is the rig's (we made it).
            processes.kill_all(processes.pids_in_netns(inode))
            processes.wait_gone(processes.pids_in_netns(inode), 10)
    merged = rig_dir / "merged"
    said = _unmount(merged)
    if slot is not None:
        with _allocation_lock():
            network.unplumb(slot)
    if _is_mounted(merged):
        raise SandboxError(f"could not unmount {merged} ({said}); left {rig_dir} in place")
    shutil.rmtree(rig_dir, ignore_errors=True)
    _remove_bridge_if_idle()


def _unmount(merged: Path, tries: int = 10, pause_s: float = 0.5) -> str:
    """Unmount the rig's root, a lazy unmount after a plain one fails; tried again while it is still listed (seen
    under a CI run's load: a rig whose nspawn had just ended still listed once both had run, and a destroy a moment
    later unmounted it).  Returns what umount last said ("" when it was not mounted or went)."""
    said = ""
    for attempt in range(tries):
        if not _is_mounted(merged):
            return ""
        if attempt:
            time.sleep(pause_s)
        plain = subprocess.run(["umount", str(merged)], capture_output=True, text=True)
        if plain.returncode != 0:
            lazy = subprocess.run(["umount", "--lazy", str(merged)], capture_output=True, text=True)
            said = f"umount: {plain.stderr.strip()}; umount --lazy: {lazy.stderr.strip() or lazy.returncode}"
    return said if _is_mounted(merged) else ""


def _is_mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts)


def _remove_bridge_if_idle() -> None:
    with _allocation_lock():
        if not any(rigs_dir().glob("*/rig.json")):
            network.remove_bridge()


def running() -> list[Rig]:
    found = []
    for rig_json in sorted(rigs_dir().glob("*/rig.json")):
        try:
            found.append(Rig.from_dir(rig_json.parent))
        except (OSError, ValueError, TypeError):
            continue
    return found


def sweep() -> list[str]:
    """Tear down rigs whose owner died or whose supervisor is gone; return their ids."""
    swept: list[str] = []
    if not rigs_dir().exists():
        return swept
    for rig_dir in sorted(p for p in rigs_dir().iterdir() if p.is_dir()):
        try:
            rig: Rig | None = Rig.from_dir(rig_dir)
        except (OSError, ValueError, TypeError):
            rig = None
        owner_dead = (
            rig is not None
            and rig.owner_pid is not None
            and not processes.is_alive(rig.owner_pid, rig.owner_start)
        )
        # A rig still being prepared has no supervisor yet: leave young ones alone.
        orphaned = not processes.supervisor_pids(rig_dir) and _age(rig_dir) > PREPARE_GRACE
        if owner_dead or orphaned:
            # The rig as read, not its folder: its supervisor may free the slot meanwhile, for another rig to take.
            stop(rig or rig_dir, why="swept: " + ("its owner died" if owner_dead else "no supervisor"))
            swept.append(rig_dir.name)
    return swept


# A rig still preparing on a loaded machine is no orphan: a Molecule create failed once, its overlay swept
# mid-prepare by a concurrent `up` (the grace was 60 s).
PREPARE_GRACE = 300.0


def _age(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except OSError:
        return 0.0
