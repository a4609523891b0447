"""``m2p keys install``: from password logins to the controller's key (fleet/keys.py); this module reads options,
asks and prints."""

from __future__ import annotations

import dataclasses
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import click

from miner2provider.core.errors import UsageError
from miner2provider.core.inventory import Host, Secret
from miner2provider.detect.ssh import SshOptions
from miner2provider.fleet import keys

from . import render
from .app import Context, cli, pass_ctx
from .fleet import raise_failures
from .options import (
    confirm,
    inventory_option,
    json_option,
    limit_option,
    load_inventory,
    password_from_env,
    ssh_options,
    vault_option,
    yes_option,
)

DEFAULT_KEY = "~/.ssh/id_ed25519"


@cli.group("keys")
def keys_group() -> None:
    """SSH keys for the rigs."""


@keys_group.command("install")
@inventory_option()
@limit_option
@click.option("--key", "key_path", default=DEFAULT_KEY, show_default=True,
              help="The controller's private key (its .pub goes to the rigs); made with ssh-keygen if missing.")
@click.option("--password-env", metavar="VAR", help="An environment variable holding the login password of rigs "
              "the inventory gives none (default: ask once).")
@yes_option
@vault_option
@json_option
@ssh_options
@pass_ctx
def keys_install(ctx: Context, inventory_file: str, limit: str | None, key_path: str, password_env: str | None,
                 yes: bool, vault_password_file: str | None, as_json: bool, ssh: SshOptions) -> None:
    """Log in once with each rig's password and let the controller's key in (one authorized_keys line for the login
    user), then prove key login works.  The password comes from the inventory (m2p_ssh_password_env), an
    environment variable or a prompt, never the command line, and is written nowhere.  With --accept-new, each new
    host key is shown by its fingerprint and asked about at the terminal first (--yes does not answer that): the
    password goes only to host keys known or confirmed."""
    hosts = load_inventory(inventory_file, vault_password_file).select(limit)
    key = Path(key_path).expanduser()
    if not key.exists():
        if not yes:
            confirm(f"{key} does not exist: make a new key pair there (ssh-keygen -t ed25519)?")
        _make_key(key)
    try:
        line = keys.public_line(Path(str(key) + ".pub").read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{key}.pub: {getattr(exc, 'strerror', None) or exc}") from None
    hosts = _with_passwords(hosts, password_env)
    if not yes:
        confirm(f"let {key.name} log in to {render.counted(len(hosts), 'rig')}?")
    outcomes = keys.install(hosts, line, str(key), ssh, trust=_trust_new_host_key)
    render.outcomes(outcomes, as_json, show_tasks=False)
    if not as_json and any(not o.failed for o in outcomes):
        ctx.note(f"Key login works.  In the inventory, for these rigs: ansible_ssh_private_key_file: {key_path}; "
                 "take m2p_ssh_password_env away (keep m2p_become_password_env if sudo asks for the password).")
    raise_failures(outcomes)


def _with_passwords(hosts: list[Host], password_env: str | None) -> list[Host]:
    """Each rig with the password it logs in with: the inventory's, else one from --password-env or a prompt."""
    lacking = [h for h in hosts if h.password is None]
    if not lacking:
        return hosts
    secret = password_from_env(password_env)
    if secret is None and sys.stdin.isatty():
        secret = Secret(click.prompt(f"login password for {', '.join(h.name for h in lacking[:5])}"
                                     f"{', ...' if len(lacking) > 5 else ''}", hide_input=True, err=True))
    elif secret is None:
        raise UsageError(f"{lacking[0].name} has no password in the inventory and there is no terminal to ask: "
                         "pass --password-env VAR")
    return [dataclasses.replace(h, password=secret) if h.password is None else h for h in hosts]


def _trust_new_host_key(rigs: list[str], where: str, key_type: str, fingerprint: str) -> bool:
    """One question per new host key: a password goes to it next, so --yes does not answer this one."""
    names = ", ".join(rigs) or where
    if not sys.stdin.isatty():
        raise UsageError(f"{names}: new host key at {where} ({key_type} {fingerprint}), and there is no terminal to "
                         "confirm it: keys install sends a password, so it sends none to a host key nobody checked. "
                         "Run it at a terminal, or record the key first (ssh to the rig once, compare the fingerprint)")
    return click.confirm(f"{names}: new host key at {where}, {key_type} {fingerprint}.  Is it the rig's (on the rig: "
                         "ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub)?  The password goes to it next", default=False,
                         err=True)


def _make_key(key: Path) -> None:
    if shutil.which("ssh-keygen") is None:
        raise UsageError("ssh-keygen is missing: install OpenSSH's client (apt-get install openssh-client)")
    key.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    made = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"m2p@{socket.gethostname()}",
                           "-f", str(key)], capture_output=True, text=True)
    if made.returncode != 0:
        raise UsageError(f"ssh-keygen could not make {key}: {made.stderr.strip()[:200]}")
