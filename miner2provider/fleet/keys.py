"""``m2p keys install``: rigs that log in with a password (HiveOS: ``user``/``1``) get the controller's SSH key.

The password is used once, over the same SSH m2p uses everywhere (known hosts checked), to append the controller's
public key to the login user's ``~/.ssh/authorized_keys`` (one line, marked ``m2p-login``; a second run finds it
and changes nothing).  Then m2p logs in with the key alone (no password, no agent, no default keys), so "it
works" is proven, not assumed.  The password is never written anywhere: not in the command line, not in a file,
not in output.  The rig's own password stays as it is (m2p cannot know what else uses it); a HiveOS rig that still
takes HiveOS's default password is told to change it.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable

from miner2provider.core import checks
from miner2provider.core.inventory import Host
from miner2provider.detect.ssh import Result, SshOptions, fan_out
from miner2provider.fleet.pipeline import RigOutcome

COMMENT = "m2p-login"


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
            on_done: Callable[[Result], None] | None = None) -> list[RigOutcome]:
    """Put ``line`` on every rig with its password, then log in with ``key_file`` alone."""
    put = fan_out(hosts, _install_script(line), opts, on_done=on_done)
    said = {r.host.name: r for r in put}
    with_key = [dataclasses.replace(r.host, password=None, key_file=key_file) for r in put if r.ok and r.rc == 0]
    key_only = dataclasses.replace(opts, use_agent=False, look_for_keys=False)
    proven = {r.host.name: r for r in fan_out(with_key, "true\n", key_only)}
    out = []
    for host in hosts:
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
