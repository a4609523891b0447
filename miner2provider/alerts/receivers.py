"""The HTTP receivers of alerts: a generic webhook (the message as JSON), Telegram's Bot API ``sendMessage`` and a
Discord webhook, each one POST with a deadline on the whole exchange (core/deadline.py), no redirect followed
(one would send the message, and a secret in its URL, wherever the answer points), TLS verified.

A failure is ``SendFailed`` whose reason names no secret: a token or webhook URL lives in a ``Secret`` and goes
only into the request, never into a reason, log or message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from miner2provider.core.deadline import NoAnswer, exchange
from miner2provider.core.inventory import Secret

from .rules import Message

TIMEOUT_S = 10.0  # a receiver's whole exchange, by default
MAX_ANSWER = 64 << 10  # bytes of an answer read, a longer one a failure (Telegram's is a few hundred)
# Telegram: a message's text is 1 to 4,096 characters after entities parsing (core.telegram.org/bots/api#sendmessage).
TELEGRAM_TEXT = 4 * 1024
# Discord: a webhook message's content is up to 2000 characters (discord.com/developers/docs/resources/webhook,
# "Execute Webhook").
DISCORD_CONTENT = 2000
TELEGRAM_API = "https://api.telegram.org"


class SendFailed(Exception):
    """A receiver did not take a message; ``str()`` is the reason, free of secrets."""


def post_json(url: str, body: dict[str, Any], timeout_s: float) -> tuple[int, bytes]:
    """POST ``body`` as JSON to ``url`` within ``timeout_s`` for the whole exchange: (status, answer), or SendFailed
    for no answer, a redirect (not followed) or a status other than 2xx.  Reasons never quote the URL."""
    try:
        return exchange(url, timeout_s, MAX_ANSWER, method="POST", body=json.dumps(body).encode(),
                        headers={"Content-Type": "application/json", "User-Agent": "m2p-alerts"})
    except NoAnswer as exc:
        raise SendFailed(str(exc)) from None


@dataclass(frozen=True)
class Webhook:
    """The message as JSON (``{"kind", "key", "rule", "rig", "text", "at"}``) POSTed to the owner's URL."""

    name: str
    url: Secret  # may carry a token in its path or query: kept secret whether read from the file or a variable
    timeout_s: float = TIMEOUT_S
    kind = "webhook"

    def send(self, message: Message) -> None:
        post_json(self.url.reveal(), {"kind": message.kind, "key": message.key, "rule": message.rule,
                                      "rig": message.rig, "text": message.line, "at": message.at}, self.timeout_s)

    def secrets(self) -> tuple[Secret, ...]:
        return (self.url,)


@dataclass(frozen=True)
class Telegram:
    """Telegram's Bot API: ``POST https://api.telegram.org/bot<token>/sendMessage`` with ``chat_id`` and ``text``
    (core.telegram.org/bots/api#making-requests: "All queries must be made using HTTPS ... in the form
    https://api.telegram.org/bot<token>/METHOD_NAME", application/json accepted; the answer is a JSON object whose
    ``ok`` says whether it was taken, with ``description`` when not).  Plain text: no parse_mode, so nothing a rig
    says is read as markup."""

    name: str
    token: Secret
    chat_id: str
    api: str = TELEGRAM_API  # a stand-in's address in the tests
    timeout_s: float = TIMEOUT_S
    kind = "telegram"

    def send(self, message: Message) -> None:
        try:
            _, answer = post_json(f"{self.api.rstrip('/')}/bot{self.token.reveal()}/sendMessage",
                                  {"chat_id": self.chat_id, "text": message.line[:TELEGRAM_TEXT]}, self.timeout_s)
        except SendFailed as exc:
            raise SendFailed(f"{exc} (HTTP 401: the bot token is wrong; 400: the chat_id is)"
                             if str(exc) in ("HTTP 401", "HTTP 400", "HTTP 404") else str(exc)) from None
        try:
            ok = json.loads(answer).get("ok") is True
        except (ValueError, AttributeError):
            ok = False
        if not ok:
            raise SendFailed("Telegram did not say ok")

    def secrets(self) -> tuple[Secret, ...]:
        return (self.token,)


@dataclass(frozen=True)
class Discord:
    """A Discord webhook: ``POST <webhook URL>`` with JSON ``{"content": ...}``, answered 204 No Content
    (discord.com/developers/docs/resources/webhook#execute-webhook).  ``allowed_mentions`` with no ``parse`` keeps
    an ``@everyone`` in a rig's words from pinging the channel (discord.com/developers/docs/resources/message,
    "Allowed Mentions Object").  The URL holds the webhook's token: it is a secret."""

    name: str
    url: Secret
    timeout_s: float = TIMEOUT_S
    kind = "discord"

    def send(self, message: Message) -> None:
        post_json(self.url.reveal(), {"content": message.line[:DISCORD_CONTENT], "allowed_mentions": {"parse": []}},
                  self.timeout_s)

    def secrets(self) -> tuple[Secret, ...]:
        return (self.url,)
