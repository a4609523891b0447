"""Guards: the rigs a fleet run must leave alone, and why, before any playbook runs.

- A bundle without the images its rigs' pods need (``check_bundle_images``: nothing is touched).
- A k3s that would skip a minor line, or an agent outside the version-skew policy (``k3s_refusal``).
- A running lease (below): never under it.

Never under a running lease: which rigs convert, revert and schedule apply must leave alone.

A rig's time-share agent lists the tenant pods on its node (every unfinished pod outside the
system namespaces that no DaemonSet runs) in its status, which the detect probe reads in the
same round trip as every other fact.  Restarting k3s or the toolkit under such a pod would kill
it, and revert would take its node away: those rigs are refused with one sentence, unless
``--drain`` asks the agent to cordon the node and m2p waits for the leases to end.  Pure: the
fleet run (pipeline.py) does the I/O.

A rig without an agent (converted, never given a schedule) reports no leases: m2p has no eyes on
its node and cannot guard it (docs/commands/convert.md says so).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from miner2provider.core import k8s_lines, textfiles
from miner2provider.core.errors import BundleError, UsageError
from miner2provider.core.inventory import Host
from miner2provider.detect.report import RigReport, handshake_said, tunnel_row
from miner2provider.fleet.bundle import pins
from miner2provider.fleet.bundle.manifest import Bundle
from miner2provider.rigside.status import Lease
from miner2provider.timeshare.model import duration_seconds

# The agent cordons its node while this file exists (agent/rules.py cordon_rule).
SHOWN = 3  # leases named in a refusal; the count says how many more
DEFAULT_DRAIN_TIMEOUT = "2h"
MAX_SPAN_S = 7 * 86400.0  # m2p waits for leases at most a week (a convert must not hang for ever)


def parse_span(text: str, option: str = "--drain-timeout") -> float:
    """90s, 30m, 2h, 1d (the schedule's durations), or plain seconds -> seconds; never 0."""
    plain = text.strip()
    seconds = duration_seconds(plain + "s" if plain.isdecimal() and plain.isascii() else plain)
    if not seconds or seconds > MAX_SPAN_S:
        raise UsageError(f"{option} {textfiles.shown(text)}: give a duration such as 90s, 30m, 2h or 1d "
                         f"(at most {MAX_SPAN_S // 86400:.0f}d)")
    return seconds


def span(seconds: float) -> str:
    """45 s, 12 min, 3 h, 2 d: how long a lease has run, as an owner reads it."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _age(lease: Lease, now: datetime) -> str:
    try:
        started = datetime.fromisoformat(lease.since.replace("Z", "+00:00"))
        return span((now - started).total_seconds())
    except (ValueError, TypeError):  # no start time, or a naive one
        return "running"


def _named(leases: tuple[Lease, ...], now: datetime) -> str:
    """The first SHOWN leases with their ages, and how many more."""
    shown = "; ".join(f"{lease.pod}, {_age(lease, now)}" for lease in leases[:SHOWN])
    return shown + (f"; {len(leases) - SHOWN} more" if len(leases) > SHOWN else "")


def refusal(rig: str, leases: tuple[Lease, ...], now: datetime) -> str:
    """rig07: 1 lease running (pod tenant-ns/job-abc, 3 h): not touched; use --drain to wait for it"""
    many = len(leases) > 1
    return (f"{rig}: {len(leases)} lease{'s' if many else ''} running (pod{'s' if many else ''} "
            f"{_named(leases, now)}): not touched; use --drain to wait for {'them' if many else 'it'}")


def drain_timed_out(rig: str, leases: tuple[Lease, ...], waited_s: float, now: datetime) -> str:
    return (f"{rig}: {len(leases)} lease{'s' if len(leases) > 1 else ''} still running after {span(waited_s)} "
            f"of --drain ({_named(leases, now)}): not touched; the node is schedulable again")


def check_bundle_images(bundle: Bundle, hosts: list[Host]) -> None:
    """Refuse, before any rig is touched, a bundle without the images these rigs' pods need:
    on a rig without internet they would wait in ImagePull for ever."""
    needed = sorted({str(h.var("nvidia_device_plugin_image") or pins.DEVICE_PLUGIN_IMAGE) for h in hosts})
    missing = bundle.missing_images(needed)
    if missing:
        wanted = " ".join(f"--image {ref}" for ref in needed)
        raise BundleError(f"the bundle lacks {', '.join(missing)} (rigs without internet could not start their "
                          f"pods): make it again with `m2p bundle DIR {wanted}`", where=str(bundle.root))


def k3s_target(host: Host, bundle: Bundle | None) -> str:
    """The k3s version convert would put on ``host``: the bundle's, the rig's own pin, or the role's."""
    if bundle is not None:
        return bundle.k3s.version
    return str(host.var("k3s_version") or pins.K3S_VERSION)


def tunnel_refusal(report: RigReport, derived: dict[str, Any]) -> str | None:
    """A farm across sites runs k3s on the tunnel (role variable k3s_flannel_iface): convert waits until the
    member's tunnel carries traffic, which `m2p sites apply` sets up (k3s on a missing interface never starts)."""
    if not derived.get("k3s_flannel_iface") or report.facts is None:
        return None
    row = tunnel_row(report.facts.tunnel)
    if row is None:
        return "it is in a farm across sites and has no tunnel yet: run `m2p sites apply` first"
    if not row["ok"]:
        said = handshake_said(row["handshake_age_s"])
        return f"its tunnel to the hub is not carrying traffic ({row['link']}, {said}): see `m2p status`"
    return None


def k3s_refusal(host: Host, report: RigReport, targets: dict[str, str], derived: dict[str, Any]) -> str | None:
    """Why convert must not touch the rig's k3s: a skipped minor line from what runs there, or an
    agent whose server's line the version-skew policy does not let it join."""
    installed = report.facts.installed.k3s if report.facts is not None else ""
    if installed:
        skipped = k8s_lines.skipped_line(installed, targets[host.name])
        if skipped:
            return skipped
    server = derived.get("k3s_agent_server_host") or ""
    if "k3s_agent" in host.groups and server in targets and server != host.name:
        mix = k8s_lines.skew(targets[server], targets[host.name])
        if mix:
            return f"{mix} ({server}); pin one k3s_version for both"
    return None


def no_adapter(report: RigReport, control_node: bool = False) -> str:
    """Said beside the rig's outcome, whatever it is: k3s goes on without the time-share."""
    if control_node:
        return "control node: k3s's server without GPUs"
    if report.facts is not None and not report.facts.mining_os.has_adapter:
        return f"{report.facts.mining_os.label}: no miner adapter, k3s without time-share"
    return ""
