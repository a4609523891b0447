"""The e-mail receiver of alerts: one message over SMTP with the standard library (smtplib), STARTTLS when the
alert file asks (RFC 3207; the server's certificate verified), a login when it names a password variable, and a
deadline on the whole exchange (core/deadline.py's watchdog holds the socket from its creation, and the TLS socket
before its handshake: Python's own handshake deadline counts from the handshake's start, not the exchange's).
"""

from __future__ import annotations

import smtplib
import socket
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from miner2provider.core.deadline import Watchdog
from miner2provider.core.inventory import Secret

from .receivers import TIMEOUT_S, SendFailed
from .rules import Message

SUBJECT = 120  # characters of the line the subject takes


class _Smtp(smtplib.SMTP):
    """smtplib's client whose every socket the watchdog holds as soon as it exists (the greeting included)."""

    def __init__(self, watchdog: Watchdog) -> None:
        self.watchdog = watchdog
        super().__init__(timeout=watchdog.seconds)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        sock = super()._get_socket(host, port, timeout)  # type: ignore[misc]
        self.watchdog.watch(sock)
        return sock  # type: ignore[no-any-return]


class _WatchedTls:
    """The context STARTTLS wraps the socket with: the watchdog's own TLS wrap (Watchdog.tls), where smtplib would
    wrap and shake hands in one call, the wrapping taking the descriptor from the socket the watchdog held."""

    def __init__(self, context: ssl.SSLContext, watchdog: Watchdog) -> None:
        self.context, self.watchdog = context, watchdog

    def wrap_socket(self, sock: socket.socket, server_hostname: str | None = None) -> ssl.SSLSocket:
        return self.watchdog.tls(self.context, sock, server_hostname)


@dataclass(frozen=True)
class Email:
    name: str
    host: str
    port: int
    sender: str
    to: tuple[str, ...]
    starttls: bool = True
    username: str = ""
    password: Secret | None = None
    timeout_s: float = TIMEOUT_S
    kind = "email"

    def send(self, message: Message) -> None:
        mail = EmailMessage()
        mail["From"], mail["To"] = self.sender, ", ".join(self.to)
        mail["Subject"] = message.line[:SUBJECT]
        mail["Date"], mail["Message-ID"] = formatdate(message.at), make_msgid("m2p")
        mail.set_content(f"{message.line}\n\nalert: {message.key} ({message.kind})\n")
        watchdog = Watchdog(self.timeout_s)
        error, timed_out = "", False
        try:
            with watchdog:
                client = _Smtp(watchdog)
                try:
                    self._exchange(client, mail, watchdog)
                finally:
                    watchdog.release()
                    client.close()
        except smtplib.SMTPAuthenticationError as exc:
            error = f"the server refused the login (SMTP {exc.smtp_code})"
        except smtplib.SMTPNotSupportedError:
            error = "the server offers no STARTTLS (or no login)"
        except smtplib.SMTPResponseException as exc:  # its text is the server's: the code says enough
            error = f"the server refused the message (SMTP {exc.smtp_code})"
        except smtplib.SMTPRecipientsRefused:
            error = "the server refused every recipient"
        except ssl.SSLCertVerificationError as exc:
            error = f"its TLS certificate is not trusted ({exc.verify_message or 'unverified'})"
        except (smtplib.SMTPException, OSError) as exc:
            error = f"no answer ({getattr(exc, 'strerror', None) or type(exc).__name__})"
            # The socket's own timeout is the deadline's twin and may fire just before the watchdog (smtplib says it
            # as a disconnection, the timeout its context).
            timed_out = isinstance(exc, TimeoutError) or isinstance(exc.__context__, TimeoutError)
        if watchdog.fired or timed_out:
            raise SendFailed(f"no whole exchange within {self.timeout_s:g} s")
        if error:
            raise SendFailed(error)

    def _exchange(self, client: _Smtp, mail: EmailMessage, watchdog: Watchdog) -> None:
        client._host = self.host  # type: ignore[attr-defined]  # what starttls checks the certificate against (smtplib sets it only in __init__)
        client.connect(self.host, self.port)
        client.ehlo()
        if self.starttls:
            client.starttls(context=_WatchedTls(ssl.create_default_context(), watchdog))  # type: ignore[call-overload]
            client.ehlo()
        if self.password is not None:
            client.login(self.username, self.password.reveal())
        client.send_message(mail)
        client.quit()

    def secrets(self) -> tuple[Secret, ...]:
        return (self.password,) if self.password is not None else ()
