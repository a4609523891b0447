"""``--drain``: the rigs with running leases wait for them to end before m2p touches them.

1. ``request``: write the agent's drain request (``leases.DRAIN_REQUEST``, root's) over SSH; the
   agent cordons its node within a tick, so no new lease lands there.
2. ``wait``: probe those rigs every ``poll_s`` (the detect probe: one round trip each) until their
   agents report no lease, or ``timeout_s`` passes.
3. ``request(..., on=False)`` once the command is done (or the wait gave up): the agent uncordons
   the node it cordoned (never one the owner cordoned).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable

from miner2provider.core.inventory import Host
from miner2provider.detect.ssh import SshOptions, run_one
from miner2provider.detect.survey import detect
from miner2provider.rigside.disk import DRAIN_REQUEST
from miner2provider.rigside.status import Lease

POLL_S = 5.0


def request(hosts: list[Host], opts: SshOptions, on: bool = True) -> dict[str, str]:
    """Write (``on``) or remove the drain request on each rig; returns rig -> error for the failures."""
    change = f"touch {DRAIN_REQUEST}" if on else f"rm -f {DRAIN_REQUEST}"
    errors: dict[str, str] = {}
    for host in hosts:
        password = host.become_password.reveal() if host.become_password else None
        # The password goes on stdin (sudo -S), never on the command line; sh -c reads no stdin.
        sudo = "sudo -S -p ''" if password else "sudo -n"
        result = run_one(host, f"{password}\n" if password else "", opts,
                         command=f"{sudo} sh -c {shlex.quote(change)}")
        if not result.ok or result.rc != 0:
            errors[host.name] = result.error or f"writing the drain request failed (exit {result.rc})"
    return errors


def wait(hosts: list[Host], opts: SshOptions, timeout_s: float, *, poll_s: float = POLL_S,
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
         ) -> tuple[list[Host], dict[str, tuple[Lease, ...]]]:
    """(the rigs whose leases ended, rig -> the leases still running when ``timeout_s`` passed)."""
    deadline = clock() + timeout_s
    waiting = {h.name: h for h in hosts}
    still: dict[str, tuple[Lease, ...]] = {}
    cleared: list[Host] = []
    while waiting:
        for report in detect(list(waiting.values()), opts):
            if report.facts is None:
                continue  # not reached this time: still waiting, leases as last seen
            if report.facts.agent_status.leases:
                still[report.name] = report.facts.agent_status.leases
            else:
                cleared.append(waiting.pop(report.name))
        if not waiting or clock() + poll_s > deadline:
            break
        sleep(poll_s)
    return cleared, {name: still.get(name, ()) for name in waiting}
