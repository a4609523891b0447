"""STAND-INS for the alert receivers m2p sends to (issue 56), on loopback: nothing here can reach Telegram, Discord
or a mail server, and a test must see what each one would have been sent.

- ``WebhookStandin``: a generic webhook: takes ``POST`` with ``Content-Type: application/json`` and a JSON object,
  else 415 / 400.  ``behaviour`` makes it fail as real endpoints do: a status (500), a redirect (302 to ``where``),
  a hang (no answer), a trickle (the answer a byte every 0.3 s).
- ``TelegramStandin``: the Bot API's ``POST /bot<token>/sendMessage`` (core.telegram.org/bots/api: "Making
  requests", "sendMessage"): a token other than its own is 401 ``{"ok": false, "error_code": 401, "description":
  "Unauthorized"}``; another method is 404 ``Not Found``; ``chat_id`` missing or ``text`` empty or over 4096
  characters is 400 ``Bad Request: ...`` (the API's own descriptions); taken: 200 ``{"ok": true, "result":
  Message}``.
- ``DiscordStandin``: a webhook's ``POST /api/webhooks/<id>/<token>`` (discord.com/developers/docs/resources/webhook
  "Execute Webhook"): a wrong token is 401 ``{"message": "Invalid Webhook Token", "code": 50027}``, an empty
  message 400 ``{"message": "Cannot send an empty message", "code": 50006}``, content over 2000 characters 400
  (code 50035, "Invalid Form Body"); taken: 204 No Content.
- ``SmtpStandin``: an SMTP server (RFC 5321) with STARTTLS (RFC 3207, a certificate from the test CA) and AUTH PLAIN
  (RFC 4954), advertised only once TLS is up (as RFC 4954 asks of a server and as Postfix's
  ``smtpd_tls_auth_only`` does); a wrong password is 535 5.7.8; no mail is taken before a login when one is set.
  Python 3.12 has no smtpd, so it is written here on socketserver.
"""

from __future__ import annotations

import base64
import json
import socketserver
import ssl
import tempfile
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from m2p_sandbox import pki
from m2p_sandbox.served import Served, reply_json, serve_in_background


def _handler(owner: Any) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            owner.handle(self, self.path, self.headers.get("Content-Type", ""), body)

        def do_GET(self) -> None:
            reply_json(self, 405, {"message": "405: Method Not Allowed", "code": 0})

    return Handler


def _json(content_type: str, body: bytes) -> Any:
    if content_type.split(";")[0].strip().lower() != "application/json":
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


class WebhookStandin(Served):
    def __init__(self, behaviour: str = "ok", status: int = 500, where: str = "http://127.0.0.1:9/") -> None:
        self.behaviour, self.status, self.where = behaviour, status, where
        self.received: list[dict[str, Any]] = []
        self.requests = 0
        self._serve_on("127.0.0.1", 0, _handler(self))

    def handle(self, handler: BaseHTTPRequestHandler, path: str, content_type: str, body: bytes) -> None:
        self.requests += 1
        if self.behaviour == "hang":
            time.sleep(30)
            return
        if self.behaviour == "redirect":
            handler.send_response(302)
            handler.send_header("Location", self.where)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        if self.behaviour == "status":
            reply_json(handler, self.status, {"error": "stand-in failure"})
            return
        doc = _json(content_type, body)
        if doc is None and content_type.split(";")[0].strip().lower() != "application/json":
            reply_json(handler, 415, {"error": "JSON only"})
            return
        if not isinstance(doc, dict):
            reply_json(handler, 400, {"error": "not a JSON object"})
            return
        if self.behaviour == "trickle":
            handler.send_response(200)
            handler.send_header("Content-Length", "40")
            handler.end_headers()
            for _ in range(40):  # 12 s for the whole answer, a byte every 0.3 s: a per-read timeout never fires
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(0.3)
            return
        self.received.append(doc)
        reply_json(handler, 200, {"ok": True})


class TelegramStandin(Served):
    def __init__(self, token: str) -> None:
        self.token = token
        self.received: list[dict[str, Any]] = []
        self._serve_on("127.0.0.1", 0, _handler(self))

    def handle(self, handler: BaseHTTPRequestHandler, path: str, content_type: str, body: bytes) -> None:
        bot, _, method = path.lstrip("/").partition("/")
        if bot != f"bot{self.token}":
            reply_json(handler, 401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
            return
        if method.split("?")[0] != "sendMessage":
            reply_json(handler, 404, {"ok": False, "error_code": 404, "description": "Not Found"})
            return
        doc = _json(content_type, body)
        if not isinstance(doc, dict) or "chat_id" not in doc:
            reply_json(handler, 400, {"ok": False, "error_code": 400, "description": "Bad Request: chat_id is empty"})
            return
        text = doc.get("text")
        if not isinstance(text, str) or not text.strip():
            reply_json(handler, 400, {"ok": False, "error_code": 400,
                                      "description": "Bad Request: message text is empty"})
            return
        if len(text) > 4096:
            reply_json(handler, 400, {"ok": False, "error_code": 400,
                                      "description": "Bad Request: message is too long"})
            return
        self.received.append(doc)
        reply_json(handler, 200, {"ok": True, "result": {"message_id": len(self.received), "date": int(time.time()),
                                                         "chat": {"id": doc["chat_id"]}, "text": text}})


class DiscordStandin(Served):
    def __init__(self, webhook_id: str = "1234567890", token: str = "standin-webhook-token-abcdef") -> None:
        self.webhook_id, self.token = webhook_id, token
        self.received: list[dict[str, Any]] = []
        self._serve_on("127.0.0.1", 0, _handler(self))

    @property
    def webhook_url(self) -> str:
        return f"{self.url}/api/webhooks/{self.webhook_id}/{self.token}"

    def handle(self, handler: BaseHTTPRequestHandler, path: str, content_type: str, body: bytes) -> None:
        if path.split("?")[0] != f"/api/webhooks/{self.webhook_id}/{self.token}":
            reply_json(handler, 401, {"message": "Invalid Webhook Token", "code": 50027})
            return
        doc = _json(content_type, body)
        content = doc.get("content") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or not (isinstance(content, str) and content.strip()) and not doc.get("embeds"):
            reply_json(handler, 400, {"message": "Cannot send an empty message", "code": 50006})
            return
        if isinstance(content, str) and len(content) > 2000:
            reply_json(handler, 400, {"message": "Invalid Form Body", "code": 50035})
            return
        self.received.append(doc)
        handler.send_response(204)
        handler.end_headers()


class _SmtpHandler(socketserver.StreamRequestHandler):
    server: _SmtpServer

    def say(self, line: str) -> None:
        self.wfile.write(line.encode() + b"\r\n")
        self.wfile.flush()

    def handle(self) -> None:
        owner = self.server.owner
        tls = authed = False
        sender, rcpt = "", list[str]()
        self.say("220 m2p-standin ESMTP")
        while True:
            raw = self.rfile.readline(1000)
            if not raw:
                return
            verb, _, arg = raw.decode("utf-8", "replace").rstrip("\r\n").partition(" ")
            verb = verb.upper()
            if verb in ("EHLO", "HELO"):
                offers = ["250-m2p-standin", "250-8BITMIME"]
                if owner.context is not None and not tls:
                    offers.append("250-STARTTLS")
                if owner.password is not None and (tls or owner.context is None):
                    offers.append("250-AUTH PLAIN")
                self.say("\r\n".join([*offers, "250 SMTPUTF8"]))
            elif verb == "STARTTLS" and owner.context is not None and not tls:
                self.say("220 2.0.0 Ready to start TLS")
                self.connection = owner.context.wrap_socket(self.connection, server_side=True)
                self.rfile = self.connection.makefile("rb")
                self.wfile = self.connection.makefile("wb")
                tls = True
            elif verb == "AUTH" and owner.password is not None and (tls or owner.context is None):
                mechanism, _, initial = arg.partition(" ")
                try:
                    _, user, password = base64.b64decode(initial, validate=True).decode().split("\0")
                except (ValueError, UnicodeDecodeError):
                    self.say("501 5.5.2 Cannot decode response")
                    continue
                if mechanism.upper() == "PLAIN" and (user, password) == (owner.username, owner.password):
                    authed = True
                    self.say("235 2.7.0 Authentication successful")
                else:
                    self.say("535 5.7.8 Authentication credentials invalid")
            elif verb == "MAIL":
                if owner.password is not None and not authed:
                    self.say("530 5.7.0 Authentication required")
                    continue
                sender, rcpt = arg, []
                self.say("250 2.1.0 Ok")
            elif verb == "RCPT" and sender:
                rcpt.append(arg)
                self.say("250 2.1.5 Ok")
            elif verb == "DATA" and rcpt:
                self.say("354 End data with <CR><LF>.<CR><LF>")
                lines = []
                while (line := self.rfile.readline(10_000)) not in (b".\r\n", b""):
                    lines.append(line[1:] if line.startswith(b"..") else line)
                owner.received.append({"from": sender, "to": rcpt, "data": b"".join(lines).decode(), "tls": tls})
                sender, rcpt = "", []
                self.say("250 2.0.0 Ok: queued")
            elif verb == "QUIT":
                self.say("221 2.0.0 Bye")
                return
            elif verb in ("RSET", "NOOP"):
                self.say("250 2.0.0 Ok")
            else:
                self.say("503 5.5.1 Error: bad sequence of commands" if verb in ("RCPT", "DATA", "AUTH", "STARTTLS")
                         else "502 5.5.2 Error: command not recognized")


class _SmtpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: SmtpStandin


class SmtpStandin:
    def __init__(self, tls: bool = True, username: str = "alerts@farm.example", password: str | None = None) -> None:
        self.username, self.password = username, password
        self.received: list[dict[str, Any]] = []
        self.ca_file = ""
        self.context: ssl.SSLContext | None = None
        if tls:
            authority = pki.Authority("m2p-standin-smtp-ca")
            cert, key = authority.issue("smtp-standin", address="127.0.0.1")
            folder = Path(tempfile.mkdtemp(prefix="m2p-smtp-standin-"))
            (folder / "cert.pem").write_bytes(cert)
            (folder / "key.pem").write_bytes(key)
            (folder / "ca.pem").write_bytes(authority.pem)
            self.ca_file = str(folder / "ca.pem")  # what a client trusts (SSL_CERT_FILE in the tests)
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
        self.server = _SmtpServer(("127.0.0.1", 0), _SmtpHandler)
        self.server.owner = self
        self.thread = serve_in_background(self.server)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
