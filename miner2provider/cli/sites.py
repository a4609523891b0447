"""``m2p sites``: the tunnels of a farm across sites (docs/sites.md).  The plan is fleet/tunnel.py; the runs
are fleet/sites.py; this module only reads options, asks and prints."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from miner2provider.core.errors import UsageError
from miner2provider.core.inventory import Host
from miner2provider.detect.ssh import SshOptions
from miner2provider.fleet import join, sites, tunnel
from miner2provider.fleet.pipeline import RigOutcome

from . import render
from .app import Context, cli, pass_ctx
from .fleet import _progress, raise_pending
from .options import (
    confirm,
    inventory_option,
    json_option,
    load_inventory,
    password_from_env,
    ssh_options,
    vault_option,
    yes_option,
)

check_option = click.option("--check", is_flag=True, help="Show what would change; change nothing.  Exit 1: pending.")


def member_run_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """What both commands take: the inventory, --check, --yes, the vault, --json, SSH; and the context."""
    for option in reversed((inventory_option(), check_option, yes_option, vault_option, json_option, ssh_options,
                            pass_ctx)):
        f = option(f)
    return f


@cli.group("sites")
def sites_group() -> None:
    """A farm across sites: each rig's WireGuard tunnel to the farm's hub (its k3s server)."""


@sites_group.command("apply")
@member_run_options
def sites_apply(ctx: Context, inventory_file: str, check: bool, yes: bool, vault_password_file: str | None,
                as_json: bool, ssh: SshOptions) -> None:
    """Set up the tunnels of the inventory's plan: each member makes its own key (it never leaves the member),
    then runs its tunnel with m2p's configuration (public keys only).  A second run changes nothing."""
    hosts = list(load_inventory(inventory_file, vault_password_file).hosts)
    for line in tunnel.site_needs(sites.plan_of(hosts)):
        ctx.note(line)
    if not check and not yes:
        confirm(f"set up the tunnels of {render.counted(len(hosts), 'member')}?")
    outcomes = sites.apply(hosts, ssh, check=check, on_event=_progress(ctx, listed=check))
    render.outcomes(outcomes, as_json, show_tasks=check)
    raise_pending(outcomes, "m2p sites apply")


@sites_group.command("remove")
@member_run_options
def sites_remove(ctx: Context, inventory_file: str, check: bool, yes: bool, vault_password_file: str | None,
                 as_json: bool, ssh: SshOptions) -> None:
    """Take every member's tunnel off: its unit, interface, configuration and keys."""
    hosts = list(load_inventory(inventory_file, vault_password_file).hosts)
    if not check and not yes:
        confirm(f"take the tunnels of {render.counted(len(hosts), 'member')} off?")
    outcomes = sites.remove(hosts, ssh, check=check, on_event=_progress(ctx, listed=check))
    render.outcomes(outcomes, as_json, show_tasks=check)
    raise_pending(outcomes, "m2p sites remove")


@sites_group.command("invite")
@click.argument("rig")
@inventory_option()
@click.option("--authorize", type=click.Path(exists=True, dir_okay=False),
              help="The controller's SSH public key the rig lets in (default: the rig's key file + .pub).")
@vault_option
@json_option
@ssh_options
@pass_ctx
def sites_invite(ctx: Context, rig: str, inventory_file: str, authorize: str | None, vault_password_file: str | None,
                 as_json: bool, ssh: SshOptions) -> None:
    """Print the join bundle for RIG, a rig behind NAT that the controller cannot reach yet: run `m2p join BUNDLE`
    at its site.  The bundle holds public facts only (the hub's key and endpoint, RIG's tunnel address, the
    controller's SSH public key), no secret."""
    hosts = list(load_inventory(inventory_file, vault_password_file).hosts)
    found = sites.plan_of(hosts)
    member = next((h for h in hosts if h.name == rig), None)
    if member is None:
        raise UsageError(f"{rig} is not in {inventory_file}: add it (with its m2p_site) first, so it has its "
                         "tunnel address")
    keys, _, silent = sites.public_keys([h for h in hosts if h.name == found.hub.name], ssh)
    if found.hub.name not in keys:
        why = silent.get(found.hub.name) or "it has no key yet"
        raise UsageError(f"the hub {found.hub.name}'s public key could not be read ({why}): run `m2p sites apply` "
                         "first")
    authorized = _controller_key(member, authorize)
    bundle = join.invite(found, member, keys[found.hub.name], authorized)
    lines = join.reach_lines(found, member)
    if as_json:
        render.echo_json({"rig": rig, "bundle": join.encode(bundle), "digest": join.digest(bundle),
                          "inventory": {k: v for k, v, _ in lines}})
        return
    ctx.note(f"At {rig}'s site, on the rig or a machine beside it (Linux, with m2p installed), run:")
    render.echo(f"m2p join {join.encode(bundle)} --host RIG-LAN-ADDRESS --user {member.user or 'USER'}")
    ctx.note(f"Tell the person at the site this digest by another channel than the bundle's (a call), and have them "
             f"add `--digest {join.digest(bundle)}`: m2p join then refuses a bundle changed on its way.")
    ctx.note("It prints the rig's public key as a line for the inventory.  Then, under " + rig + " in "
             + inventory_file + ":")
    for name, value, already in lines:
        ctx.note(f"  {name}: {value}" + ("  (already so)" if already else ""))
    ctx.note(f"  m2p_tunnel_public_key: <what m2p join printed>\nand run `m2p sites apply -i {inventory_file}`.")
    if not authorized:
        ctx.note(f"{rig} logs in with a password (no key file with a .pub beside it): the controller's key is "
                 "not added; m2p will log in with the password through the hub.")


def _controller_key(member: Host, authorize: str | None) -> str:
    """The SSH public key the joining rig lets in: --authorize, or the rig's own key file's .pub; "" if none."""
    path = Path(authorize) if authorize else Path(member.key_file + ".pub") if member.key_file else None
    if path is None or not path.is_file():
        return ""
    if not member.user:
        raise UsageError(f"{member.where}: {member.name} has no ansible_user: the rig must know whose key to let in")
    try:
        return join.ssh_public_key(path.read_text(errors="replace"))
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None


@cli.command("join")
@click.argument("bundle")
@click.option("--host", "address", required=True, help="The rig's address at its site (its LAN address, or "
              "127.0.0.1 on the rig itself).")
@click.option("--port", type=click.IntRange(1, 65535), default=22, show_default=True, help="The rig's SSH port.")
@click.option("--user", required=True, help="Who logs in to the rig (sudo for the rest; HiveOS: user).")
@click.option("--key", "key_file", type=click.Path(exists=True, dir_okay=False), help="An SSH key that logs in.")
@click.option("--password-env", metavar="VAR", help="An environment variable holding the login password.")
@click.option("--become-password-env", metavar="VAR", help="An environment variable holding sudo's password "
              "(default: the login password).")
@click.option("--digest", help="The digest `m2p sites invite` printed, heard by another channel than the bundle's: "
              "a bundle with another one is refused.")
@check_option
@yes_option
@json_option
@ssh_options
@pass_ctx
def join_command(ctx: Context, bundle: str, address: str, port: int, user: str, key_file: str | None,
                 password_env: str | None, become_password_env: str | None, digest: str | None, check: bool,
                 yes: bool, as_json: bool, ssh: SshOptions) -> None:
    """At a rig's site: set up its tunnel to the farm's hub from BUNDLE (what `m2p sites invite` printed), so the
    controller reaches it through the hub.  The rig makes its own key pair; this prints its public key for the
    inventory.  Passwords come from environment variables, never from the command line."""
    invited = join.decode(bundle)
    # A bundle edited on its way decodes cleanly: what it would let in is checked and shown before anything is done.
    if invited.login_user and invited.login_user != user:
        raise UsageError(f"the join bundle lets the controller's key log in as {invited.login_user}, but --user is "
                         f"{user}: a bundle from `m2p sites invite` names the inventory's user; ask for a new one")
    if digest is not None and not join.same_digest(digest, invited):
        raise UsageError(f"the join bundle's digest is {join.digest(invited)}, not the --digest given: it was "
                         "changed on its way (or the digest was misheard); nothing was done")
    for line in join.what_it_does(invited):
        ctx.note(line)
    password = password_from_env(password_env)
    rig = Host(name=invited.rig, address=address, port=port, user=user, key_file=key_file, password=password,
               become_password=password_from_env(become_password_env) or password, groups=(), vars={},
               where="the command line")
    if not check and not yes:
        lets_in = (f", letting the key {join.key_fingerprint(invited.authorize)} log in as {invited.login_user}"
                   if invited.authorize else "")
        confirm(f"set up {invited.rig}'s tunnel to {invited.hub} ({invited.endpoint}) on {user}@{address}{lets_in} "
                f"(bundle digest {join.digest(invited)})?")
    # One SSH look first, as every m2p command makes before Ansible runs: it learns the host key (--accept-new)
    # and says a rig that does not answer in one sentence.
    _, _, silent = sites.public_keys([rig], ssh)
    outcome = (RigOutcome(rig.name, "unreachable", message=silent[rig.name]) if rig.name in silent
               else join.join(invited, rig, ssh.known_hosts, check=check, on_event=_progress(ctx, listed=check)))
    keys, odd, silent = sites.public_keys([rig], ssh) if not outcome.failed else ({}, set(), {})
    if as_json:
        render.echo_json({**dataclasses.asdict(outcome), "public_key": keys.get(rig.name, "")})
    else:
        render.outcomes([outcome], False, show_tasks=check)
    raise_pending([outcome], "m2p join")
    if rig.name not in keys:
        why = silent.get(rig.name) or ("its public key file holds something else" if rig.name in odd
                                       else "--check made no key")
        if check:
            return
        raise UsageError(f"{invited.rig}'s public key could not be read back ({why})")
    if not as_json:
        ctx.note(f"{invited.rig} dials {invited.endpoint} now.  On the controller, under {invited.rig} in the "
                 "inventory, put this line, then run `m2p sites apply`:")
        render.echo(f"m2p_tunnel_public_key: \"{keys[rig.name]}\"")
