"""``provider.yml``: what the farm tells Akash about itself, and where its wallet is.  Parsed and checked
here (every mistake a ProviderFileError at its file:line); read by `m2p provider`.

    domain: farm.example.com          # provider.<domain> and *.ingress.<domain> point at the ingress rig
    wallet:
      address: akash1...              # the provider's account address (public; `provider-services keys show -a`)
      key_file: provider.key          # `provider-services keys export` output (armored, passphrase-protected)
      passphrase_env: AKASH_KEY_PASS  # the environment variable that holds its passphrase
    email: ops@farm.example.com
    website: https://farm.example.com
    organization: Example Farm
    region: eu-central
    ingress_rig: rig01                # an inventory rig with a public address (hostPorts 80/443/8443/8444)
    rpc_node: https://rpc.example.com:443
    rest_node: https://api.example.com:443  # optional: the node's REST API (port 1317), for the wallet view
    akt_usd: 0.85                     # optional: the USD an AKT is worth, for the wallet's value (your figure),
                                      # or feed: ask DIA, then CoinGecko, as Akash's bid script does (hourly)
    reclamation_window: 24h           # AEP-82; off unless set; 1h to 720h (installs the farm's reclaimer)
    close_leases_without_window: false  # reclaimer: close leases won without a window when a rig must mine
    reclaim_leases_across_rigs: false   # reclaimer: reclaim a lease on several rigs when only some must mine
    acme_dns:                         # optional: a real wildcard certificate (cert-manager, DNS-01)
      provider: cloudflare            # or google (then project: <GCP project>)
      credential_env: CF_API_TOKEN    # the variable holding the API token (Google: the service account's JSON)
    charts: {provider: 19.0.2}        # chart versions (defaults: the ones m2p was tested with)

The wallet's key never goes in this file (a key or mnemonic found in it is refused): m2p reads the key
file and the passphrase variable only when it installs the provider, and puts both only in a Secret.
Sources: Akash's provider-playbooks (templates/provider.yaml.j2: from, key, keysecret, domain, node,
email, website, attributes), helm-charts (charts/akash-provider values; reclamationWindow), AEP-82
(the window: a Go duration from 1 h to 720 h; once offered, the provider cannot close such a lease
early, so it pairs with reclamation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from miner2provider.core import checks, textfiles
from miner2provider.core.errors import ProviderFileError
from miner2provider.market.akash import address
from miner2provider.market.akash import region as regions

STARTER = Path(__file__).with_name("provider.yml")  # what `m2p provider init` writes
CERT_MANAGER, CERT_MANAGER_VERSION = "cert-manager", "v1.19.1"  # only with acme_dns (acme.py)
# Chart -> the version m2p's tests render (../shared/akash: helm-charts @ f3d8d46; NGINX Gateway Fabric v2.5.1,
# provider-playbooks 4e78f28's ngf_git_ref).
CHARTS = {"provider": "19.0.2", "akash-hostname-operator": "19.0.2", "akash-inventory-operator": "19.0.2",
          "akash-gateway": "1.2.1", "nginx-gateway-fabric": "2.5.1"}
KEYS = {"domain", "wallet", "email", "website", "organization", "region", "ingress_rig", "rpc_node",
        "reclamation_window", "charts", "close_leases_without_window", "reclaim_leases_across_rigs", "acme_dns",
        "public_address_echo", "rest_node", "akt_usd"}
MAX_AKT_USD = 1_000_000.0  # a typo, not a price
ACME_KEYS = {"provider", "credential_env", "project"}
_GCP_PROJECT = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
RECLAIMER_FLAGS = ("close_leases_without_window", "reclaim_leases_across_rigs")
REQUIRED = ("domain", "wallet", "email", "ingress_rig", "rpc_node")
WALLET_KEYS = {"address", "key_file", "passphrase_env"}
WINDOW_MIN_S, WINDOW_MAX_S = 3600, 720 * 3600  # AEP-82: the chain accepts 1 h to 720 h
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_EMAIL = re.compile(r"[^@\s]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,63}")
_SEMVER = re.compile(r"v?\d{1,4}\.\d{1,4}\.\d{1,4}(-[0-9A-Za-z.-]{1,32})?")
# What a wallet's secret looks like, wherever it is pasted: an armored key, or a 12/24-word mnemonic.
_ARMOR = "-----BEGIN"
_MNEMONIC = re.compile(r"^(?:[a-z]{3,8} ){11}[a-z]{3,8}(?:(?: [a-z]{3,8}){12})?$")


@dataclass(frozen=True)
class Wallet:
    address: str  # akash1...: the chart's ``from``
    key_file: Path  # resolved from the provider file's folder
    passphrase_env: str


@dataclass(frozen=True)
class AcmeDns:
    provider: str  # cloudflare | google
    credential_env: str  # the environment variable holding the DNS provider's credential
    project: str = ""  # Google Cloud DNS: the project


@dataclass(frozen=True)
class ProviderFile:
    source: str
    domain: str
    wallet: Wallet
    email: str
    ingress_rig: str
    rpc_node: str
    website: str = ""
    organization: str = ""
    region: str = ""
    reclamation_window: str = ""  # a Go duration, or "" (off)
    charts: dict[str, str] = field(default_factory=lambda: dict(CHARTS))
    close_leases_without_window: bool = False
    reclaim_leases_across_rigs: bool = False
    lines: dict[str, int] = field(default_factory=dict)  # key -> its line, for messages about its value
    acme_dns: AcmeDns | None = None  # a real wildcard certificate through cert-manager (acme.py), else self-signed
    # An https URL that answers with the caller's address, which the ingress rig may ask (the owner's choice, off
    # by default): the farm's public address as the internet sees it, where carrier-grade NAT shows
    public_address_echo: str = ""
    # The node's REST API (the cosmos-sdk gateway): the wallet's balance and the provider's leases ("" none: the RPC
    # node answers neither), and the owner's AKT price in USD (None: the wallet's value is not shown)
    rest_node: str = ""
    akt_usd: float | None = None
    akt_usd_feed: bool = False  # akt_usd: feed (market/akash/akt_price.py)

    def where(self, key: str) -> str:
        return f"{self.source}:{self.lines[key]}" if key in self.lines else self.source

    @property
    def reclamation_window_s(self) -> float | None:
        return go_duration_s(self.reclamation_window) if self.reclamation_window else None


def load(path: str | Path) -> ProviderFile:
    return parse(textfiles.read_text(path, "provider file", ProviderFileError), str(path))


def parse(text: str, path: str = "<provider>") -> ProviderFile:
    root = textfiles.yaml_tree(text, path, ProviderFileError)
    if not isinstance(root, yaml.MappingNode):
        raise ProviderFileError(f"a provider file is a mapping with {', '.join(REQUIRED)} (m2p provider init "
                                "writes a starter)", where=f"{path}:1")
    _no_secret_in(root, path)
    found = textfiles.fields(root, path, ProviderFileError, "provider", KEYS)
    missing = [k for k in REQUIRED if k not in found]
    if missing:
        raise ProviderFileError(f"{', '.join(missing)} missing (m2p provider init writes a starter)",
                                where=f"{path}:1")
    values: dict[str, Any] = {}
    for key, (node, value) in found.items():
        if key in RECLAIMER_FLAGS:
            if not isinstance(value, bool):
                raise ProviderFileError(f"{key} is true or false, found {textfiles.shown(value)}",
                                        where=textfiles.at(path, node))
            if "reclamation_window" not in found:
                raise ProviderFileError(f"{key} tells the reclaimer, which runs only with a reclamation_window",
                                        where=textfiles.at(path, node))
        elif key == "akt_usd":
            values[key] = _price(path, node, value)
        elif key not in ("wallet", "charts", "acme_dns"):
            values[key] = _scalar(path, key, node, value)
    _check(path, found, values)
    flags = {key: bool(found[key][1]) for key in RECLAIMER_FLAGS if key in found}
    acme = _acme(path, found["acme_dns"][0]) if "acme_dns" in found else None
    charts = {**CHARTS, **({CERT_MANAGER: CERT_MANAGER_VERSION} if acme else {})}
    if "charts" in found:
        charts.update(_charts(path, found["charts"][0], acme is not None))
    return ProviderFile(path, values["domain"].rstrip(".").lower(), _wallet(path, found["wallet"][0]),
                        values["email"], values["ingress_rig"], values["rpc_node"], values.get("website", ""),
                        values.get("organization", ""), values.get("region", ""),
                        values.get("reclamation_window", ""), charts,
                        lines={key: node.start_mark.line + 1 for key, (node, _) in found.items()}, acme_dns=acme,
                        public_address_echo=values.get("public_address_echo", ""),
                        rest_node=values.get("rest_node", ""), akt_usd=values.get("akt_usd"),
                        akt_usd_feed="akt_usd" in found and found["akt_usd"][1] == "feed", **flags)


def go_duration_s(text: str) -> float | None:
    """Seconds of a Go duration (``time.ParseDuration``: ``24h``, ``1h30m``, ``90m``), or None."""
    if not text or _GO_DURATION.sub("", text) != "":
        return None
    return sum(float(n) * _UNIT_S[unit] for n, unit in _GO_DURATION.findall(text))


def _scalar(path: str, key: str, node: yaml.Node, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ProviderFileError(f"{key} is a single value (text), found {type(value).__name__}",
                                where=textfiles.at(path, node))
    if key == "reclamation_window" and not isinstance(value, str):
        raise ProviderFileError(f"reclamation_window {textfiles.shown(value)}: a Go duration with its unit, "
                                "such as 24h (a bare number is no duration)", where=textfiles.at(path, node))
    text = str(value)
    if not text.strip() or not text.isprintable() or len(text) > 253:
        raise ProviderFileError(f"{key} {textfiles.shown(text)}: printable text, 1 to 253 characters",
                                where=textfiles.at(path, node))
    return text


def _check(path: str, found: dict[str, tuple[yaml.Node, Any]], values: dict[str, str]) -> None:
    def bad(key: str, why: str) -> ProviderFileError:
        return ProviderFileError(f"{key} {textfiles.shown(_masked(values[key]))}: {why}",
                                 where=textfiles.at(path, found[key][0]))

    domain = values["domain"].rstrip(".")
    if "." not in domain or checks.canonical_address(domain) != domain.lower() or _is_ip(domain):
        raise bad("domain", "a DNS name you control, such as farm.example.com (provider.<domain> and "
                            "*.ingress.<domain> point at the ingress rig)")
    if not _EMAIL.fullmatch(values["email"]):
        raise bad("email", "an address such as ops@farm.example.com")
    if "public_address_echo" in values and not _url(values["public_address_echo"], ("https",)):
        raise bad("public_address_echo", "an https URL that answers with the caller's IP address as plain text")
    if "website" in values and not _url(values["website"], ("https", "http")):
        raise bad("website", "a URL such as https://farm.example.com")
    if "region" in values and regions.problem(values["region"]):
        raise bad("region", regions.problem(values["region"]))
    if not _url(values["rpc_node"], ("https", "http", "tcp")):
        raise bad("rpc_node", "the RPC node's URL, such as https://rpc.example.com:443 or http://akash-node:26657")
    if "rest_node" in values and not _url(values["rest_node"], ("https", "http")):
        raise bad("rest_node", "the node's REST API URL, such as https://api.example.com:443 or http://akash-node:1317")
    window = values.get("reclamation_window")
    if window is not None:
        seconds = go_duration_s(window)
        if seconds is None:
            raise bad("reclamation_window", "a Go duration such as 24h, 90m or 1h30m")
        if not WINDOW_MIN_S <= seconds <= WINDOW_MAX_S:
            raise bad("reclamation_window", "from 1h to 720h (the chain refuses other windows; AEP-82)")


def _price(path: str, node: yaml.Node, value: object) -> float | None:
    if value == "feed":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_AKT_USD \
            or value != value:
        raise ProviderFileError(f"akt_usd {textfiles.shown(value)}: the USD one AKT is worth, a number such as 0.85 "
                                "(or feed: the price Akash's bid script reads)", where=textfiles.at(path, node))
    return float(value)


def _wallet(path: str, node: yaml.Node) -> Wallet:
    if not isinstance(node, yaml.MappingNode):
        raise ProviderFileError("wallet is a mapping: key_file (the exported key) and passphrase_env (the "
                                "environment variable holding its passphrase)", where=textfiles.at(path, node))
    found = textfiles.fields(node, path, ProviderFileError, "wallet", WALLET_KEYS)
    missing = sorted(WALLET_KEYS - set(found))
    if missing:
        raise ProviderFileError(f"wallet.{missing[0]} missing", where=textfiles.at(path, node))
    address_node, address_text = found["address"]
    if not isinstance(address_text, str) or not address.is_account(address_text):
        raise ProviderFileError(f"wallet.address {textfiles.shown(address_text)}: the provider's akash1... account "
                                "address (provider-services keys show NAME -a); its checksum must match",
                                where=textfiles.at(path, address_node))
    key_node, key_file = found["key_file"]
    env_node, env = found["passphrase_env"]
    if not isinstance(key_file, str) or not key_file.strip():
        raise ProviderFileError("wallet.key_file: the path of the exported key (provider-services keys export)",
                                where=textfiles.at(path, key_node))
    if not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
        raise ProviderFileError("wallet.passphrase_env: the NAME of an environment variable (such as "
                                "AKASH_KEY_PASS), never the passphrase itself", where=textfiles.at(path, env_node))
    resolved = Path(key_file).expanduser()
    return Wallet(address_text, resolved if resolved.is_absolute() else Path(path).parent / resolved, env)


def _charts(path: str, node: yaml.Node, acme: bool) -> dict[str, str]:
    known = {**CHARTS, **({CERT_MANAGER: CERT_MANAGER_VERSION} if acme else {})}
    if not isinstance(node, yaml.MappingNode):
        raise ProviderFileError(f"charts is a mapping of chart: version ({', '.join(known)})",
                                where=textfiles.at(path, node))
    out = {}
    for name, (value_node, value) in textfiles.fields(node, path, ProviderFileError, "charts", set(known)).items():
        if not isinstance(value, str) or not _SEMVER.fullmatch(value):
            raise ProviderFileError(f"charts.{name} {textfiles.shown(value)}: a chart version such as "
                                    f"{known[name]} (quote it)", where=textfiles.at(path, value_node))
        out[name] = value
    return out


def _acme(path: str, node: yaml.Node) -> AcmeDns:
    if not isinstance(node, yaml.MappingNode):
        raise ProviderFileError("acme_dns is a mapping: provider (cloudflare or google), credential_env (the NAME of "
                                "the environment variable holding its credential), project (google)",
                                where=textfiles.at(path, node))
    found = textfiles.fields(node, path, ProviderFileError, "acme_dns", ACME_KEYS)
    for key in ("provider", "credential_env"):
        if key not in found:
            raise ProviderFileError(f"acme_dns.{key} missing", where=textfiles.at(path, node))
    provider_node, provider = found["provider"]
    if provider not in ("cloudflare", "google"):
        raise ProviderFileError(f"acme_dns.provider {textfiles.shown(provider)}: cloudflare or google (the DNS-01 "
                                "providers m2p sets up)", where=textfiles.at(path, provider_node))
    env_node, env = found["credential_env"]
    if not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
        raise ProviderFileError("acme_dns.credential_env: the NAME of an environment variable (such as CF_API_TOKEN), "
                                "never the credential itself", where=textfiles.at(path, env_node))
    project_node, project = found.get("project", (node, ""))
    if provider == "google" and not (isinstance(project, str) and _GCP_PROJECT.fullmatch(project)):
        raise ProviderFileError(f"acme_dns.project {textfiles.shown(project)}: the Google Cloud project that holds "
                                "the domain's zone", where=textfiles.at(path, project_node))
    if provider == "cloudflare" and "project" in found:
        raise ProviderFileError("acme_dns.project is for google only", where=textfiles.at(path, project_node))
    return AcmeDns(provider, env, str(project))


def _no_secret_in(node: yaml.Node, path: str) -> None:
    """A pasted key or mnemonic anywhere in the file is refused at its line, without quoting it."""
    if isinstance(node, yaml.ScalarNode):
        text = str(node.value).strip()
        if _ARMOR in text or _MNEMONIC.match(text.lower()):
            raise ProviderFileError("this looks like the wallet's key or mnemonic: keep it out of the provider "
                                    "file (wallet.key_file names the exported key's file)",
                                    where=textfiles.at(path, node))
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            _no_secret_in(key, path)
            _no_secret_in(value, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _no_secret_in(item, path)


def _masked(text: str) -> str:
    """``text`` with a URL's user and password as ``****``: a message quoting a refused URL shows neither."""
    try:
        url = urlsplit(text)
        if url.username is None and url.password is None:
            return text
        return url._replace(netloc="****@" + url.netloc.rpartition("@")[2]).geturl()
    except ValueError:
        return text


def _url(text: str, schemes: tuple[str, ...]) -> bool:
    try:
        url = urlsplit(text)
        url.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return False
    # No user or password in it: m2p sends none (core/deadline.py), and a message quoting the URL would show it.
    return (url.scheme in schemes and url.username is None and url.password is None
            and checks.canonical_address((url.hostname or "").strip("[]")) is not None)


def _is_ip(text: str) -> bool:
    return checks.canonical_address(text) is not None and text.replace(".", "").isdigit()
