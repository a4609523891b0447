"""Values that go from the user into rigs' configs and provider attributes, checked in one place:
a region name, an API server URL, a host address, an SSH public key.  Pure."""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?")  # RFC 1123, ASCII
_NUMERIC = re.compile(r"(0[xX][0-9a-fA-F]+|[0-9]+)(\.(0[xX][0-9a-fA-F]+|[0-9]+)){0,3}")
# A region name in a label value's characters; which names a marketplace takes is its own rule
# (Marketplace.region_problem, market/base.py).
_REGION = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
# OpenSSH's public key types (ssh-keygen(1)); options before the type (command=, from=) are refused.
_SSH_KEY = re.compile(r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(?:256|384|521)|sk-ssh-ed25519@openssh\.com|"
                      r"sk-ecdsa-sha2-nistp256@openssh\.com) ([A-Za-z0-9+/]{20,}={0,3})(?: .*)?")


def ssh_public_key(text: str, comment: str) -> str:
    """``text`` (a .pub file) as one authorized_keys line with ``comment`` instead of its own (which may name the
    owner's machine); ValueError when it is not exactly one OpenSSH public key."""
    found = _SSH_KEY.fullmatch(text.strip())
    if found is None:
        raise ValueError("not one OpenSSH public key (TYPE BASE64 [COMMENT])")
    return f"{found[1]} {found[2]} {comment}"


def canonical_address(text: str) -> str | None:
    """An IP address in its usual spelling (``127.0.0.01`` is ``127.0.0.1``, as inet_aton reads it), or an
    RFC 1123 DNS name as given; None for anything else (``;``, ``$(...)``, spaces, a newline)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if _NUMERIC.fullmatch(text):  # a numbers-only name is an IPv4 address to the resolver, in any spelling
        try:
            return socket.inet_ntoa(socket.inet_aton(text))
        except OSError:
            return None
    return text if _HOSTNAME.fullmatch(text) else None


def is_region(text: str) -> bool:
    return bool(_REGION.fullmatch(text))


def is_api_server(text: str) -> bool:
    """``https://HOST[:PORT]`` (a path of ``/`` at most): what the agents' and the dashboard's Kubernetes client
    is given.  Never ``http://``, which would carry their tokens in clear; kube-apiserver speaks only TLS, and so
    does the sandbox's stand-in."""
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        return False
    try:
        url = urlsplit(text)
        url.port  # noqa: B018 - raises ValueError for a port that is not 0-65535
    except ValueError:
        return False
    host = (url.hostname or "").strip("[]")
    return (url.scheme == "https" and url.path in ("", "/") and not url.query and not url.fragment
            and not url.username and canonical_address(host) is not None)


def is_loopback(host: str) -> bool:
    """``host`` is this machine: localhost or a loopback address (the dashboard's --bind, an alert URL's host)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
