"""Options shared by several commands, declared once, and the settings objects they fold into.

A command takes ``ssh: SshOptions`` or ``fleet: FleetSettings`` instead of a dozen loose
parameters: ``@ssh_options`` and ``@fleet_options`` add the Click options and hand the
command one object built from them.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from miner2provider.core import inventory, textfiles
from miner2provider.core.errors import UsageError
from miner2provider.detect.ssh import DEFAULT_POOL, SshOptions
from miner2provider.fleet import guards as leases

from . import render

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

INVENTORY_HELP = "Rig inventory (Ansible YAML).  Default: $M2P_INVENTORY, then ./rigs.yml."
DEFAULT_INVENTORY = "rigs.yml"  # what `m2p init` writes


def find_inventory(given: str | None) -> str:
    """The inventory every command uses: -i (or FILE), then $M2P_INVENTORY (click reads it into -i), then
    ./rigs.yml."""
    if given:
        return given
    if os.environ.get("M2P_INVENTORY"):
        return os.environ["M2P_INVENTORY"]
    if Path(DEFAULT_INVENTORY).is_file():
        return DEFAULT_INVENTORY
    raise UsageError(f"no inventory: pass -i FILE, set M2P_INVENTORY, or run m2p where {DEFAULT_INVENTORY} is "
                     "(`m2p init` writes one)")


def password_from_env(variable: str | None) -> inventory.Secret | None:
    """A password named by an environment variable (--password-env VAR: never on the command line itself)."""
    if not variable:
        return None
    if variable not in os.environ:
        raise UsageError(f"the environment variable {variable} is not set (it should hold the password)")
    return inventory.Secret(os.environ[variable])


def load_inventory(file: str, vault_password_file: str | None) -> inventory.Inventory:
    """The inventory, its warnings (a plain-text password) shown on stderr before any work."""
    inv = inventory.load(file, vault_password_file, rig_check=marketplace_rules)
    render.warnings(inv.warnings)
    return inv


def marketplace_rules(name: str, settings: Mapping[str, Any]) -> Sequence[tuple[str, str]]:
    """The rigs' marketplaces' rules on their settings (market.rig_settings_problems), the marketplaces loaded only
    for a rig whose settings they have a rule on (time slices): detect and its peers start without them."""
    if settings.get("m2p_time_slicing_replicas", 1) in (None, 0, 1):
        return ()
    from miner2provider import market

    return market.rig_settings_problems(name, settings)


def inventory_option(required: bool = True, help: str = INVENTORY_HELP) -> Decorator:
    """-i FILE.  ``required``: the command always needs one, so it falls back to $M2P_INVENTORY, then ./rigs.yml;
    otherwise (detect --local, pricing --from) the command decides with ``find_inventory``."""

    def found(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        return find_inventory(value) if required else value

    return click.option("-i", "--inventory", "inventory_file", type=click.Path(dir_okay=False),
                        envvar="M2P_INVENTORY", help=help, callback=found)


limit_option = click.option("--limit", "-l", help="Only these hosts or groups (comma-separated).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
vault_option = click.option(
    "--vault-password-file", type=click.Path(exists=True, dir_okay=False), envvar="M2P_VAULT_PASSWORD_FILE",
    help="Decrypts !vault values in the inventory.  [env M2P_VAULT_PASSWORD_FILE]")
bundle_option = click.option(
    "--bundle", type=click.Path(file_okay=False), envvar="M2P_BUNDLE",
    help="Install from this offline bundle (made by `m2p bundle`) instead of the vendors' sites.  [env M2P_BUNDLE]")
full_option = click.option(
    "--full", is_flag=True,
    help="Run the playbook on every rig, also on rigs whose fingerprint says they are converged and undrifted.")


def confirm(question: str) -> None:
    """Ask before a change (no: exit 130).  Without a terminal to ask (a script, cron, a pipe), a prompt would read
    end-of-file and look like Ctrl-C: say to pass --yes instead (exit 2, bad usage; a JSON error with --json)."""
    if not sys.stdin.isatty():
        raise UsageError(f"{question} needs a yes, and there is no terminal to ask: pass --yes (-y) to confirm")
    click.confirm(question, abort=True, err=True)


class Seconds(click.FloatRange):
    """A number of seconds in a range; ``nan`` and ``inf``, which every comparison lets through, are refused."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{textfiles.shown(value)} is not a number of seconds", param, ctx)
        return number


_SSH = [
    click.option("--accept-new", is_flag=True,
                 help="Trust and record host keys seen for the first time (a changed key is always refused)."),
    click.option("--known-hosts", type=click.Path(dir_okay=False), envvar="M2P_KNOWN_HOSTS",
                 default=str(Path.home() / ".ssh" / "known_hosts"), show_default=True,
                 help="Known-hosts file.  [env M2P_KNOWN_HOSTS]"),
    click.option("--forks", type=click.IntRange(1, 500), default=DEFAULT_POOL, show_default=True,
                 envvar="M2P_FORKS", help="Rigs handled at once.  [env M2P_FORKS]"),
    click.option("--connect-timeout", type=Seconds(0.5, 600), default=10.0, show_default=True,
                 help="Seconds to wait for a rig to answer."),
    click.option("--command-timeout", type=Seconds(1, 3600), default=60.0, show_default=True,
                 help="Seconds the probe may take on a rig in all (a deadline; output is capped at 8 MiB)."),
]
_SSH_NAMES = ("accept_new", "known_hosts", "forks", "connect_timeout", "command_timeout")


def _stack(f: Callable[..., Any], options: Sequence[Decorator]) -> Callable[..., Any]:
    for option in reversed(options):
        f = option(f)
    return f


def _ssh_from(kw: dict[str, Any]) -> SshOptions:
    accept_new, known_hosts, forks, connect_timeout, command_timeout = (kw.pop(n) for n in _SSH_NAMES)
    return SshOptions(known_hosts=Path(known_hosts).expanduser(), accept_new=accept_new,
                      connect_timeout=connect_timeout, command_timeout=command_timeout, pool_size=forks)


def ssh_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The SSH options; the command gets ``ssh: SshOptions``."""

    @functools.wraps(f)
    def command(*args: Any, **kw: Any) -> Any:
        return f(*args, ssh=_ssh_from(kw), **kw)

    return _stack(command, _SSH)


@dataclass(frozen=True)
class FleetSettings:
    """What every fleet run (plan, convert, revert, schedule apply) is told on the command line."""

    inventory_file: str
    limit: str | None
    vault_password_file: str | None
    ssh: SshOptions
    bundle: str | None = None
    batch: str | None = None
    max_fail: int = 100
    keep_artifacts: Path | None = None
    as_json: bool = False
    drain_timeout_s: float | None = None  # --drain: wait this long for running leases; None: refuse leased rigs

    def __post_init__(self) -> None:
        batch = self.batch
        if batch is not None and not (_BATCH.fullmatch(batch) and int(batch.rstrip("%")) > 0):
            raise UsageError(f"--batch {textfiles.shown(batch)}: give a number of rigs (5) or a percentage (10%)")


_BATCH = re.compile(r"[0-9]{1,6}%?")  # ASCII digits: str.isdigit() takes "²", which int() refuses
_FLEET_NAMES = ("inventory_file", "limit", "vault_password_file", "batch", "max_fail", "as_json")


_DRAIN = [
    click.option("--drain", is_flag=True,
                 help="Wait for running leases instead of refusing their rigs: the agent cordons the node, "
                      "m2p waits for the leases to end, then goes on and uncordons."),
    click.option("--drain-timeout", default=leases.DEFAULT_DRAIN_TIMEOUT, show_default=True, metavar="DURATION",
                 help="How long --drain waits (90s, 30m, 2h, 1d); a rig still leased then is not touched."),
]


def fleet_options(bundle: bool = True, drain: bool = False) -> Decorator:
    """The options of a fleet run; the command gets ``fleet: FleetSettings``.  ``drain``: the command
    changes rigs, so it refuses leased ones unless told to wait (--drain, --drain-timeout)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(*args: Any, **kw: Any) -> Any:
            ssh = _ssh_from(kw)
            keep = kw.pop("keep_artifacts")
            wait = kw.pop("drain", False)
            timeout = leases.parse_span(kw.pop("drain_timeout", leases.DEFAULT_DRAIN_TIMEOUT))
            settings = FleetSettings(ssh=ssh, bundle=kw.pop("bundle", None),
                                     keep_artifacts=Path(keep) if keep else None,
                                     drain_timeout_s=timeout if wait else None,
                                     **{n: kw.pop(n) for n in _FLEET_NAMES})
            return f(*args, fleet=settings, **kw)

        return _stack(command, [
            inventory_option(), limit_option, *([bundle_option] if bundle else []), vault_option,
            click.option("--batch", help="Convert N rigs (or N%) at a time, the whole playbook per batch."),
            click.option("--max-fail", type=click.IntRange(0, 100), default=100, show_default=True,
                         help="Stop starting new batches once more than this % of rigs failed."),
            click.option("--keep-artifacts", type=click.Path(file_okay=False),
                         help="Copy ansible-runner's artifacts (events, stdout) here, for audits."),
            json_option, *(_DRAIN if drain else []), *_SSH,
        ])

    return decorate


STARTERS = Path(__file__).resolve().parent / "templates"  # the commented starters every `init` writes


def starter_arguments(default: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """FILE (default ``default``) and --force, as every ``init`` takes them."""
    def stack(f: Callable[..., Any]) -> Callable[..., Any]:
        f = click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")(f)
        return click.argument("file", default=default, type=click.Path(dir_okay=False))(f)
    return stack


def write_starter(file: str, text: str, force: bool) -> None:
    """Write a starter's ``text`` to ``file``; an existing file needs ``force``.  The caller has read the starter
    with its own checker first, so no starter that fails its check is ever written."""
    target = Path(file)
    if target.exists() and not force:
        raise UsageError(f"{file} exists; use --force to overwrite it")
    try:
        target.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {textfiles.shown(file)}: {exc.strerror}") from None
