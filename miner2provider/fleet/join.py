"""``m2p sites invite`` and ``m2p join``: a rig behind NAT joins the farm's tunnel from its own site (issue 37).

The controller cannot reach such a rig until its tunnel is up, and its tunnel needs the hub to know its key.  So:

1. ``m2p sites invite RIG`` (the controller) prints a join bundle: the hub's endpoint and public key, the rig's
   tunnel address, the MTU, and the controller's SSH public key.  Public facts only: the bundle holds no secret
   (no token, no private key), so it may travel by chat or paper, and a copy in the wrong hands joins nothing;
2. ``m2p join BUNDLE --host LAN-ADDRESS`` (on the rig, or on any machine at its site) runs the ``tunnel`` role on
   the rig: the rig makes its own key pair, dials the hub, and the controller's key may log in; it prints the
   rig's public key as an inventory line;
3. the owner puts that line (``m2p_tunnel_public_key``) in the inventory, the rig's ``ansible_host`` is its tunnel
   address and its ``m2p_jump_host`` the hub; ``m2p sites apply`` gives the hub the peer, and from then on every
   m2p command reaches the rig through the hub.

The bundle travels by chat or paper, where whoever can edit it can swap the controller's key for theirs and the
login user for ``root``: it decodes cleanly, since every field is still well formed.  So ``sites invite`` prints a
short digest of it to read out by another channel (a phone call), ``m2p join`` shows the digest, the key's
fingerprint and the account it may log in as before it does anything (and checks ``--digest`` when given), and
refuses a login user other than the ``--user`` it was told.

Accepting a key into the inventory is the owner's act of trust, as adding a host key is: m2p never accepts a key
that arrives by itself.  Why not the k3s token and version in the bundle (the issue asked for them): ``m2p convert``
puts the token on the rig over the tunnel as on any rig, so the bundle need not carry a secret at all.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from miner2provider.core import checks, collection, textfiles
from miner2provider.core.errors import UsageError
from miner2provider.core.inventory import Host
from miner2provider.fleet import tunnel
from miner2provider.fleet.pipeline import RigOutcome, outcome_of
from miner2provider.fleet.runner import Event, run_playbook

PREFIX = "m2p-join-1:"
AUTHORIZED_COMMENT = "m2p-controller"  # the line the tunnel role adds, and removes when the tunnel goes
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
DIGEST_HEX = 20  # 80 bits: a forged bundle with the same digest is a second preimage of SHA-256 cut to 80 bits


@dataclass(frozen=True)
class JoinBundle:
    rig: str
    site: str
    address: str  # the rig's tunnel address, ADDRESS/PREFIX
    mtu: int
    endpoint: str  # the hub's HOST:PORT
    hub: str
    hub_address: str
    hub_key: str
    login_user: str  # whose authorized_keys gets ``authorize``
    authorize: str  # the controller's SSH public key ("type blob m2p-controller"), or ""

    def config(self) -> str:
        """The rig's WireGuard configuration: one peer, the hub (public keys only)."""
        interface = ipaddress.IPv4Interface(self.address)
        plan = tunnel.TunnelPlan(interface.network, self.mtu, tunnel.Member(self.hub, "", ipaddress.IPv4Address(
            self.hub_address)), self.endpoint, (tunnel.Member(self.rig, self.site, interface.ip),))
        return tunnel.wg_config(plan, self.rig, {self.hub: self.hub_key})


def ssh_public_key(text: str) -> str:
    """``text`` as one authorized_keys line with m2p's comment; ValueError when it is not an SSH public key."""
    return checks.ssh_public_key(text, AUTHORIZED_COMMENT)


def invite(found: tunnel.TunnelPlan, rig: Host, hub_key: str, authorize: str) -> JoinBundle:
    """The bundle for ``rig`` (pure)."""
    if rig.name == found.hub.name:
        raise UsageError(f"{rig.name} is the hub: it is reached directly and joins nobody")
    member = found.member(rig.name)
    return JoinBundle(rig.name, member.site, f"{member.address}/{found.network.prefixlen}", found.mtu, found.endpoint,
                      found.hub.name, str(found.hub.address), hub_key, rig.user or "", authorize)


def reach_lines(found: tunnel.TunnelPlan, rig: Host) -> list[tuple[str, str, bool]]:
    """(setting, value, already so) for what makes the controller reach a joined rig through the hub."""
    address = str(found.member(rig.name).address)
    jump = rig.jump.name if rig.jump else ""
    return [("ansible_host", address, rig.address == address), ("m2p_jump_host", found.hub.name,
                                                                  jump == found.hub.name)]


def encode(bundle: JoinBundle) -> str:
    raw = json.dumps(asdict(bundle), separators=(",", ":"), sort_keys=True).encode()
    return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def digest(bundle: JoinBundle) -> str:
    """A short digest of ``bundle`` (five groups of four hex digits) to compare by a channel other than the one the
    bundle travelled by.  Taken over the canonical encoding, so a bundle that was re-encoded on its way but says
    the same still matches, and one that says anything else does not."""
    raw = hashlib.sha256(encode(bundle).encode()).hexdigest()[:DIGEST_HEX]
    return "-".join(raw[i:i + 4] for i in range(0, DIGEST_HEX, 4))


def same_digest(given: str, bundle: JoinBundle) -> bool:
    """``given`` (as read out: any case, with or without dashes and spaces) is ``bundle``'s digest."""
    return re.sub(r"[\s-]", "", given).lower() == digest(bundle).replace("-", "")


def key_fingerprint(line: str) -> str:
    """The SHA256 fingerprint of an authorized_keys line, as ``ssh-keygen -lf KEY.pub`` prints it; ValueError when
    its key is not base64."""
    try:
        blob = base64.b64decode(line.split()[1], validate=True)
    except (binascii.Error, IndexError):
        raise ValueError("not one OpenSSH public key (TYPE BASE64 [COMMENT])") from None
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def what_it_does(bundle: JoinBundle) -> list[str]:
    """What ``m2p join`` shows before it changes anything: the digest, and who may log in to the rig afterwards."""
    lines = [f"bundle digest {digest(bundle)}: compare it with the one `m2p sites invite` printed, by another "
             "channel than the bundle's (a call): a different one means the bundle was changed on its way"]
    if bundle.authorize:
        kind = bundle.authorize.split()[0]
        lines.append(f"the controller's key {key_fingerprint(bundle.authorize)} ({kind}) may then log in to "
                     f"{bundle.rig} as {bundle.login_user} (check: `ssh-keygen -lf KEY.pub` on the controller)")
    else:
        lines.append("no SSH key is added to the rig (the controller logs in with a password)")
    lines.append(f"{bundle.rig}'s tunnel dials the hub {bundle.hub} at {bundle.endpoint}, whose WireGuard key is "
                 f"{bundle.hub_key}")
    return lines


def decode(text: str) -> JoinBundle:
    """A bundle as ``encode`` wrote it, every field checked: what it carries ends up in a root-owned file."""
    text = text.strip()
    if not text.startswith(PREFIX):
        raise UsageError(f"the join bundle must start with {PREFIX} (as `m2p sites invite` prints it)")
    body = text[len(PREFIX):]
    try:
        fields = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError):
        raise UsageError("the join bundle is damaged (copy the whole line `m2p sites invite` printed)") from None
    want = {name: kind for name, kind in JoinBundle.__annotations__.items()}
    if not isinstance(fields, dict) or set(fields) != set(want):
        raise UsageError("the join bundle is not one this m2p reads (make a new one with `m2p sites invite`)")
    for name, kind in want.items():
        if type(fields[name]).__name__ != kind:
            raise UsageError(f"the join bundle's {name} is not a {kind}")
    bundle = JoinBundle(**fields)
    _check(bundle)
    return bundle


def _check(bundle: JoinBundle) -> None:
    problems = []
    if not _NAME.fullmatch(bundle.rig) or not _NAME.fullmatch(bundle.hub):
        problems.append("a rig name")
    try:
        interface = ipaddress.IPv4Interface(bundle.address)
        if ipaddress.IPv4Address(bundle.hub_address) not in interface.network or not interface.network.is_private:
            problems.append("the addresses")
    except ValueError:
        problems.append("the addresses")
    if not 1280 <= bundle.mtu <= 1420:
        problems.append("the MTU")
    if not tunnel.is_public_key(bundle.hub_key):
        problems.append("the hub's key")
    if not tunnel.is_endpoint(bundle.endpoint):
        problems.append("the hub's endpoint")
    if bundle.login_user and not _NAME.fullmatch(bundle.login_user):
        problems.append("the login user")
    if bundle.authorize and not bundle.login_user:
        problems.append("the login user")
    if bundle.authorize and bundle.authorize != _authorized(bundle.authorize):
        problems.append("the controller's SSH key")
    if len(bundle.site) > 63 or textfiles.printable(bundle.site) != bundle.site:
        problems.append("the site")
    if problems:
        raise UsageError(f"the join bundle is not valid ({', '.join(problems)}): make a new one with "
                         "`m2p sites invite`")


def _authorized(text: str) -> str:
    try:
        key_fingerprint(text)
        return ssh_public_key(text)
    except ValueError:
        return ""


def rig_vars(bundle: JoinBundle) -> dict[str, Any]:
    """The ``tunnel`` role's variables for the joining rig."""
    return {"tunnel_state": "present", "tunnel_address": bundle.address, "tunnel_mtu": bundle.mtu,
            "tunnel_config": bundle.config(), "tunnel_forward": False, "tunnel_authorized_key": bundle.authorize,
            "tunnel_login_user": bundle.login_user,
            "tunnel_network": str(ipaddress.IPv4Interface(bundle.address).network),
            "tunnel_hub_address": bundle.hub_address}


def join(bundle: JoinBundle, rig: Host, known_hosts: Path, *, check: bool = False,
         on_event: Callable[[Event], None] | None = None) -> RigOutcome:
    """Run the rig's side of the tunnel over the site's own network (``rig`` is its LAN address)."""
    rig = replace(rig, name=bundle.rig)
    run = run_playbook(collection.playbook("tunnel"), [rig], role_vars={rig.name: rig_vars(bundle)}, check=check,
                       known_hosts=known_hosts, on_event=on_event)
    return outcome_of(rig.name, run, check=check, why="tunnel set up: it dials the hub")
