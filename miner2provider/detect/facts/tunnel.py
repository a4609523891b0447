"""A farm across sites: the member's WireGuard tunnel (role tunnel), read-only.

Its public key (0644; the private key is never read), whether its interface is up and its MTU (sysfs), and each
peer's latest handshake (``wg show IF latest-handshakes``: ``KEY<TAB>EPOCH``, 0 for never; it needs root, so
``sudo -n`` where the login user may, else no peers are said).  ``now`` is the rig's own clock, so a handshake's
age is measured on one clock even when the rig's has stepped.

On the hub, whether each rig answers now: a handshake is only stale 3 minutes after a site went down (WireGuard
shakes hands every 2 minutes), so the hub also knocks on each peer's SSH port over the tunnel (bash's /dev/tcp,
2 s, 128 peers at a time).  An answer, even a refusal, is a rig that is there; silence, or no way there (a peer
with no endpoint: the kernel's WireGuard refuses to send at once), is not.  ``ping``
would say loss too, but minimal images (Ubuntu's base, a sandbox rig, this controller) have none.
"""

from __future__ import annotations

from dataclasses import dataclass

from miner2provider.detect.facts.base import Fact, Output, whole

TUNNEL_INTERFACE = "m2p0"  # role tunnel's tunnel_interface
PUBLIC_KEY = "/etc/m2p/tunnel/public.key"  # role tunnel's tunnel_dir
IFF_UP = 0x1


@dataclass(frozen=True)
class Handshake:
    peer: str  # its public key
    at: int  # seconds since the epoch on the rig's clock; 0: never
    address: str = ""  # its tunnel address (the first of its allowed IPs, without /32): names the rig on the hub
    answers: bool | None = None  # the hub's knock on its SSH port over the tunnel; None: not asked (a rig's hub)


@dataclass(frozen=True)
class Tunnel:
    present: bool  # the member has a key: m2p sites apply ran there
    public_key: str = ""
    link: str = ""  # up | down | "" (no interface)
    mtu: int | None = None
    handshakes: tuple[Handshake, ...] = ()
    now: int | None = None

    def handshake_age_s(self) -> int | None:
        """Seconds since the freshest handshake with any peer; None when none ever happened (or none is said);
        negative when it is dated after the rig's clock (age_s says how that reads)."""
        done = [h.at for h in self.handshakes if h.at > 0]
        return None if not done or self.now is None else age_s(self.now, max(done))


CLOCK_SLACK_S = 5  # a handshake this much "ahead" is the same moment read from two clocks (wireguard-go, date)


def age_s(now: int | None, at: int) -> int | None:
    """Seconds from ``at`` (a handshake on the rig's wall clock, 0: never) to ``now``.  A handshake dated more than
    CLOCK_SLACK_S after ``now`` is kept negative: the rig's clock stepped back since, so its age is unknown, and
    a reader must never take it for a fresh one (it may be hours old)."""
    if at <= 0 or now is None:
        return None
    return max(0, now - at) if now - at >= -CLOCK_SLACK_S else now - at


class TunnelFact(Fact[Tunnel]):
    """``key <public key>``, ``link <flags> <mtu>``, ``peer <key> <epoch>`` and ``allowed <key> <ip/cidr>...`` per
    peer, ``answers <key> <rc>`` per /32 peer (0: it connected or refused; anything else, a timeout or no route, is
    silence), ``now <epoch>``."""

    name = "tunnel"
    command = (
        f"IF={TUNNEL_INTERFACE}; [ -r {PUBLIC_KEY} ] && echo \"key $(head -c 100 {PUBLIC_KEY})\"; "
        'if [ -d "/sys/class/net/$IF" ]; then '
        'echo "link $(cat "/sys/class/net/$IF/flags") $(cat "/sys/class/net/$IF/mtu")"; '
        "S=; [ \"$(id -u)\" = 0 ] || ! sudo -n true 2>/dev/null || S='sudo -n'; "
        '$S wg show "$IF" latest-handshakes 2>/dev/null | head -n 1000 | sed "s/^/peer /"; '
        '$S wg show "$IF" allowed-ips 2>/dev/null | head -n 1000 | sed "s/^/allowed /"; '
        # 128 knocks at a time: a hub of 1,000 rigs that all went silent answers in 16 s, not 2,000 processes.
        '$S wg show "$IF" allowed-ips 2>/dev/null | head -n 1000 | sed -n "s#^\\([^[:space:]]*\\)[[:space:]]'
        '\\([0-9.]*\\)/32.*#\\1 \\2#p" | xargs -r -P 128 -n 2 sh -c \''
        'R=$(timeout 2 bash -c ": </dev/tcp/$1/22" 2>&1); C=$?; case "$R" in *refused*) C=0;; esac; '
        'echo "answers $0 $C"\'; '
        'fi; '
        'echo "now $(date +%s)"; true'
    )

    @staticmethod
    def parse(out: Output) -> Tunnel:
        key, link, mtu, now = "", "", None, None
        handshakes = []
        addresses: dict[str, str] = {}
        answers: dict[str, bool] = {}
        for line in out.text.splitlines():
            kind, _, rest = line.partition(" ")
            fields = rest.split()
            if kind == "key" and len(fields) == 1:
                key = fields[0][:60]
            elif kind == "link" and len(fields) == 2:
                flags = _hex(fields[0])
                link = "" if flags is None else "up" if flags & IFF_UP else "down"
                mtu = whole(fields[1])
            elif kind == "peer" and len(fields) == 2 and (at := whole(fields[1])) is not None:
                handshakes.append(Handshake(fields[0][:60], at))
            elif kind == "allowed" and len(fields) >= 2:
                addresses[fields[0][:60]] = fields[1].split("/")[0][:60]
            elif kind == "answers" and len(fields) == 2 and (rc := whole(fields[1])) is not None:
                answers[fields[0][:60]] = rc == 0
            elif kind == "now" and len(fields) == 1:
                now = whole(fields[0])
        named = tuple(Handshake(h.peer, h.at, addresses.get(h.peer, ""), answers.get(h.peer)) for h in handshakes)
        return Tunnel(bool(key), key, link, mtu, named, now)


def _hex(text: str) -> int | None:
    try:
        return int(text, 16) if text.startswith("0x") and len(text) <= 10 else None
    except ValueError:
        return None
