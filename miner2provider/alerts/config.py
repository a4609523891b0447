"""The alert file: the rules' thresholds and the receivers, one YAML file, every mistake an AlertsFileError at its
file:line (docs/alerts.md shows one).

    rules:
      silent_after: 10m          # a rig that has not answered for this long
      repeat_every: 1h           # an alert that still holds is said again at most this often ("never": once)
      temperature_limit_c: 85    # a card at or over it (the agent's own "hot" counts without it)
      miner_grace: 10m           # how long the miner may be down while the rig should mine
      wallet_low: 50             # the provider's wallet under this (its currency), when the provider file names one
      disable: [lease]           # rules not judged: silent, card, temperature, miner, reclaim, provider, wallet, lease
    receivers:
      - {name: hook, type: webhook, url: https://hooks.example.com/m2p}
      - {name: phone, type: telegram, token_env: M2P_TELEGRAM_TOKEN, chat_id: "-1001234"}
      - {name: team, type: discord, url_env: M2P_DISCORD_WEBHOOK}
      - {name: mail, type: email, host: smtp.example.com, port: 587, starttls: true, username: alerts@example.com,
         password_env: M2P_SMTP_PASSWORD, from: alerts@example.com, to: [owner@example.com]}

A secret (a bot token, a Discord webhook's URL, an SMTP password) is never written in the file: the file names the
environment variable that holds it (``*_env``), read when the file is loaded; a variable not set is a mistake at
its line.  A message never quotes a value that could be a secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from miner2provider.core import checks, textfiles
from miner2provider.core.errors import AlertsFileError
from miner2provider.core.inventory import Secret
from miner2provider.timeshare.model import duration_seconds

from .dispatch import Receiver
from .receivers import TELEGRAM_API, TIMEOUT_S, Discord, Telegram, Webhook
from .rules import RULES, Rules
from .smtp import Email

RULE_KEYS = {"silent_after", "repeat_every", "temperature_limit_c", "miner_grace", "wallet_low", "disable"}
COMMON = {"name", "type", "timeout"}
TYPES: dict[str, set[str]] = {
    "webhook": {"url", "url_env"},
    "telegram": {"token_env", "chat_id", "api"},
    "discord": {"url_env"},
    "email": {"host", "port", "starttls", "username", "password_env", "from", "to"},
}
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
ADDRESS = re.compile(r"[^@\s<>,]+@[^@\s<>,]+")
MAX_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class AlertsConfig:
    path: str
    rules: Rules
    receivers: tuple[Receiver, ...]


def load(path: str | Path, environ: Mapping[str, str] | None = None) -> AlertsConfig:
    return parse(textfiles.read_text(path, "alert file", AlertsFileError), str(path),
                 os.environ if environ is None else environ)


def parse(text: str, path: str = "<alerts>", environ: Mapping[str, str] | None = None) -> AlertsConfig:
    env = os.environ if environ is None else environ
    root = textfiles.yaml_tree(text, path, AlertsFileError)
    if not isinstance(root, yaml.MappingNode):
        raise AlertsFileError("an alert file is a mapping with rules and receivers", where=f"{path}:1")
    top = textfiles.fields(root, path, AlertsFileError, "alert file", {"rules", "receivers"})
    if "receivers" not in top:
        raise AlertsFileError("receivers missing: at least one (webhook, telegram, discord or email)",
                              where=f"{path}:1")
    rules = _rules(path, top["rules"][0]) if "rules" in top else Rules()
    node, _ = top["receivers"]
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise AlertsFileError("receivers is a list of receivers, at least one", where=textfiles.at(path, node))
    receivers: list[Receiver] = []
    for item in node.value:
        receiver = _receiver(path, item, env)
        if any(r.name == receiver.name for r in receivers):
            raise AlertsFileError(f"receiver {receiver.name} is named twice", where=textfiles.at(path, item))
        receivers.append(receiver)
    return AlertsConfig(path, rules, tuple(receivers))


def _rules(path: str, node: yaml.Node) -> Rules:
    if not isinstance(node, yaml.MappingNode):
        raise AlertsFileError("rules is a mapping (silent_after, repeat_every, ...)", where=textfiles.at(path, node))
    found = textfiles.fields(node, path, AlertsFileError, "rules", RULE_KEYS)
    kept: dict[str, Any] = {}
    for key, field in (("silent_after", "silent_after_s"), ("miner_grace", "miner_grace_s")):
        if key in found:
            kept[field] = _duration(path, key, *found[key], least=60.0)
    if "repeat_every" in found:
        value_node, value = found["repeat_every"]
        kept["repeat_every_s"] = None if value == "never" else _duration(path, "repeat_every", value_node, value,
                                                                         least=60.0, never=True)
    for key, field, most in (("temperature_limit_c", "temperature_limit_c", 150.0),
                             ("wallet_low", "wallet_low", 1e15)):
        if key in found:
            kept[field] = _number(path, key, *found[key], most=most)
    if "disable" in found:  # not "off": YAML 1.1 reads that key as false
        off_node, off = found["disable"]
        if not isinstance(off, list) or not all(isinstance(rule, str) and rule in RULES for rule in off):
            raise AlertsFileError(f"disable is a list of rules: {', '.join(RULES)}", where=textfiles.at(path, off_node))
        kept["off"] = frozenset(off)
    return Rules(**kept)


def _duration(path: str, key: str, node: yaml.Node, value: object, least: float, never: bool = False) -> float:
    seconds = duration_seconds(value) if isinstance(value, str) else None
    if seconds is None or not least <= seconds <= 7 * 86_400:
        raise AlertsFileError(f"{key} {textfiles.shown(value)}: a duration from 1m to 7d (90s, 10m, 1h)"
                              + (", or never" if never else ""), where=textfiles.at(path, node))
    return seconds


def _number(path: str, key: str, node: yaml.Node, value: object, most: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= most:
        raise AlertsFileError(f"{key} {textfiles.shown(value)}: a number from 0 to {most:g}",
                              where=textfiles.at(path, node))
    return float(value)


def _receiver(path: str, node: yaml.Node, env: Mapping[str, str]) -> Receiver:
    where = textfiles.at(path, node)
    if not isinstance(node, yaml.MappingNode):
        raise AlertsFileError("a receiver is a mapping with name and type", where=where)
    type_node = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == "type"), None)
    kind = type_node.value if isinstance(type_node, yaml.ScalarNode) else None
    if kind not in TYPES:
        raise AlertsFileError(f"a receiver's type is one of {', '.join(TYPES)}",
                              where=textfiles.at(path, type_node) if type_node is not None else where)
    found = textfiles.fields(node, path, AlertsFileError, f"{kind} receiver", COMMON | TYPES[kind])
    name_node, name = found.get("name", (node, None))
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise AlertsFileError("a receiver's name: letters, digits, '.', '_' and '-', up to 63",
                              where=textfiles.at(path, name_node))
    timeout = _duration(path, "timeout", *found["timeout"], least=1.0) if "timeout" in found else TIMEOUT_S
    if timeout > MAX_TIMEOUT_S:
        raise AlertsFileError(f"timeout: at most {MAX_TIMEOUT_S:g} s", where=textfiles.at(path, found["timeout"][0]))
    if kind == "webhook":
        if ("url" in found) == ("url_env" in found):
            raise AlertsFileError("a webhook takes url or url_env (the variable holding it), one of them", where=where)
        url = _secret(path, "url_env", found, env) if "url_env" in found else Secret(_text(path, "url", found))
        _check_url(path, "url_env" if "url_env" in found else "url", found, url.reveal())
        return Webhook(name, url, timeout)
    if kind == "telegram":
        api = _text(path, "api", found) if "api" in found else TELEGRAM_API
        if "api" in found:
            _check_url(path, "api", found, api)
        chat = found.get("chat_id", (node, None))[1]
        if isinstance(chat, bool) or not isinstance(chat, (str, int)) or not str(chat).strip():
            raise AlertsFileError("chat_id: the chat's id (a number, or @channelname)",
                                  where=textfiles.at(path, found.get("chat_id", (node, None))[0]))
        return Telegram(name, _secret(path, "token_env", found, env, node), str(chat), api, timeout)
    if kind == "discord":
        url = _secret(path, "url_env", found, env, node)
        _check_url(path, "url_env", found, url.reveal())
        return Discord(name, url, timeout)
    return _email(path, node, name, found, env, timeout)


def _email(path: str, node: yaml.Node, name: str, found: dict[str, tuple[yaml.Node, Any]], env: Mapping[str, str],
           timeout: float) -> Email:
    host = _text(path, "host", found, node)
    port_node, port = found.get("port", (node, 587))
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise AlertsFileError("port: a number from 1 to 65535 (587 for STARTTLS)", where=textfiles.at(path, port_node))
    tls_node, starttls = found.get("starttls", (node, True))
    if not isinstance(starttls, bool):
        raise AlertsFileError("starttls: true or false", where=textfiles.at(path, tls_node))
    password = _secret(path, "password_env", found, env) if "password_env" in found else None
    if password is not None and not starttls and not checks.is_loopback(host):
        raise AlertsFileError("a password goes only over STARTTLS (starttls: true), or to a server on this machine",
                              where=textfiles.at(path, found["password_env"][0]))
    sender = _text(path, "from", found, node)
    to_node, to = found.get("to", (node, None))
    listed = [to] if isinstance(to, str) else to
    if not isinstance(listed, list) or not listed or not all(isinstance(a, str) and ADDRESS.fullmatch(a)
                                                            for a in [sender, *listed]):
        raise AlertsFileError("from and to: e-mail addresses (to: one or a list)", where=textfiles.at(path, to_node))
    username = _text(path, "username", found) if "username" in found else ""
    return Email(name, host, port, sender, tuple(listed), starttls, username, password, timeout)


def _text(path: str, key: str, found: dict[str, tuple[yaml.Node, Any]], parent: yaml.Node | None = None) -> str:
    if key not in found:
        raise AlertsFileError(f"{key} missing", where=textfiles.at(path, parent) if parent is not None else path)
    node, value = found[key]
    if not isinstance(value, str) or not value.strip() or len(value) > 2000:
        raise AlertsFileError(f"{key}: a text", where=textfiles.at(path, node))
    return value.strip()


def _secret(path: str, key: str, found: dict[str, tuple[yaml.Node, Any]], env: Mapping[str, str],
            parent: yaml.Node | None = None) -> Secret:
    """The secret in the environment variable ``found[key]`` names; its value is never quoted (a token pasted
    where its variable's name goes is said so without showing it)."""
    if key not in found:
        raise AlertsFileError(f"{key} missing: the NAME of the environment variable that holds the secret",
                              where=textfiles.at(path, parent) if parent is not None else path)
    node, value = found[key]
    if not isinstance(value, str) or not ENV_NAME.fullmatch(value):
        raise AlertsFileError(f"{key}: the NAME of an environment variable (such as M2P_ALERT_SECRET), never the "
                              "secret itself", where=textfiles.at(path, node))
    secret = env.get(value, "")
    if not secret.strip():
        raise AlertsFileError(f"{key}: the environment variable {value} is not set", where=textfiles.at(path, node))
    return Secret(secret.strip())


def _check_url(path: str, key: str, found: dict[str, tuple[yaml.Node, Any]], url: str) -> None:
    """https, or http to this machine only (a stand-in, a local relay): a message and a token must not cross a
    network in clear.  The URL itself is never quoted: it may hold a token."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - a port that is no number raises here
    except ValueError:
        parts = parts._replace(scheme="")
    if parts.scheme not in ("http", "https") or not parts.hostname or (
            parts.scheme == "http" and not checks.is_loopback(parts.hostname)):
        raise AlertsFileError(f"{key}: an https:// URL (http:// only to this machine)",
                              where=textfiles.at(path, found[key][0]))
