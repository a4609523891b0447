"""``m2p keys install``: rigs that log in with a password (HiveOS: ``user``/``1``) get the controller's SSH key.

The password is used once, over the same SSH m2p uses everywhere (known hosts checked), to append the controller's
public key to the login user's ``~/.ssh/authorized_keys`` (one line, marked ``m2p-login``; a second run finds it
and changes nothing).  Then m2p logs in with the key alone (no password, no agent, no default keys), so "it
works" is proven, not assumed.  The password is never written anywhere: not in the command line, not in a file,
not in output.  The rig's own password stays as it is (m2p cannot know what else uses it); a HiveOS rig that still
takes HiveOS's default password is told to change it.

Under ``--accept-new`` a rig's host key is not yet known, and whatever answers first at its address would get the
typed password.  So m2p first looks without any password (into a scratch copy of known_hosts), asks the owner about
each new host key by its fingerprint, records only the keys the owner confirmed, and then sends the password with
known host keys checked strictly: a rig whose key was not confirmed gets no password.
"""

from __future__ import annotations

import base64
import dataclasses
import fcntl
import shlex
import tempfile
from collections.abc import Callable
from pathlib import Path

import paramiko

from miner2provider.core import checks
from miner2provider.core.inventory import Host
from miner2provider.detect.ssh import Result, SshOptions, fan_out, fingerprint, known_hosts_name
from miner2provider.fleet.pipeline import RigOutcome

COMMENT = "m2p-login"

# Asked once per host key m2p has not seen: (the rigs behind it, HOST or [HOST]:PORT, key type, SHA256
# fingerprint) -> whether the owner confirmed it is theirs.
Trust = Callable[[list[str], str, str, str], bool]


def public_line(pub_text: str) -> str:
    """The authorized_keys line for the controller's key (its own comment replaced by m2p's mark)."""
    return checks.ssh_public_key(pub_text, COMMENT)


def _install_script(line: str) -> str:
    quoted = shlex.quote(line)
    return ("set -eu\numask 077\nmkdir -p \"$HOME/.ssh\"\ntouch \"$HOME/.ssh/authorized_keys\"\n"
            f"if grep -qxF {quoted} \"$HOME/.ssh/authorized_keys\"; then echo present; "
            f"else printf '%s\\n' {quoted} >> \"$HOME/.ssh/authorized_keys\"; echo added; fi\n"
            "chmod 700 \"$HOME/.ssh\"\nchmod 600 \"$HOME/.ssh/authorized_keys\"\n")


def install(hosts: list[Host], line: str, key_file: str, opts: SshOptions,
            on_done: Callable[[Result], None] | None = None, trust: Trust | None = None) -> list[RigOutcome]:
    """Put ``line`` on every rig with its password, then log in with ``key_file`` alone.  Under ``accept_new``,
    each new host key is put to ``trust`` first (none trusted without it), and the password goes only to keys
    known or confirmed."""
    declined: dict[str, str] = {}
    if opts.accept_new:
        declined = _confirm_new_host_keys(hosts, opts, trust or (lambda *_: False))
        opts = dataclasses.replace(opts, accept_new=False)
    put = fan_out([h for h in hosts if h.name not in declined], _install_script(line), opts, on_done=on_done)
    said = {r.host.name: r for r in put}
    with_key = [dataclasses.replace(r.host, password=None, key_file=key_file) for r in put if r.ok and r.rc == 0]
    key_only = dataclasses.replace(opts, use_agent=False, look_for_keys=False)
    proven = {r.host.name: r for r in fan_out(with_key, "true\n", key_only)}
    out = []
    for host in hosts:
        if host.name in declined:
            out.append(RigOutcome(host.name, "failed", message=declined[host.name]))
            continue
        first = said[host.name]
        warned = "".join(f"; {w}" for w in first.warnings if "default login" in w)
        if not first.ok:
            out.append(RigOutcome(host.name, "unreachable", message=(first.error or "no answer") + warned))
        elif first.rc != 0:
            out.append(RigOutcome(host.name, "failed", message=f"could not write ~/.ssh/authorized_keys "
                                                              f"(exit {first.rc}){warned}"))
        elif not proven[host.name].ok:
            out.append(RigOutcome(host.name, "failed", message=(
                f"the key is there, but key login failed ({proven[host.name].error}): does sshd allow keys "
                f"(PubkeyAuthentication)?{warned}")))
        elif first.stdout.strip().endswith("added"):
            out.append(RigOutcome(host.name, "changed", 1, "key added; key login works" + warned))
        else:
            out.append(RigOutcome(host.name, "converged", message="key already there; key login works" + warned))
    return out


def _confirm_new_host_keys(hosts: list[Host], opts: SshOptions, trust: Trust) -> dict[str, str]:
    """Learn the host keys m2p has not seen, without a password, ask ``trust`` about each, and record the ones
    confirmed in ``opts.known_hosts``.  rig -> why it gets no password (its key, or its jump host's, declined)."""
    with tempfile.TemporaryDirectory(prefix="m2p-host-keys-") as scratch:
        seen = Path(scratch) / "known_hosts"
        before = opts.known_hosts.read_bytes() if opts.known_hosts.is_file() else b""
        seen.write_bytes(before)
        # No password, and no try of a mining OS's default one either: only the host key is wanted here.
        bare = [dataclasses.replace(h, password=None, become_password=None,
                                    vars={**h.vars, "m2p_check_default_password": False}) for h in hosts]
        fan_out(bare, "true\n", dataclasses.replace(opts, known_hosts=seen))
        new = seen.read_bytes()[len(before):].decode(errors="replace").splitlines()
    behind: dict[str, list[str]] = {}
    for host in hosts:
        behind.setdefault(known_hosts_name(host), []).append(host.name)
        if host.jump is not None:
            behind.setdefault(known_hosts_name(host.jump), []).append(host.name)
    confirmed, declined = [], {}
    for entry in new:
        where, key_type, blob = entry.split()  # as m2p's own policy wrote it: NAME TYPE BASE64
        printed = fingerprint(paramiko.PKey.from_type_string(key_type, base64.b64decode(blob)))
        if trust(behind.get(where, []), where, key_type, printed):
            confirmed.append(entry)
        else:
            declined.update({name: f"the new host key at {where} ({key_type} {printed}) was not confirmed: no "
                                   "password sent" for name in behind.get(where, [])})
    if confirmed:
        opts.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(opts.known_hosts, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # other m2p processes may append too
            f.write("".join(entry + "\n" for entry in confirmed))
    return declined
