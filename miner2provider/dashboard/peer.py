"""Who a request comes from, as far as the server can tell: on loopback the local user that owns the
connection's other end (Linux's /proc/net/tcp, as identd reads it), beyond loopback the client's address.

Why the user: on loopback every local user's address is 127.0.0.1, so an address cannot tell the operator
from another user of the machine; the kernel knows which user owns each socket, and a user cannot pass
for another (short of being root, or the operator, who can read the token file anyway).  The table is read
whole at a look-up (about 15 ms with 4,000 sockets on the machine), so it is read only for a request that
needs it (a Bearer token, a login, or a cookie naming a live session), and once per connection: the server's
protocol (limits.HeaderDeadline) says when each connection opens and closes, and the user found is kept for
that connection only, so that a port another user opens after it closed is looked up afresh."""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request

TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_IP = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Client:
    address: str
    uid: int | None = None  # the local user, on loopback where the kernel says it

    def key(self) -> str:
        return f"uid {self.uid}" if self.uid is not None else self.address


class Connection:
    """One open connection to the dashboard and the local user found for it (None: not looked up yet)."""

    def __init__(self, ends: tuple[tuple[str, int], tuple[str, int]]) -> None:
        self.ends = ends
        self.uid: int | None = None


# The server's open connections by their (client, server) ends: two open ones never share both ends; an entry
# leaves when its connection closes, and a connection opened on the same ends replaces it even before that
# (asyncio's TLS transport tells the protocol of a close one loop turn after the socket is gone).
_OPEN: dict[tuple[tuple[str, int], tuple[str, int]], Connection] = {}


def opened(client: tuple[str, int] | None, server: tuple[str, int | None] | None) -> Connection | None:
    """Notes a connection the server accepted (None where it has no TCP ends: a Unix socket)."""
    if client is None or server is None:
        return None
    connection = Connection(((str(client[0]), int(client[1])), (str(server[0]), int(server[1] or 0))))
    _OPEN[connection.ends] = connection
    return connection


def closed(connection: Connection | None) -> None:
    """Forgets a connection and its user: ``opened``'s answer, once the server sees it close."""
    if connection is not None and _OPEN.get(connection.ends) is connection:
        del _OPEN[connection.ends]


def client_of(request: Request) -> Client:
    """The request's client; its ``server`` is the socket the dashboard listens on (the ASGI scope's)."""
    host, port = request.client or ("?", 0)
    server = request.scope.get("server") or ("", 0)
    ends = ((str(host), int(port)), (str(server[0]), int(server[1] or 0)))
    connection = _OPEN.get(ends)
    if connection is not None and connection.uid is not None:
        return Client(host, connection.uid)
    uid = local_uid(*ends)
    if connection is not None:  # only a found user is kept: a look-up that failed is tried again
        connection.uid = uid
    return Client(host, uid)


def listening_port(request: Request) -> int:
    server = request.scope.get("server") or ("", 0)
    return int(server[1] or 0)


def local_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The user owning the client's end of a TCP connection from this machine to ``server`` (over loopback,
    or to one of its own addresses); None from another machine, where the kernel has no such table (not
    Linux), or when that end is gone."""
    try:
        want = (_plain(ipaddress.ip_address(client[0])), client[1])
        to = (_plain(ipaddress.ip_address(server[0])), server[1])
    except ValueError:
        return None
    if not (want[0].is_loopback or want[0] == to[0]):
        return None
    port = f":{client[1]:04X} "  # the client's end as the table writes its port: most lines skip unsplit
    for table in TABLES:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            if port not in line:
                continue
            fields = line.split()
            # sl local rem st queues timer retransmits uid timeout inode: inode 0 is a socket no process holds
            # any more (TIME_WAIT, orphaned), whose uid says nothing
            if len(fields) > 9 and fields[9] != "0" and _end(fields[1]) == want and _end(fields[2]) == to:
                return int(fields[7])
    return None


def _end(text: str) -> tuple[_IP, int] | None:
    """``0100007F:1F90`` (the kernel's order of each 32-bit word, then the port in hex) as (address, port)."""
    address, _, port = text.partition(":")
    try:
        raw = b"".join(struct.pack("=I", int(address[i:i + 8], 16)) for i in range(0, len(address), 8))
        found = ipaddress.ip_address(socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw))
        return _plain(found), int(port, 16)
    except (ValueError, OSError, struct.error):
        return None


def _plain(address: _IP) -> _IP:
    """An IPv4 address that came as ::ffff:a.b.c.d (a dual-stack socket) as itself."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return mapped or address
