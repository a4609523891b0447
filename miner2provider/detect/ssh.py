"""SSH fan-out with paramiko: one connection and one command per rig, in a bounded pool.

- Host keys follow OpenSSH's ``accept-new`` idea: a rig whose key is unknown is refused
  unless ``accept_new`` is set (then its key is recorded); a changed key is always
  refused, with the ``ssh-keygen -R`` remedy.
- Every failure becomes one sentence (``classify``); one failing rig never stops the others.
- Secrets never reach a message: ``redact`` scrubs any that an exception might carry.

The pool is capped (default 32): paramiko with a thread per rig at 1,000 rigs lost rigs
to "No existing session" errors in our measurements (benchmarks/detect_fanout.py).
"""

from __future__ import annotations

import copy
import errno
import fcntl
import getpass
import logging
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko

from miner2provider.core import textfiles
from miner2provider.core.errors import UsageError
from miner2provider.core.inventory import Host, Jump, Secret

DEFAULT_POOL = 32

# Logins mining OSes ship with (HiveOS: user/1, per hiveos-linux).
DEFAULT_LOGINS = (("user", "1", "HiveOS"),)


@dataclass(frozen=True)
class SshOptions:
    known_hosts: Path = field(default_factory=lambda: Path.home() / ".ssh" / "known_hosts")
    accept_new: bool = False
    connect_timeout: float = 10.0
    command_timeout: float = 60.0
    pool_size: int = DEFAULT_POOL
    use_agent: bool = True
    look_for_keys: bool = True  # ~/.ssh/id_* like OpenSSH


@dataclass(frozen=True)
class Result:
    host: Host
    stdout: str = ""
    rc: int | None = None
    failure: str | None = None  # dns | refused | timeout | unreachable | auth | host-key-changed | ...
    error: str | None = None  # the sentence shown to the user
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.failure is None


class UnknownHostKey(paramiko.SSHException):
    def __init__(self, fingerprint: str, key_type: str) -> None:
        super().__init__(f"unknown host key {key_type} {fingerprint}")
        self.fingerprint = fingerprint
        self.key_type = key_type


class RevokedHostKey(paramiko.SSHException):
    def __init__(self, fingerprint: str, key_type: str) -> None:
        super().__init__(f"revoked host key {key_type} {fingerprint}")
        self.fingerprint = fingerprint
        self.key_type = key_type


class CommandTimeout(Exception):
    """The rig did not finish within the command's total deadline (however slowly it kept sending)."""


class OutputTooLarge(Exception):
    """The rig sent more than MAX_OUTPUT bytes (stdout and stderr together)."""


# A probe's report is ~100 KB on a 13-card rig; a rig sending far more is broken or hostile, and 1,000
# rigs' output is held at once during a sweep.
MAX_OUTPUT = 8 << 20
# How often a channel that has ended is looked at for its exit status (the status follows the end at once).
POLL_S = 1.0


class KnownHosts(paramiko.HostKeys):
    """The known_hosts file as OpenSSH reads it: what m2p cannot use is skipped with a note
    (``skipped``: file:line and why), and ``@revoked`` keys are refused for every host."""

    def __init__(self) -> None:
        super().__init__()
        self.skipped: list[str] = []
        self.revoked: set[str] = set()  # base64 key blobs
        # What add() recorded, by host name then key type: keys_of's index (add replaces a name's key of a type).
        self._by_name: dict[str, dict[str, paramiko.PKey]] = {}
        self._hashed = False

    def add(self, hostname: str, keytype: str, key: paramiko.PKey) -> None:
        super().add(hostname, keytype, key)
        self._by_name.setdefault(hostname, {})[keytype] = key
        self._hashed = self._hashed or hostname.startswith("|1|")

    def keys_of(self, name: str) -> dict[str, paramiko.PKey]:
        """``lookup(name)`` as a plain dictionary, key type -> key.  ``lookup`` reads every entry, O(rigs) for each
        rig of a fan-out; this is one dictionary read, unless the file holds hashed names (``|1|...``), which only
        ``lookup``'s hashing finds."""
        if self._hashed:
            found = self.lookup(name)
            return {key_type: found[key_type] for key_type in found} if found else {}
        return dict(self._by_name.get(name, {}))

    def read(self, path: Path) -> None:
        entries = []
        # 3 keys of ~200 bytes per rig: 16 MiB is 25,000 rigs; a bigger "known_hosts" is not one.
        data = textfiles.read_bytes(path, "known_hosts file", UsageError, limit=16 << 20)
        for number, raw in enumerate(data.splitlines(), 1):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                self.skipped.append(f"{where}: not UTF-8, skipped")
                continue
            if not line or line.startswith("#"):
                continue
            if line.startswith("@"):
                marker, _, rest = line.partition(" ")
                fields = rest.split()
                if marker == "@revoked" and len(fields) >= 3:
                    self.revoked.add(fields[2])
                elif marker == "@cert-authority":
                    self.skipped.append(f"{where}: @cert-authority line skipped (m2p does not check host certificates)")
                else:
                    self.skipped.append(f"{where}: {marker} line not understood, skipped")
                continue
            try:
                entry = paramiko.hostkeys.HostKeyEntry.from_line(line, number)
            except Exception:  # noqa: BLE001 - a truncated or damaged key: OpenSSH skips the line too
                entry = None
            if entry is None:
                self.skipped.append(f"{where}: unreadable or unsupported key, skipped")
            else:
                entries.append(entry)
        # OpenSSH: a revoked key is never trusted, even where a line lists it for the host.
        for entry in entries:
            if entry.key.get_base64() not in self.revoked:
                for name in entry.hostnames:  # hashed names (|1|...) stay hashed: lookup hashes to compare
                    self.add(name, entry.key.get_name(), entry.key)


def fingerprint(key: paramiko.PKey) -> str:
    return key.fingerprint  # "SHA256:..." as OpenSSH prints it


def known_hosts_name(host: Host | Jump) -> str:
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


class JumpFailed(Exception):
    """The jump host could not be reached or logged into (``cause`` says why)."""

    def __init__(self, jump: Jump, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.jump, self.cause = jump, cause


class KeyFiles:
    """The private key files a fan-out logs in with, each read once for all its rigs (paramiko reads the file for
    every connection, trying it as each key type in turn: three reads for an Ed25519 key)."""

    def __init__(self) -> None:
        self._read: dict[tuple[str, type, str | None], paramiko.PKey | paramiko.SSHException] = {}

    def read(self, slot: tuple[str, type, str | None], load: Callable[[], paramiko.PKey]) -> paramiko.PKey:
        """``load()``'s key for ``slot`` (file, key type, passphrase), or its SSHException again."""
        found = self._read.get(slot)
        if found is None:
            try:
                found = load()
            except paramiko.SSHException as exc:  # not a key of this type, or locked: paramiko tries the next
                found = exc
            self._read[slot] = found
        if isinstance(found, paramiko.SSHException):
            raise copy.copy(found)
        return found


class _JumpedClient(paramiko.SSHClient):
    """A rig's client whose socket is a channel through a jump host's client: closed together."""

    jump_client: paramiko.SSHClient | None = None
    key_files: KeyFiles | None = None

    def close(self) -> None:
        super().close()
        if self.jump_client is not None:
            self.jump_client.close()

    def _key_from_filepath(self, filename: str, klass: type, password: str | None) -> paramiko.PKey:
        load = super()._key_from_filepath  # type: ignore[misc]
        if self.key_files is None:
            return load(filename, klass, password)  # type: ignore[no-any-return]
        return self.key_files.read((filename, klass, password), lambda: load(filename, klass, password))


class _Transport(paramiko.Transport):
    """paramiko's Transport, cheaper per rig where paramiko spends CPU in Python for nothing m2p uses
    (benchmarks/detect_fanout.py --profile):

    - AES-GCM first among its ciphers (the server still picks from all of them): a GCM packet is checked by the
      cipher, in C, where the default AES-CTR's HMAC is compared byte by byte in Python (a tenth of a fan-out's CPU);
    - the server's debug message (OpenSSH sends one at each login: the key's options) is made readable, byte by
      byte, only when paramiko's debug log is on (a twentieth);
    - its thread looks at a quiet connection once a second, not ten times (a probe keeps the connection quiet for
      seconds on a busy rig, and each look costs a wake-up and the interpreter's lock: a sixth of the fan-out's CPU
      under load).  A banner or key exchange that never comes is then given up to a second more than the connect
      timeout; closing is not slowed (paramiko does not wait for the thread)."""

    _active_check_timeout = POLL_S

    def __init__(self, sock: Any, **kwargs: Any) -> None:
        super().__init__(sock, **kwargs)
        security = self.get_security_options()
        security.ciphers = tuple(sorted(security.ciphers, key=lambda name: "-gcm@" not in name))  # stable otherwise

    def _parse_debug(self, m: paramiko.Message) -> None:
        if self.logger.isEnabledFor(logging.DEBUG):
            super()._parse_debug(m)  # type: ignore[misc]


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    """Unknown key: record it (accept-new) or refuse it.  Changed keys never get here:
    paramiko raises BadHostKeyException when a recorded key differs."""

    _lock = threading.Lock()

    def __init__(self, path: Path, accept_new: bool, revoked: set[str]) -> None:
        self.path = path
        self.accept_new = accept_new
        self.revoked = revoked

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if key.get_base64() in self.revoked:  # before any login: a revoked key never gets a password
            raise RevokedHostKey(fingerprint(key), key.get_name())
        if not self.accept_new:
            raise UnknownHostKey(fingerprint(key), key.get_name())
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.path, "a") as f:
                fcntl.flock(f, fcntl.LOCK_EX)  # other m2p processes may append too
                f.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)


MASK = "********"
WHOLE_ONLY = 8  # a secret shorter than this is masked only where it stands alone
_WORD_CHAR = re.compile(r"\w")


def redact(text: str, secrets: Iterable[Secret | None]) -> str:
    """``text`` with every secret masked.  A long secret is masked wherever it appears; a short one (HiveOS's
    default password is ``1``) only as a whole word, so ``10.0.0.1`` stays an address instead of turning into
    ``********0.0.0.********`` (which would garble the line and tell the reader the password)."""
    for secret in sorted((s.reveal() for s in secrets if s is not None and s.reveal()), key=len, reverse=True):
        text = text.replace(secret, MASK) if len(secret) >= WHOLE_ONLY else _mask_whole(text, secret)
    return text


def _mask_whole(text: str, secret: str) -> str:
    """``text`` with ``secret`` masked wherever it is a whole word: where it cuts no word at either end.  A word is
    a run of word characters, with a ``.`` or ``-`` inside it only between two of them (``10.0.0.1``, ``rig-1``):
    so a secret at the end of a sentence (``1.``), before a dash and a space, or ending in punctuation before a
    letter is still the secret, and masked."""
    out, start, at = [], 0, text.find(secret)
    while at >= 0:
        end = at + len(secret)
        if not _in_one_word(text, at) and not _in_one_word(text, end):
            out += [text[start:at], MASK]
            start = end
            at = text.find(secret, end)
        else:
            at = text.find(secret, at + 1)
    return "".join(out) + text[start:]


def _in_one_word(text: str, cut: int) -> bool:
    """The characters either side of position ``cut`` belong to one word (as ``_mask_whole`` counts words)."""
    if cut <= 0 or cut >= len(text):
        return False
    before, after = text[cut - 1], text[cut]
    if _is_word(before) and _is_word(after):
        return True
    if _is_word(before) and after in ".-":  # a dot or dash joins only where a word character follows it
        return cut + 1 < len(text) and _is_word(text[cut + 1])
    if before in ".-" and _is_word(after):
        return cut >= 2 and _is_word(text[cut - 2])
    return False


def _is_word(char: str) -> bool:
    return _WORD_CHAR.match(char) is not None


def classify(exc: BaseException, host: Host, opts: SshOptions) -> tuple[str, str]:
    """(failure class, sentence) for an exception raised while reaching ``host``."""
    if isinstance(exc, JumpFailed):
        jump = exc.jump
        hop = Host(name=jump.name, address=jump.address, port=jump.port, user=jump.user, key_file=jump.key_file,
                   password=None, become_password=None, groups=(), vars={})
        kind, sentence = classify(exc.cause, hop, opts)
        return kind, f"jump host {jump.name}: {sentence}"
    if isinstance(exc, paramiko.ChannelException):
        via = f" through jump host {host.jump.name}" if host.jump else ""
        return "unreachable", f"cannot connect to {host.address}:{host.port}{via}: {exc.text or exc}"
    target = f"{host.address}:{host.port}"
    user = host.user or getpass.getuser()
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        inner = next(iter(exc.errors.values()), None)
        if not isinstance(inner, ConnectionRefusedError):
            return "unreachable", f"cannot connect to {target}: {inner}"
        exc = inner
    if isinstance(exc, socket.gaierror):
        return "dns", f"cannot resolve host name {host.address!r}: check ansible_host or DNS"
    if isinstance(exc, paramiko.BadHostKeyException):
        return "host-key-changed", (
            f"host key for {target} has CHANGED (now {fingerprint(exc.key)}): the rig was reinstalled, or "
            f"someone is intercepting the connection. If you trust the new key, run: "
            f'ssh-keygen -f "{opts.known_hosts}" -R "{known_hosts_name(host)}"'
        )
    if isinstance(exc, RevokedHostKey):
        return "host-key-revoked", (
            f"host key for {target} ({exc.key_type} {exc.fingerprint}) is marked @revoked in {opts.known_hosts}: "
            "refused"
        )
    if isinstance(exc, UnknownHostKey):
        return "host-key-unknown", (
            f"unknown host key for {target} ({exc.key_type} {exc.fingerprint}): check it, then run again with "
            f"--accept-new to trust and record it in {opts.known_hosts}"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        tried = [w for w, on in (("key", bool(host.key_file) or opts.look_for_keys), ("agent", opts.use_agent),
                                 ("password", host.password is not None)) if on]
        return "auth", f"authentication failed for user {user!r} (tried {', '.join(tried)})"
    if isinstance(exc, paramiko.SSHException) and "No authentication methods available" in str(exc):
        # paramiko's words when it had neither a key, an agent nor a password to offer
        return "auth", (f"no way to log in as {user!r}: no key file, no agent key and no password; set "
                        "ansible_ssh_private_key_file, or m2p_ssh_password_env (then `m2p keys install` puts a key "
                        "on the rig)")
    if isinstance(exc, ConnectionRefusedError):  # OSError(ECONNREFUSED) is one too
        return "refused", f"connection refused on {target}: is sshd running, and is the port right?"
    if isinstance(exc, CommandTimeout):
        return "command-timeout", f"probe did not finish within {opts.command_timeout:g}s on {target}"
    if isinstance(exc, OutputTooLarge):
        return "output-too-large", f"{target} sent more than {MAX_OUTPUT >> 20} MiB of output: refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout", f"no answer from {target} within {opts.connect_timeout:g}s: rig off, or firewalled?"
    if isinstance(exc, OSError) and exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "unreachable", f"no route to {target}: is the rig on this network?"
    if isinstance(exc, (paramiko.SSHException, EOFError)):
        return "ssh", f"SSH failed on {target}: {exc or type(exc).__name__}"
    return "error", f"{type(exc).__name__} on {target}: {exc}"


def load_known_hosts(opts: SshOptions) -> KnownHosts:
    """Parsed once per fan-out: re-reading the file for each of N rigs costs O(N^2)."""
    keys = KnownHosts()
    if opts.known_hosts.is_file():
        keys.read(opts.known_hosts)
    return keys


def _checked_client(target: Host | Jump, opts: SshOptions, known: KnownHosts,
                    key_files: KeyFiles | None = None) -> _JumpedClient:
    """A client that checks the server's key against ``target``'s known_hosts entries only."""
    client = _JumpedClient()
    client.key_files = key_files
    name = known_hosts_name(target)
    for key_type, key in known.keys_of(name).items():
        client.get_host_keys().add(name, key_type, key)
    client.set_missing_host_key_policy(_KnownHostsPolicy(opts.known_hosts, opts.accept_new, known.revoked))
    return client


def _through(jump: Jump, host: Host, opts: SshOptions, known: KnownHosts,
             key_files: KeyFiles | None = None) -> tuple[paramiko.SSHClient, Any]:
    """Log in to the jump host (its key checked like a rig's; keys and agent only: a jump host's
    password is never asked for) and open a tunnel to the rig's SSH port."""
    client = _checked_client(jump, opts, known, key_files)
    try:
        client.connect(jump.address, port=jump.port, username=jump.user or getpass.getuser(),
                       key_filename=jump.key_file, timeout=opts.connect_timeout,
                       banner_timeout=opts.connect_timeout, auth_timeout=opts.connect_timeout,
                       allow_agent=opts.use_agent, look_for_keys=opts.look_for_keys, transport_factory=_Transport)
    except BaseException as exc:
        client.close()
        raise JumpFailed(jump, exc) from exc
    transport = client.get_transport()
    assert transport is not None  # connected
    try:
        channel = transport.open_channel("direct-tcpip", (host.address, host.port), ("127.0.0.1", 0),
                                         timeout=opts.connect_timeout)
    except BaseException:
        client.close()
        raise
    return client, channel


def _connect(host: Host, opts: SshOptions, username: str, password: str | None,
             known: KnownHosts, use_keys: bool = True, key_files: KeyFiles | None = None) -> paramiko.SSHClient:
    client = _checked_client(host, opts, known, key_files)
    sock = None
    if host.jump is not None:
        client.jump_client, sock = _through(host.jump, host, opts, known, key_files)
    try:
        client.connect(
            host.address, port=host.port, username=username, password=password,
            key_filename=host.key_file if use_keys else None,
            timeout=opts.connect_timeout, banner_timeout=opts.connect_timeout,
            auth_timeout=opts.connect_timeout,
            allow_agent=opts.use_agent and use_keys, look_for_keys=opts.look_for_keys and use_keys,
            sock=sock, transport_factory=_Transport,
        )
    except BaseException:
        client.close()
        raise
    return client


def _execute(client: paramiko.SSHClient, stdin_text: str, command: str, timeout: float,
             limit: int = MAX_OUTPUT) -> tuple[str, int]:
    """Run ``command`` with ``stdin_text`` as its input: its stdout and exit status, within ``timeout``
    seconds in all (a deadline, not a per-read timeout: a rig sending a byte a second fails too) and at
    most ``limit`` bytes of output (stderr is read and counted, never kept)."""
    deadline = time.monotonic() + timeout
    transport = client.get_transport()
    if transport is None:
        raise paramiko.SSHException("the connection closed before the command started")
    try:
        chan = transport.open_session(timeout=timeout)
    except paramiko.SSHException as exc:
        if time.monotonic() >= deadline:
            raise CommandTimeout() from exc
        raise
    try:
        chan.settimeout(timeout)
        chan.exec_command(command)
        chan.sendall(stdin_text.encode())
        chan.shutdown_write()
        out, seen, at_eof = bytearray(), 0, False
        wake = select.poll()  # poll, not select: a fan-out's descriptors may pass select's 1,024
        wake.register(chan.fileno(), select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommandTimeout()
            if at_eof:
                chan.status_event.wait(min(left, POLL_S))
            else:
                # The channel's descriptor wakes on stdout, on stderr and on the end alike: a flood on either is read
                # as fast as it comes (each read opens the window for more), a quiet probe costs no wake-ups.
                wake.poll(left * 1000)
                ended = chan.eof_received or chan.closed  # before reading: what came before the end is buffered
                while chan.recv_ready():
                    data = chan.recv(1 << 16)
                    out += data
                    seen += len(data)
                    if seen > limit:
                        raise OutputTooLarge()
                at_eof = bool(ended)
            while chan.recv_stderr_ready():
                seen += len(chan.recv_stderr(1 << 16))
            if seen > limit:
                raise OutputTooLarge()
            if at_eof and chan.exit_status_ready() and not chan.recv_stderr_ready():
                return out.decode(errors="replace"), chan.recv_exit_status()
    except TimeoutError as exc:
        raise CommandTimeout() from exc
    finally:
        chan.close()


def _default_login_warning(host: Host, opts: SshOptions, known: KnownHosts) -> str | None:
    """After a failed login: does the rig still take its mining OS's default login?"""
    for user, password, os_name in DEFAULT_LOGINS:
        try:
            _connect(host, opts, user, password, known, use_keys=False).close()
        except Exception:  # noqa: BLE001 - any failure means the default does not work
            continue
        return (f"rig still accepts {os_name}'s default login (user {user!r} with {os_name}'s default password): "
                "change that password (anyone on the network can log in)")
    return None


def run_one(host: Host, script: str, opts: SshOptions, known: KnownHosts | None = None,
            command: str = "sh -s", file_notes: bool = True, key_files: KeyFiles | None = None) -> Result:
    """``file_notes``: report the known_hosts lines skipped (a fan-out reports them once); ``known`` and
    ``key_files``: what a fan-out reads once for all its rigs."""
    known = load_known_hosts(opts) if known is None else known
    username = host.user or getpass.getuser()
    password = host.password.reveal() if host.password else None
    warnings: list[str] = list(known.skipped) if file_notes else []
    for user, default_pw, os_name in DEFAULT_LOGINS:
        if username == user and password == default_pw:
            warnings.append(f"inventory uses {os_name}'s default login (user {user!r} with {os_name}'s default "
                            "password): change it on the rig")
    try:
        client = _connect(host, opts, username, password, known, key_files=key_files)
        try:
            stdout, rc = _execute(client, script, command, opts.command_timeout)
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - every failure becomes a sentence for this rig only
        failure, sentence = classify(exc, host, opts)
        if failure == "auth" and host.var("m2p_check_default_password", True):
            warning = _default_login_warning(host, opts, known)
            if warning:
                warnings.append(warning)
        return Result(host, failure=failure, error=redact(sentence, [host.password, host.become_password]),
                      warnings=tuple(warnings))
    return Result(host, stdout=stdout, rc=rc, warnings=tuple(warnings))


def fan_out(hosts: list[Host], script: str | Callable[[Host], str], opts: SshOptions,
            on_done: Callable[[Result], None] | None = None) -> list[Result]:
    """Run ``script`` (or ``script(host)``) on every host, at most ``opts.pool_size`` at once;
    results in host order."""
    if not hosts:
        return []
    workers = max(1, min(opts.pool_size, len(hosts)))
    known = load_known_hosts(opts)
    key_files = KeyFiles()

    def task(host: Host) -> Result:
        result = run_one(host, script(host) if callable(script) else script, opts, known,
                         file_notes=host is hosts[0], key_files=key_files)
        if on_done:
            on_done(result)
        return result

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="m2p-ssh") as pool:
        return list(pool.map(task, hosts))

