"""Kubernetes minor lines: their end of life, the upgrade rule and the version-skew rule.

End of life of each line, from kubernetes.io/releases/<line> (read 2026-11-23); the k3s
role's defaults name the same dates beside its pin (a unit test keeps the pin in this table).
Rules from Kubernetes' version-skew policy (kubernetes.io/releases/version-skew-policy): a
kubelet must not be newer than the kube-apiserver and may be up to three minor lines older;
the control plane is upgraded one minor line at a time (k3s: the same for its server).
"""

from __future__ import annotations

import re
from datetime import date

END_OF_LIFE = {
    "1.33": date(2026, 6, 28),
    "1.34": date(2026, 10, 27),
    "1.35": date(2027, 2, 28),
    "1.36": date(2027, 6, 28),
}
KUBELET_MAY_LAG = 3  # minor lines


def line(version: str) -> tuple[int, int] | None:
    """(1, 36) of ``v1.36.0+k3s1``, ``1.36.0`` or ``k3s version v1.36.0+k3s1 (...)``; None if none."""
    found = re.search(r"(\d+)\.(\d+)(?:\.\d+)?", version)
    return (int(found[1]), int(found[2])) if found else None


def name(minor: tuple[int, int]) -> str:
    return f"{minor[0]}.{minor[1]}"


def end_of_life(version: str) -> date | None:
    minor = line(version)
    return END_OF_LIFE.get(name(minor)) if minor else None


def past_end_of_life(version: str, today: date) -> str | None:
    """A sentence when ``version``'s line is past its end of life on ``today``."""
    eol = end_of_life(version)
    minor = line(version)
    if eol is None or minor is None or today <= eol:
        return None
    return f"Kubernetes {name(minor)} reached end of life on {eol.isoformat()}"


def skipped_line(installed: str, target: str) -> str | None:
    """A sentence when going from ``installed`` to ``target`` skips a minor line (or goes back)."""
    have, want = line(installed), line(target)
    if have is None or want is None or have == want or (have[0] == want[0] and want[1] == have[1] + 1):
        return None
    if want < have:
        return (f"k3s {name(have)} runs here and the target is {name(want)}: Kubernetes does not "
                "downgrade a server; pin k3s_version to the running line or newer")
    between = f"{want[0]}.{have[1] + 1}" if have[0] == want[0] else "each line between"
    return (f"k3s {name(have)} runs here and the target is {name(want)}: Kubernetes upgrades one minor "
            f"line at a time; convert with k3s {between} first (m2p bundle DIR --k3s-version "
            f"v{between}.N+k3s1, then convert --bundle DIR)")


def skew(server: str, agent: str) -> str | None:
    """A sentence when an agent's kubelet on ``agent`` may not join an API server on ``server``."""
    s, a = line(server), line(agent)
    if s is None or a is None:
        return None
    if a > s:
        return f"its k3s {name(a)} is newer than its server's {name(s)}: a kubelet may not be newer than the API server"
    if s[0] != a[0] or s[1] - a[1] > KUBELET_MAY_LAG:
        return (f"its k3s {name(a)} is more than {KUBELET_MAY_LAG} minor lines older than its server's "
                f"{name(s)}: outside Kubernetes' version-skew policy")
    return None
