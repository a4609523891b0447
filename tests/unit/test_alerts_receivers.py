"""The alert receivers against their loopback stand-ins (sandbox/m2p_sandbox/alert_receivers.py): the request each
sends is the shape the real service takes; a receiver that fails (500, a hang, a refused connection, a trickled
answer, a redirect) is tried again with backoff, never holds the sweep, and no secret reaches a reason."""

from __future__ import annotations

import email
import email.policy
import socket
import threading
import time

import pytest

from m2p_sandbox.alert_receivers import DiscordStandin, SmtpStandin, TelegramStandin, WebhookStandin
from miner2provider.alerts.dispatch import Outbox, send_once
from miner2provider.alerts.receivers import Discord, SendFailed, Telegram, Webhook, post_json
from miner2provider.alerts.rules import Message
from miner2provider.alerts.smtp import Email
from miner2provider.core.inventory import Secret

TOKEN = "7123456789:AAHstandinBotTokenNeverShown_0123456"
PASSWORD = "smtp-password-never-shown-42"
MESSAGE = Message("firing", "temperature/rig-1/GPU-a", "temperature", "rig-1", "rig-1: card 0 at 91 °C @everyone",
                  1_700_000_000.0)


@pytest.fixture
def served(request):
    made = []

    def make(standin):
        made.append(standin)
        return standin
    yield make
    for standin in made:
        standin.close()


def test_the_webhook_posts_the_message_as_json(served):
    hook = served(WebhookStandin())
    Webhook("hook", Secret(hook.url + "/m2p?key=abc"), 5).send(MESSAGE)
    assert hook.received == [{"kind": "firing", "key": "temperature/rig-1/GPU-a", "rule": "temperature",
                              "rig": "rig-1", "text": MESSAGE.line, "at": 1_700_000_000.0}]


def test_telegram_gets_send_message_with_chat_id_and_plain_text(served):
    bot = served(TelegramStandin(TOKEN))
    Telegram("phone", Secret(TOKEN), "-1001234", bot.url, 5).send(MESSAGE)
    assert bot.received == [{"chat_id": "-1001234", "text": MESSAGE.line}]  # no parse_mode: nothing read as markup


def test_telegram_with_a_wrong_token_fails_without_showing_either_token(served):
    bot = served(TelegramStandin(TOKEN))
    wrong = Telegram("phone", Secret("999:wrong-token-also-secret"), "-1", bot.url, 5)
    why = send_once(wrong, MESSAGE)
    assert why == "HTTP 401 (HTTP 401: the bot token is wrong; 400: the chat_id is)"
    assert TOKEN not in why and "wrong-token" not in why and bot.received == []


def test_discord_gets_content_with_mentions_off(served):
    hook = served(DiscordStandin())
    Discord("team", Secret(hook.webhook_url), 5).send(MESSAGE)
    assert hook.received == [{"content": MESSAGE.line, "allowed_mentions": {"parse": []}}]
    long = Message("firing", "k", "card", "r", "x" * 5000, 0.0)
    Discord("team", Secret(hook.webhook_url), 5).send(long)  # cut to Discord's 2000, not refused
    assert len(hook.received[-1]["content"]) == 2000


def test_discord_with_a_wrong_token_is_401_and_the_url_is_not_said(served):
    hook = served(DiscordStandin())
    wrong = Discord("team", Secret(hook.webhook_url + "x"), 5)
    assert send_once(wrong, MESSAGE) == "HTTP 401"


def test_email_over_starttls_with_a_login(served, monkeypatch):
    server = served(SmtpStandin(tls=True, password=PASSWORD))
    monkeypatch.setenv("SSL_CERT_FILE", server.ca_file)  # the stand-in's CA, as a real one is in the system store
    Email("mail", "127.0.0.1", server.port, "alerts@farm.example", ("owner@farm.example",), True,
          "alerts@farm.example", Secret(PASSWORD), 5).send(MESSAGE)
    (mail,) = server.received
    assert mail["tls"] and mail["to"] == ["TO:<owner@farm.example>"]
    parsed = email.message_from_bytes(mail["data"].encode(), policy=email.policy.default)
    assert parsed["Subject"] == MESSAGE.line and parsed.get_content().startswith(MESSAGE.line)
    assert PASSWORD not in mail["data"]


def test_email_refuses_an_untrusted_certificate_and_a_wrong_password_without_saying_it(served, monkeypatch):
    server = served(SmtpStandin(tls=True, password=PASSWORD))
    mail = Email("mail", "127.0.0.1", server.port, "a@b.example", ("c@d.example",), True, "alerts@farm.example",
                 Secret("not-the-password-either"), 5)
    assert send_once(mail, MESSAGE).startswith("its TLS certificate is not trusted")
    monkeypatch.setenv("SSL_CERT_FILE", server.ca_file)
    why = send_once(mail, MESSAGE)
    assert why == "the server refused the login (SMTP 535)" and server.received == []


def test_email_without_starttls_when_the_server_wants_a_login_first(served):
    server = served(SmtpStandin(tls=False, password=PASSWORD))
    mail = Email("mail", "127.0.0.1", server.port, "a@b.example", ("c@d.example",), False)
    assert send_once(mail, MESSAGE) == "the server refused the message (SMTP 530)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("behaviour", "expected", "most_s"), [
    ("status", "HTTP 500", 2.0),
    ("redirect", "HTTP 302 (a redirect: not followed)", 2.0),
    ("hang", "no whole answer within 1.5 s", 3.0),
    ("trickle", "no whole answer within 1.5 s", 3.0),
])
def test_a_failing_webhook_says_why_within_its_deadline(served, behaviour, expected, most_s):
    target = served(WebhookStandin())
    hook = served(WebhookStandin(behaviour, where=target.url + "/stolen"))
    start = time.monotonic()
    with pytest.raises(SendFailed) as failed:
        post_json(hook.url + "/m2p?token=s3cr3t-in-query", {"text": "x"}, 1.5)
    assert str(failed.value) == expected and time.monotonic() - start < most_s
    assert "s3cr3t" not in str(failed.value) and target.requests == 0  # a redirect is never followed


def test_a_refused_connection_is_said():
    with pytest.raises(SendFailed, match=r"^no answer \(Connection refused\)$"):
        post_json(f"http://127.0.0.1:{free_port()}/", {"text": "x"}, 2)


def test_a_failing_receiver_is_retried_with_backoff_and_never_holds_the_sweep_or_the_others(served):
    down = served(WebhookStandin("hang"))
    fine = served(WebhookStandin())
    outbox = Outbox([Webhook("down", Secret(down.url + "/hook-secret-path"), 1.0),
                     Webhook("fine", Secret(fine.url), 5)], attempts=3, backoff_s=0.2, queue_size=2)
    try:
        start = time.monotonic()
        outbox.submit([MESSAGE] * 5)  # the sweep's call
        assert time.monotonic() - start < 0.5
        deadline = time.monotonic() + 5
        while len(fine.received) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(fine.received) >= 2 and time.monotonic() - start < 3  # the hung one (3.6 s a message) holds nobody
        assert outbox.wait(20)
        down_account, fine_account = outbox.delivery["down"], outbox.delivery["fine"]
        assert down.requests == 3 * down_account.given_up and down_account.given_up >= 2
        assert down_account.sent == 0 and down_account.retries == 2 * down_account.given_up
        assert down_account.dropped == 5 - down_account.given_up  # a full queue drops, counted, never waits
        assert down_account.last_error == "no whole answer within 1 s" and "hook-secret" not in str(outbox.delivery)
        assert fine_account.sent + fine_account.dropped == 5
    finally:
        outbox.close()


def test_an_unforeseen_error_in_a_receiver_is_contained_and_its_secret_masked():
    class Broken:
        name, kind = "broken", "webhook"

        def send(self, message: Message) -> None:
            raise RuntimeError(f"boom at https://example.com/{TOKEN}")

        def secrets(self) -> tuple[Secret, ...]:
            return (Secret(TOKEN),)

    why = send_once(Broken(), MESSAGE)
    assert why == "RuntimeError: boom at https://example.com/********"


def cut_at_the_deadline(serve, starttls: bool, timeout_s: float) -> None:
    """An e-mail sent to a loopback server that answers one connection with ``serve(conn, stop)`` (``stop``: set when
    the test ends) is given up as "no whole exchange" in under 3 s."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept() -> None:
        conn, _ = listener.accept()
        with conn:
            serve(conn, stop)

    threading.Thread(target=accept, daemon=True).start()
    mail = Email("mail", "127.0.0.1", listener.getsockname()[1], "a@b.example", ("c@d.example",), starttls,
                 timeout_s=timeout_s)
    try:
        start = time.monotonic()
        assert send_once(mail, MESSAGE) == f"no whole exchange within {timeout_s:g} s"
        assert time.monotonic() - start < 3.0
    finally:
        stop.set()
        listener.close()


def trickled(conn: socket.socket, data: bytes, stop: threading.Event) -> None:
    """``data`` a byte every 0.3 s (each read gets one before any per-read timeout), then silence."""
    for byte in data:
        if stop.wait(0.3):
            return
        conn.sendall(bytes([byte]))
    stop.wait(10)


@pytest.mark.parametrize("trickle", [False, True])
def test_an_smtp_server_that_hangs_or_trickles_its_greeting_is_cut_at_the_deadline(trickle):
    """A greeting never sent, or sent a byte every 0.3 s (a per-read timeout alone would wait for ever)."""
    cut_at_the_deadline(lambda conn, stop: trickled(conn, b"220 slow ESMTP\r\n" * 20 if trickle else b"", stop),
                        starttls=False, timeout_s=1.5)


def test_an_smtp_server_that_trickles_its_starttls_handshake_is_cut_at_the_deadline():
    """The greeting comes late (1.5 s of the 2 s deadline), then after "220 ready to start TLS" the server sends its
    TLS handshake a byte every 0.3 s.  Python's handshake has a deadline of its own, the socket's timeout counted
    from the handshake's start (3.5 s in all here): only a deadline on the whole exchange ends it at 2 s."""
    def serve(conn: socket.socket, stop: threading.Event) -> None:
        with conn.makefile("rb") as lines:
            if stop.wait(1.5):
                return
            conn.sendall(b"220 mail.example ESMTP\r\n")
            lines.readline()  # EHLO
            conn.sendall(b"250-mail.example\r\n250 STARTTLS\r\n")
            lines.readline()  # STARTTLS
            conn.sendall(b"220 ready to start TLS\r\n")
            trickled(conn, b"\x16\x03\x03\x00\x7a" + b"\x02" * 200, stop)  # a ServerHello's record, never finished

    cut_at_the_deadline(serve, starttls=True, timeout_s=2.0)
