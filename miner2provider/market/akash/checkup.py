"""`m2p provider check` for Akash: one verdict per thing a provider needs, each with what to do.  Pure:
what was looked up (DNS, the RPC node, the rigs) comes in as ``Seen``.

Sources: Akash's provider audit (akash.network/docs/providers/operations/provider-audit: at least 64 cores
and 128 GiB across the cluster, else Homenode, AEP-60; dynamic-DNS domains cannot be audited), Akash's
provider build docs (A records for ``provider.<domain>`` and ``*.ingress.<domain>`` to the public address;
80, 443, 8443, 8444 and 30000-32767 open, tcp and udp), CometBFT's RPC ``/status`` (``node_info.network``,
``sync_info.catching_up``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from miner2provider.market.akash.provider_file import ProviderFile
from miner2provider.market.base import FarmFacts, IngressSight, Verdict

AUDIT_CORES, AUDIT_MEMORY_GIB = 64, 128
# The starter inventory's reason to pool a farm (market/base.py Marketplace.pooled_farm).
POOLED_FARM = (f"Akash audits a provider at {AUDIT_CORES} CPU cores and {AUDIT_MEMORY_GIB} GiB RAM across its "
               "cluster: one rig never reaches that, a pooled farm can.")
INGRESS_PORTS = (80, 443, 8443, 8444)
# Where Akash's bid script gets the AKT price, each bid (cached 60 min in the pod): DIA's API, then CoinGecko's
# (helm-charts @ f3d8d46 charts/akash-provider/scripts/price_script_generic.sh, get_akt_price).
PRICE_FEEDS = ("api.diadata.org:443", "api.coingecko.com:443")
NODE_PORTS = (30000, 32767)
CHAIN_ID = "akashnet-2"  # the provider chart's chainid
# Dynamic-DNS services (their customers' names cannot pass Akash's audit).
DYNAMIC_DNS = ("duckdns.org", "no-ip.com", "no-ip.org", "noip.me", "ddns.net", "hopto.org", "zapto.org", "sytes.net",
               "dynu.com", "dynu.net", "dyndns.org", "dyndns.com", "freedns.afraid.org", "mooo.com", "changeip.com",
               "dnsalias.com", "servebeer.com", "myftp.org", "ydns.eu", "dedyn.io", "desec.io", "nsupdate.info",
               "duckdns.com", "freeddns.org", "dynv6.net")
CGNAT = ipaddress.ip_network("100.64.0.0/10")


@dataclass(frozen=True)
class RpcStatus:
    network: str
    height: int
    catching_up: bool


@dataclass(frozen=True)
class Seen:
    """What `provider check` looked up: the farm (its rigs, the ingress rig), DNS, the RPC node, the wallet."""

    farm: FarmFacts
    resolved: dict[str, tuple[str, ...] | str]  # DNS name -> its addresses, or why it did not resolve
    rpc: RpcStatus | str  # the RPC node's status, or why it did not answer
    wallet_problem: str  # "" when the key file is private and the passphrase variable is set
    reach: dict[int, str] = field(default_factory=dict)  # ingress port -> "" when it opened from the farm's side
    acme_problem: str = ""  # why the DNS provider's credential would not do ("" : fine, or none asked for)


def wildcard_probe(domain: str) -> str:
    """A name under ``*.ingress.<domain>`` that only the wildcard record can answer."""
    return f"m2p-check.ingress.{domain}"


def names(provider: ProviderFile) -> tuple[str, str]:
    return f"provider.{provider.domain}", wildcard_probe(provider.domain)


def verdicts(provider: ProviderFile, seen: Seen) -> list[Verdict]:
    return [_audit(seen), *_ingress(provider, seen), *_dns(provider, seen), _ports(provider, seen),
            _reach(provider, seen), _rpc(provider, seen), _price_feed(seen), *_models(seen), _wallet(seen),
            _tls(provider, seen), _reclamation(provider)]


def _tls(provider: ProviderFile, seen: Seen) -> Verdict:
    if provider.acme_dns is None:
        return Verdict("ok", "tls", f"self-signed certificates for *.ingress.{provider.domain}, as Akash's default: "
                                    "tenants' browsers warn; set acme_dns for a real wildcard certificate (DNS-01)")
    if seen.acme_problem:
        return Verdict("fail", "tls", seen.acme_problem)
    return Verdict("ok", "tls", f"a wildcard certificate for *.{provider.domain} and *.ingress.{provider.domain} from "
                                f"Let's Encrypt through cert-manager, {provider.acme_dns.provider} DNS-01 "
                                f"({provider.where('acme_dns')})")


def _reach(provider: ProviderFile, seen: Seen) -> Verdict:
    """The ingress's ports from the farm's side: NGF's data plane answers there once `provider apply` ran."""
    rig = f"{provider.ingress_rig} ({seen.farm.ingress_address})"
    forward = (f"your router must forward tcp {', '.join(map(str, INGRESS_PORTS))} and tcp+udp "
               f"{NODE_PORTS[0]}-{NODE_PORTS[1]} from its public address to {seen.farm.ingress_address}")
    if kind_of(_local(seen)) == "public":
        forward = "no port forwarding: the rig's address is public"
    closed = {p: why for p, why in seen.reach.items() if why}
    if not seen.reach:
        return Verdict("warn", "reach", f"the ingress rig {rig} was not tried; {forward}")
    if not closed:
        return Verdict("ok", "reach", f"the ingress answers on {rig} at {', '.join(map(str, seen.reach))} from the "
                                      f"farm's side; {forward}")
    said = "; ".join(f"{p}: {why}" for p, why in closed.items())
    return Verdict("warn", "reach", f"the ingress does not answer on {rig} ({said}): before `m2p provider apply`, "
                                    "and until k3s's Helm jobs have started NGINX Gateway Fabric there, that is "
                                    f"expected; after, the provider's API and leases are unreachable; {forward}")


def _price_feed(seen: Seen) -> Verdict:
    """Akash's bid script prices USD targets in AKT fetched from the internet by the provider's pod (server)."""
    reach = seen.farm.server_reach
    if isinstance(reach, str):
        return Verdict("warn", "price feed", f"could not ask the k3s server whether it reaches the AKT price "
                                             f"({reach})")
    reached = [host for host, why in reach.items() if not why]
    if reached:
        return Verdict("ok", "price feed", f"the k3s server reaches {reached[0]}, where Akash's bid script reads the "
                                           "AKT price")
    said = "; ".join(f"{host}: {why}" for host, why in reach.items()) or "none asked"
    return Verdict("fail", "price feed", f"the k3s server reaches no AKT price feed ({said}): Akash's bid script "
                                         "then has no price (after a pod restart, no cached one) and bids on no "
                                         "order; give the server internet access (https, tcp 443)")


def _models(seen: Seen) -> list[Verdict]:
    """Akash's hardware requirements: "Each node must have only one type of GPU"."""
    mixed = {rig: models for rig, models in seen.farm.models.items() if len(models) > 1}
    return [Verdict("warn", "gpu models", f"{rig} mixes {' and '.join(models)}: Akash supports one GPU model per "
                                          "node, and a lease asking for one may be given another; move the cards so "
                                          "each rig holds one model, or keep the rig out of the provider's inventory")
            for rig, models in sorted(mixed.items())]


def _reclamation(provider: ProviderFile) -> Verdict:
    """The trade a reclamation window makes (AEP-82; docs/reclamation.md)."""
    window = provider.reclamation_window
    if not window:
        return Verdict("ok", "reclamation", "no reclamation window offered: a lease cannot be reclaimed, so a mining "
                                            "window waits for it to end (lease_grace); tenants who require a window "
                                            "will not pick this provider")
    return Verdict("ok", "reclamation", f"offers {window} ({provider.where('reclamation_window')}): m2p's reclaimer "
                                        f"on the k3s server reclaims a rig's leases {window} before it must mine and "
                                        "closes them at their deadlines; tenants who require up to "
                                        f"{window} may pick this provider; a lease that lands late, or a profit "
                                        f"switch, makes mining wait up to {window}; give your schedule "
                                        f"reclamation_window: {window} too")


def kind_of(address: str) -> str:
    """public | private (RFC 1918 and the like) | cgnat | invalid."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "invalid"
    if ip.version == 4 and ip in CGNAT:
        return "cgnat"
    return "public" if ip.is_global else "private"


def _audit(seen: Seen) -> Verdict:
    gib = seen.farm.memory_mib / 1024
    where = f"{seen.farm.rigs} rigs: {seen.farm.cores} cores, {gib:.0f} GiB"
    if seen.farm.cores >= AUDIT_CORES and gib >= AUDIT_MEMORY_GIB:
        return Verdict("ok", "audit floor", f"{where} (Akash's audit asks at least {AUDIT_CORES} cores and "
                                            f"{AUDIT_MEMORY_GIB} GiB)")
    return Verdict("warn", "audit floor", f"{where}, below Akash's audit floor ({AUDIT_CORES} cores, "
                                          f"{AUDIT_MEMORY_GIB} GiB): the provider bids unaudited; Homenode "
                                          "(AEP-60) is Akash's path for such providers; go on, and pool more rigs "
                                          "to be audited")


def public_answer(found: tuple[str, ...] | str) -> str:
    """The first public address in a DNS answer ("" when it has none, or the name did not resolve)."""
    return next((a for a in found if kind_of(a) == "public"), "") if isinstance(found, tuple) else ""


def _local(seen: Seen) -> str:
    """The ingress rig's own address on its way out: its route's source when it said one, else the inventory's (a
    rig named by its VPN address still leaves through its LAN)."""
    sight = seen.farm.ingress_sight
    return sight.source if isinstance(sight, IngressSight) and sight.source else seen.farm.ingress_address


def _ingress(provider: ProviderFile, seen: Seen) -> list[Verdict]:
    """Carrier-grade NAT is judged where it shows: the ingress rig's own route (its gateways and source address),
    and, when the owner named an echo service, the address the internet sees the farm leave from; never from the
    rig's LAN address alone (behind a home router on a CGNAT line the rig has an ordinary private address)."""
    sight = seen.farm.ingress_sight
    told = sight if isinstance(sight, IngressSight) else IngressSight()
    rig = f"ingress rig {provider.ingress_rig} ({seen.farm.ingress_address})"
    local = _local(seen)
    kind = kind_of(local)
    to = "it" if local == seen.farm.ingress_address else local
    dns = public_answer(seen.resolved.get(f"provider.{provider.domain}", ()))
    ports = f"tcp {', '.join(map(str, INGRESS_PORTS))} and tcp+udp {NODE_PORTS[0]}-{NODE_PORTS[1]}"
    nat = ("carrier-grade NAT (your ISP's NAT): nothing from the internet reaches it; ask your ISP for a public "
           "address, or use a public node (a VPS) as the ingress")
    shared = [f"{what} {address}" for what, address in (("its route to the internet leaves through", told.via),
                                                         ("its default gateway is", told.gateway),
                                                         ("its route's source address is", told.source))
              if kind_of(address) == "cgnat"]
    if shared or kind == "cgnat":
        return [Verdict("fail", "ingress", f"{rig}: {shared[0] if shared else 'it has a 100.64.0.0/10 address'}, "
                                           f"{nat}")]
    if told.public_address:
        seen_as = told.public_address
        if kind_of(seen_as) != "public":
            return [Verdict("fail", "ingress", f"{rig}: the echo service saw the farm leave from {seen_as}, not a "
                                               f"public address: {nat}")]
        out = []
        if dns and dns != seen_as:
            out.append(Verdict("fail", "dns", f"provider.{provider.domain} points at {dns}; the farm leaves from "
                                              f"{seen_as} (the echo service's answer): point provider.{provider.domain}"
                                              f" and *.ingress.{provider.domain} at {seen_as}, or pick an ingress "
                                              f"rig on the line behind {dns}"))
        if kind == "public" or local == seen_as:
            return [*out, Verdict("ok", "ingress", f"{rig} has a public address ({local}); the internet sees the "
                                                   f"farm as {seen_as}: no port forwarding")]
        return [*out, Verdict("warn", "ingress", f"{rig} has a private address: forward {ports} from your "
                                                 f"router's public address {seen_as} (as the internet sees it) to "
                                                 f"{to}")]
    if kind == "public" or (dns and local == dns):
        return [Verdict("ok", "ingress", f"{rig} has a public address ({local}): no port forwarding")]
    if kind == "private":
        router = f"your router's public address ({dns}, as your DNS says)" if dns else "your router's public address"
        unseen = (f"m2p could not ask: {told.echo_problem}" if told.echo_problem else
                  "m2p did not ask (set public_address_echo in provider.yml to let the ingress rig ask a service "
                  "you trust)")
        if isinstance(sight, str):
            unseen += f"; the rig's route could not be read ({sight})"
        return [Verdict("warn", "ingress", f"{rig} has a private address: forward {ports} from {router} to {to}. "
                                           "Carrier-grade NAT shows only from outside, and "
                                           f"{unseen}: if your router's own WAN address (its status page) is not "
                                           f"{dns or 'that public address'}, the line is behind carrier-grade NAT "
                                           "and no lease is reachable: ask your ISP for a public address or use a "
                                           "VPS as the ingress")]
    return [Verdict("warn", "ingress", f"{rig}: the inventory names it by host name; m2p checks the address "
                                       "its DNS names resolve to below")]


def _dns(provider: ProviderFile, seen: Seen) -> list[Verdict]:
    out = []
    dynamic = next((s for s in DYNAMIC_DNS if provider.domain == s or provider.domain.endswith("." + s)), None)
    if dynamic:
        out.append(Verdict("warn", "domain", f"{provider.domain} is a dynamic-DNS name ({dynamic}): Akash's audit "
                                             "refuses those; use a domain of your own to be audited"))
    ingress_public = kind_of(seen.farm.ingress_address) == "public"
    for name in names(provider):
        found = seen.resolved.get(name, "not looked up")
        shown = f"*.ingress.{provider.domain}" if name == wildcard_probe(provider.domain) else name
        if isinstance(found, str):
            out.append(Verdict("fail", "dns", f"{shown} does not resolve ({found}): add an A record pointing at "
                                              "your public address"))
        elif any(kind_of(a) != "public" for a in found):
            out.append(Verdict("fail", "dns", f"{shown} resolves to {', '.join(found)}, not a public address: "
                                              "point it at your public address"))
        elif ingress_public and seen.farm.ingress_address not in found:
            out.append(Verdict("fail", "dns", f"{shown} resolves to {', '.join(found)}, not the ingress rig's "
                                              f"{seen.farm.ingress_address}: fix the A record"))
        else:
            out.append(Verdict("ok", "dns", f"{shown} resolves to {', '.join(found)}"))
    return out


def _ports(provider: ProviderFile, seen: Seen) -> Verdict:
    listening = seen.farm.ingress_listening
    if isinstance(listening, str):
        return Verdict("fail", "ports", f"cannot read what listens on {provider.ingress_rig}: {listening}")
    if not listening.ok:
        return Verdict("warn", "ports", f"{provider.ingress_rig} has no ss (iproute2): m2p cannot see what listens "
                                        "there; make sure nothing holds 80, 443, 8443 or 8444")
    held = sorted({p for p in (*listening.tcp, *listening.udp)
                   if p in INGRESS_PORTS or NODE_PORTS[0] <= p <= NODE_PORTS[1]})
    if held:
        return Verdict("fail", "ports", f"something on {provider.ingress_rig} listens on {', '.join(map(str, held))}: "
                                        "the ingress and NodePorts need them; move that service or pick another "
                                        "ingress rig")
    return Verdict("ok", "ports", f"nothing on {provider.ingress_rig} holds 80, 443, 8443, 8444 or "
                                  f"{NODE_PORTS[0]}-{NODE_PORTS[1]} (sockets; pods' hostPorts are not sockets)")


def _rpc(provider: ProviderFile, seen: Seen) -> Verdict:
    if isinstance(seen.rpc, str):
        return Verdict("fail", "rpc", f"the RPC node {provider.rpc_node} does not answer ({seen.rpc}): run your own "
                                      "node (Akash advises it) or pick another from the network's list")
    if seen.rpc.network != CHAIN_ID:
        return Verdict("fail", "rpc", f"the RPC node {provider.rpc_node} serves {seen.rpc.network!r}, not Akash's "
                                      f"mainnet {CHAIN_ID}")
    if seen.rpc.catching_up:
        return Verdict("warn", "rpc", f"the RPC node {provider.rpc_node} is still catching up (block "
                                      f"{seen.rpc.height}): wait until it is in sync")
    return Verdict("ok", "rpc", f"the RPC node {provider.rpc_node} answers ({CHAIN_ID}, block {seen.rpc.height})")


def _wallet(seen: Seen) -> Verdict:
    if seen.wallet_problem:
        return Verdict("fail", "wallet", seen.wallet_problem)
    return Verdict("ok", "wallet", "the key file is yours alone and its passphrase variable is set; fund the "
                                   "wallet (a 0.5 AKT deposit per bid; about 50 AKT advised)")
