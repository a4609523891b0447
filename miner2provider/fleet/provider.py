"""``m2p provider apply`` and ``m2p provider remove``: a marketplace's provider stack on the farm's k3s server.

The stack (market/: manifests, the wallet Secret, a fingerprint) goes to the one k3s server of the
inventory through the ``provider`` playbook (role market_provider), which runs there and nowhere else.
The wallet Secret travels only as a vault-encrypted inventory value (runner.py) and reaches the API on
stdin under ``no_log``.  A server whose record (``RECORD``, a digest only) matches the stack's fingerprint
is converged without running Ansible: one SSH read, so a converged provider re-applies in well under 2 s.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from miner2provider.core import collection
from miner2provider.core.errors import ProviderError
from miner2provider.core.inventory import Host
from miner2provider.detect.ssh import SshOptions, run_one
from miner2provider.fleet import agent_zipapp
from miner2provider.fleet.pipeline import RigOutcome, outcome_of
from miner2provider.fleet.role_vars import Rig, data_dir
from miner2provider.fleet.runner import Event, run_playbook
from miner2provider.market.base import IngressSight, ProviderParts, ProviderStack

RECORD = "/var/lib/m2p/provider.json"  # one provider per farm; 0644, {"fingerprint": ...}
WAITING = ("installed; k3s's Helm jobs have not made every object m2p patches yet (they pull images first): run "
           "`m2p provider apply` again in a few minutes to finish")


def server_of(fleet: list[Host]) -> Host:
    """The inventory's one k3s server: the provider's pods and manifests live there."""
    servers = [h for h in fleet if "k3s_server" in h.groups]
    if len(servers) != 1:
        named = ", ".join(h.name for h in servers) or "none"
        raise ProviderError(f"the provider needs exactly one k3s server in the inventory (group k3s_server); found "
                            f"{named}: one farm, one cluster, one provider")
    return servers[0]


# Asked on the server with its own python3 (every converted rig has it): a TCP connection to each host:port, one
# line each, "host:port<TAB>" or "host:port<TAB>why not".
_REACH = """python3 - {targets} <<'M2P_REACH'
import socket, sys
for target in sys.argv[1:]:
    host, _, port = target.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=4).close()
        print(target + "\t")
    except (OSError, ValueError) as exc:
        print(target + "\t" + (getattr(exc, "strerror", None) or type(exc).__name__))
M2P_REACH
"""


def server_reaches(server: Host, targets: tuple[str, ...], opts: SshOptions) -> dict[str, str] | str:
    """host:port -> "" when the server opens a TCP connection to it, else why not; or why the server could not be
    asked."""
    if not targets:
        return {}
    result = run_one(server, _REACH.format(targets=" ".join(shlex.quote(t) for t in targets)), opts, file_notes=False)
    if not result.ok:
        return f"{server.name}: {result.error}"
    found = dict(line.split("\t", 1) for line in result.stdout.splitlines() if "\t" in line)
    return {t: found.get(t, "not asked (no python3 on the server?)") for t in targets}


# The ingress rig's own way out: its default route, and the route it takes toward ``target`` (the address the
# owner's DNS gives the provider, when it gave a public one: where leases' traffic goes back to); and, only when
# the owner named an echo service, the IPv4 address the internet sees it leave from (asked over IPv4).  Python 3.6+
# (old rigs), bounded in time (5 s) and size (64 bytes).
_SIGHT = """ip -4 route show default 2>/dev/null | head -n 1 | sed 's/^/default\t/'
[ -z {target} ] || ip -4 route get {target} 2>/dev/null | head -n 1 | sed 's/^/toward\t/'
[ -z {url} ] || python3 - {url} <<'M2P_SIGHT'
import socket, sys, urllib.request
ask = socket.getaddrinfo  # IPv4 only: the ingress is the A records' address
socket.getaddrinfo = lambda host, port, family=0, *rest, **kw: ask(host, port, socket.AF_INET, *rest, **kw)
try:
    body = urllib.request.urlopen(sys.argv[1], timeout=5).read(64).decode("ascii", "replace").split()
    print("echo\t" + (body[0] if body else ""))
except Exception as exc:
    print("echo-error\t" + type(exc).__name__)
M2P_SIGHT
"""


def ingress_sight(ingress: Host, echo_url: str, target: str, opts: SshOptions) -> IngressSight | str:
    """How the ingress rig reaches the internet (its default gateway, its route toward ``target`` when given, and
    the address an echo service saw when ``echo_url`` is given), or why the rig could not be asked."""
    script = _SIGHT.format(url=shlex.quote(echo_url), target=shlex.quote(_address_or_empty(target)))
    result = run_one(ingress, script, opts, file_notes=False)
    if not result.ok:
        return f"{ingress.name}: {result.error}"
    return parse_sight(result.stdout, asked=bool(echo_url))


def parse_sight(text: str, asked: bool) -> IngressSight:
    """Lines as _SIGHT prints them: ``default<TAB>default via 192.168.1.1 dev eth0 proto dhcp ...`` (``ip -4 route
    show default``), ``toward<TAB>81.2.69.160 via 192.168.1.1 dev eth0 src 192.168.1.23 uid 0`` (``ip -4 route
    get``), ``echo<TAB>81.2.69.160`` or ``echo-error<TAB>why``."""
    gateway, via, source, public = "", "", "", ""
    why = "no answer (no python3 on the rig?)" if asked else ""
    for line in text.splitlines():
        kind, _, value = line.partition("\t")
        if kind == "default":
            gateway = _word_after(value, "via")
        elif kind == "toward":
            via, source = _word_after(value, "via"), _word_after(value, "src")
        elif kind == "echo":
            public, why = _address_or_empty(value.strip()), ""
            if ":" in public or not public:
                public, why = "", f"the echo service answered {value.strip()[:48]!r}, not an IPv4 address"
        elif kind == "echo-error":
            why = f"the echo service did not answer ({value.strip()[:80]})"
    return IngressSight(gateway, via, source, public, why)


def _word_after(line: str, key: str) -> str:
    """The address after ``key`` in one line of ``ip route`` output ("" when absent or not an address)."""
    words = line.split()
    return _address_or_empty(words[words.index(key) + 1]) if key in words[:-1] else ""


def _address_or_empty(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return ""


def recorded_fingerprint(server: Host, opts: SshOptions) -> str:
    """What the server's record says was applied last ("" when none or unreadable)."""
    result = run_one(server, f"cat {RECORD} 2>/dev/null || true\n", opts, file_notes=False)
    if not result.ok:
        raise ProviderError(f"{server.name}: {result.error}")
    try:
        found = json.loads(result.stdout or "{}")
    except ValueError:
        return ""
    return str(found.get("fingerprint", "")) if isinstance(found, dict) else ""


def apply(server: Host, fleet: list[Host], stack: ProviderStack, parts: ProviderParts, opts: SshOptions, *,
          check: bool = False, rotate_token: bool = False, on_event: Callable[[Event], None] | None = None,
          keep_artifacts: Path | None = None) -> RigOutcome:
    """Install or update the stack on ``server``.  Every run of the role replaces the reclaimer's token (its Secret
    made again); a converged provider runs nothing unless ``rotate_token`` asks for that run."""
    if rotate_token and not stack.reclaimer:
        raise ProviderError("--rotate-token: this provider runs no reclaimer (it offers no reclamation window), so "
                            "there is no token to rotate")
    reclaimer = reclaimer_vars(stack, parts)
    # The reclaimer's program is m2p's, not the stack's: an m2p upgrade that changes it must reach the server.
    fingerprint = stack.fingerprint + (f"-{Path(reclaimer['market_provider_reclaimer_pyz']).stem[-16:]}"
                                       if stack.reclaimer else "")
    if recorded_fingerprint(server, opts) == fingerprint and not rotate_token:
        return RigOutcome(server.name, "converged", message="provider up to date (fingerprint matches)")
    variables = {**server_vars(server, parts), "market_provider_state": "present",
                 "market_provider_manifests": stack.files, "market_provider_fingerprint": fingerprint,
                 "market_provider_patches": list(stack.patches), "market_provider_server_side": stack.server_side,
                 **reclaimer}
    run = run_playbook(collection.playbook("provider"), fleet, role_vars={server.name: variables}, check=check,
                       known_hosts=opts.known_hosts, on_event=on_event, keep_artifacts=keep_artifacts,
                       limit=[server.name], secret_vars={server.name: {"market_provider_secret": stack.secret}},
                       secret_env=stack.secret_env)
    outcome = outcome_of(server.name, run, check=check,
                         why="the provider would be installed or updated" if check else "provider installed or updated")
    if not check and not outcome.failed and recorded_fingerprint(server, opts) != fingerprint:
        # The role writes its record only once every patch found its object (made by k3s's Helm jobs) and the
        # reclaimer its token.
        return replace(outcome, message=WAITING)
    return outcome


# What `provider remove` leaves on the server, and why; docs/security.md ("Every copy of the wallet") names where
# each lies for the marketplace's chart and how to wipe it.  The certificate is in a host folder the provider's
# pod mounts: the pod's start reuses a certificate still valid on the chain instead of paying for a new one.  The
# home volume is its StatefulSet's, which Kubernetes keeps when the release goes; the provider imports the wallet's
# key into a keyring there.
LEFT_ON_SERVER = ("the provider's certificate (a re-install reuses the one published on the chain), its home volume "
                  "(Kubernetes keeps it; its keyring holds the wallet's key, without passphrase), the ingress's "
                  "self-signed TLS Secrets (a re-install reuses them), the namespaces and CRDs (deleting a CRD deletes "
                  "every object of its kind): docs/security.md says where each lies and how to wipe it")


def remove(server: Host, fleet: list[Host], parts: ProviderParts, opts: SshOptions, *, check: bool = False,
           on_event: Callable[[Event], None] | None = None, keep_artifacts: Path | None = None) -> RigOutcome:
    """Take the provider off ``server``: m2p's manifests, the HelmCharts (k3s's Helm controller uninstalls each
    release, and its release history with it), the wallet Secret, the reclaimer; the outcome says what stays."""
    variables = {**server_vars(server, parts), "market_provider_state": "absent"}
    run = run_playbook(collection.playbook("provider"), fleet, role_vars={server.name: variables}, check=check,
                       known_hosts=opts.known_hosts, on_event=on_event, keep_artifacts=keep_artifacts,
                       limit=[server.name])
    taken = "the provider would be taken off" if check else "provider taken off"
    return outcome_of(server.name, run, check=check, why=f"{taken}; left on the server: {LEFT_ON_SERVER}",
                      note="no provider was installed")


def reclaimer_vars(stack: ProviderStack, parts: ProviderParts) -> dict[str, Any]:
    """The farm's reclaimer, when the stack offers a reclamation window: its settings and its zipapp (built here,
    in m2p's private cache, as the agent's is)."""
    if not stack.reclaimer:
        return {"market_provider_reclaimer": ""}
    namespace, secret = parts.reclaimer_token
    return {"market_provider_reclaimer": stack.reclaimer,
            "market_provider_reclaimer_pyz": str(agent_zipapp.write(entry=parts.reclaimer_entry, name="m2p-reclaimer")),
            "market_provider_reclaimer_token_namespace": namespace,
            "market_provider_reclaimer_token_secret": secret,
            "market_provider_reclaimer_token_manifest": token_secret_object(stack, namespace, secret)}


def token_secret_object(stack: ProviderStack, namespace: str, name: str) -> dict[str, Any]:
    """The reclaimer's token Secret as the stack's manifests have it (the role makes it again to rotate the token)."""
    for text in stack.files.values():
        for doc in yaml.safe_load_all(text):
            meta = doc.get("metadata", {}) if isinstance(doc, dict) else {}
            if doc and doc.get("kind") == "Secret" and (meta.get("namespace"), meta.get("name")) == (namespace, name):
                return dict(doc)
    raise ProviderError(f"the stack's manifests hold no Secret {namespace}/{name} for the reclaimer's token")


def server_vars(server: Host, parts: ProviderParts) -> dict[str, Any]:
    """The role variables every provider run on ``server`` takes (its k3s data dir, what m2p makes there)."""
    default = str(server.var("k3s_data_dir") or collection.role_defaults("k3s")["k3s_data_dir"])
    where = data_dir(Rig(server.name, server.address, server.groups, server.vars), default)
    return {"market_provider_k3s_data_dir": where, "market_provider_file_prefix": parts.file_prefix,
            "market_provider_releases": list(parts.releases), "market_provider_secret_name": parts.secret_name,
            "market_provider_node_label_keys": list(parts.node_labels),
            "market_provider_other_secrets": [{"namespace": ns, "name": name} for ns, name in parts.other_secrets],
            "market_provider_record": RECORD}
