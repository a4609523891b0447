"""The ports a rig listens on (not part of the detect probe: `m2p provider check` asks the ingress rig
alone, to see whether anything holds the ports the marketplace's ingress takes).

``ss -Hlntu`` (iproute2, on every rig m2p supports) prints one socket per line:

    tcp   LISTEN 0      128          0.0.0.0:22         0.0.0.0:*
    udp   UNCONN 0      0       127.0.0.53%lo:53        0.0.0.0:*
    tcp   LISTEN 0      511             [::]:80            [::]:*

The local address is the fifth column; its port follows the last ``:``.  Loopback-only listeners
(127.0.0.0/8, ::1) are left out: they hold no port the outside can reach, and hostPorts bind the node's
addresses.
"""

from __future__ import annotations

from dataclasses import dataclass

from miner2provider.detect.facts.base import Fact, Output, whole


@dataclass(frozen=True)
class Listening:
    tcp: tuple[int, ...]
    udp: tuple[int, ...]
    ok: bool  # False: ss did not run (the list is empty, not "nothing listens")


class ListeningFact(Fact[Listening]):
    """``ss -Hlntu``: the TCP and UDP ports with a listener on a non-loopback address."""

    name = "listening"
    command = "ss -Hlntu"

    @staticmethod
    def parse(out: Output) -> Listening:
        if out.rc != 0:
            return Listening((), (), False)
        tcp: set[int] = set()
        udp: set[int] = set()
        for line in out.text.splitlines():
            cols = line.split()
            if len(cols) < 5 or cols[0] not in ("tcp", "udp"):
                continue
            address, _, port_text = cols[4].rpartition(":")
            port = whole(port_text)
            host = address.split("%", 1)[0].strip("[]")
            if port is None or not 0 < port < 65536 or host.startswith("127.") or host == "::1":
                continue
            (tcp if cols[0] == "tcp" else udp).add(port)
        return Listening(tuple(sorted(tcp)), tuple(sorted(udp)), True)
