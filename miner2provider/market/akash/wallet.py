"""The provider's wallet, read when the provider is installed and never kept: the exported key's text
from ``wallet.key_file`` (a file only its owner may read, as ssh insists for a private key) and its
passphrase from the environment variable ``wallet.passphrase_env``.  Both go only into the wallet
Secret (``values``, which stack.build puts there); no message here quotes either."""

from __future__ import annotations

import base64
import os
import re
import stat
from collections.abc import Mapping

from miner2provider.core import textfiles
from miner2provider.core.errors import ProviderError
from miner2provider.market.akash.provider_file import ProviderFile

MAX_KEY_BYTES = 16 * 1024  # an armored secp256k1 key is about 400 bytes
# `keys export`'s armor (cosmos-sdk crypto/armor.go): header lines, a blank line, base64, a checksum line.
ARMORED_KEY = re.compile(r"-----BEGIN TENDERMINT PRIVATE KEY-----\n(?:[A-Za-z-]+: [^\n]*\n)+\n[A-Za-z0-9+/=\n]+"
                         r"-----END TENDERMINT PRIVATE KEY-----\n?")


def key_text(provider: ProviderFile) -> str:
    path = provider.wallet.key_file
    shown = textfiles.shown(str(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ProviderError(f"cannot read the wallet's key file {shown}: {exc.strerror} (export it with "
                            "provider-services keys export NAME > FILE, then chmod 600 FILE)") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ProviderError(f"the wallet's key file {shown} is not a regular file")
        if info.st_mode & 0o077:
            raise ProviderError(f"the wallet's key file {shown} can be read by others (mode "
                                f"{stat.S_IMODE(info.st_mode):04o}): chmod 600 it, as its owner")
        if info.st_uid != os.geteuid():
            raise ProviderError(f"the wallet's key file {shown} belongs to another user (uid {info.st_uid}): "
                                "it must be yours alone")
        data = os.read(fd, MAX_KEY_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_BYTES:
        raise ProviderError(f"the wallet's key file {shown} is larger than an exported key is")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ProviderError(f"the wallet's key file {shown} is not text (an exported key is armored text)") from None


def passphrase(provider: ProviderFile, environ: Mapping[str, str]) -> str:
    name = provider.wallet.passphrase_env
    if name not in environ:
        raise ProviderError(f"the environment variable {name} (wallet.passphrase_env in {provider.source}) is not "
                            "set: export it with the key's passphrase before this command")
    return environ[name]


def chart_values(provider: ProviderFile, key: str, secret: str) -> dict[str, str]:
    """The chart's ``key`` and ``keysecret`` (base64 of the armored key and of its passphrase).  Pure."""
    if not ARMORED_KEY.fullmatch(key.replace("\r\n", "\n")):
        raise ProviderError(f"{provider.wallet.key_file}: not an exported key (provider-services keys export NAME: "
                            "an armored TENDERMINT PRIVATE KEY block)")
    if not secret:
        raise ProviderError(f"the environment variable {provider.wallet.passphrase_env} (wallet.passphrase_env) "
                            "is empty or unset: it must hold the exported key's passphrase")
    return {"key": base64.b64encode(key.encode()).decode(), "keysecret": base64.b64encode(secret.encode()).decode()}


def values(provider: ProviderFile, environ: Mapping[str, str]) -> dict[str, str]:
    """The chart's wallet values, from the key file and the passphrase variable ``provider`` names."""
    return chart_values(provider, key_text(provider), passphrase(provider, environ))


def problem(provider: ProviderFile, environ: Mapping[str, str]) -> str:
    """Why the wallet would not do, or "" (the key file private and armored, the passphrase variable set)."""
    try:
        values(provider, environ)
    except ProviderError as exc:
        return exc.message
    return ""
