"""Akash account addresses: bech32 (BIP-173) with the human-readable part ``akash``.  Pure.

The provider chart's ``from`` is the provider's account address (provider-playbooks
templates/provider.yaml.j2; the chart's init imports the key under that name and writes it as the
provider's ``owner``).  m2p never decrypts the exported key to derive it, so the owner writes it in
provider.yml and m2p checks its checksum here: a mistyped address is refused before it reaches the chain.
"""

from __future__ import annotations

CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_GENERATOR = (0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)


def _polymod(values: list[int]) -> int:
    check = 1
    for value in values:
        top = check >> 25
        check = (check & 0x1FFFFFF) << 5 ^ value
        for i, generator in enumerate(_GENERATOR):
            if (top >> i) & 1:
                check ^= generator
    return check


def _expand(hrp: str) -> list[int]:
    return [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp]


def is_account(text: str, hrp: str = "akash") -> bool:
    """True for a well-formed ``akash1...`` account address (20-byte payload, valid checksum)."""
    if text != text.lower() or not text.startswith(hrp + "1") or len(text) > 90:
        return False
    data = text[len(hrp) + 1:]
    if len(data) < 6 or any(c not in CHARSET for c in data):
        return False
    values = [CHARSET.index(c) for c in data]
    # 20 bytes = 160 bits = 32 five-bit groups, plus 6 checksum groups (cosmos-sdk account addresses).
    return len(values) == 38 and _polymod(_expand(hrp) + values) == 1


def encode(payload: bytes, hrp: str = "akash") -> str:
    """A bech32 address of ``payload`` (tests build valid addresses with it; m2p never derives one)."""
    groups, acc, bits = [], 0, 0
    for byte in payload:
        acc, bits = (acc << 8) | byte, bits + 8
        while bits >= 5:
            bits -= 5
            groups.append((acc >> bits) & 31)
    if bits:
        groups.append((acc << (5 - bits)) & 31)
    polymod = _polymod(_expand(hrp) + groups + [0] * 6) ^ 1
    checksum = [(polymod >> 5 * (5 - i)) & 31 for i in range(6)]
    return hrp + "1" + "".join(CHARSET[g] for g in groups + checksum)
