"""Everything m2p prints about rigs, fleets and schedules: text tables and lines, and JSON.

Commands decide what to show; this module decides how it looks.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import date
from typing import TYPE_CHECKING, Any

import click
import yaml

from miner2provider.core.textfiles import printable
from miner2provider.detect.os_records import CONTROLS_SHOWN
from miner2provider.detect.report import RigReport, handshake_said, silent_peer_said
from miner2provider.rigside.status import hand_over_said

from .app import Context

if TYPE_CHECKING:  # names only: `m2p detect` renders with the probe's imports, not the runner's and the markets'
    from miner2provider.detect.facts.probe import RigFacts
    from miner2provider.fleet.pipeline import RigOutcome
    from miner2provider.market.base import FleetAttributes, Marketplace, ProviderState, Verdict
    from miner2provider.market.pricing import Floor
    from miner2provider.timeshare.economics import Economics
    from miner2provider.timeshare.model import Schedule


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


def echo_yaml(data: Any) -> None:
    click.echo(yaml.safe_dump(data, sort_keys=False, default_flow_style=False), nl=False)


def problem(error: Exception) -> None:
    """One mistake of several, as the CLI says a single one: a red line on stderr."""
    echo(click.style(printable(f"m2p: error: {error}"), fg="red"), err=True)


def counted(n: int, noun: str) -> str:
    """``1 rig``, ``2 rigs``: a count a person reads once (nouns here take an s)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def echo(text: str = "", err: bool = False) -> None:
    """A line (or lines) for the terminal: what a rig or a file said cannot move the cursor, ring, retitle
    the terminal or reverse the text (control and bidi characters escaped; click.style's colours kept)."""
    click.echo(printable_lines(text), err=err)


def printable_lines(text: str) -> str:
    return "\n".join(printable(line, keep_style=True) for line in text.split("\n"))


def warnings(lines: tuple[str, ...] | list[str]) -> None:
    for line in lines:
        echo(click.style(f"m2p: warning: {line}", fg="yellow"), err=True)


def _counts(keys: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    return counts


# -- detect ------------------------------------------------------------------------------


def report(ctx: Context, r: RigReport) -> None:
    if not r.ok:
        echo(click.style(f"{r.name} ({r.address}): FAILED: {r.error}", fg="red"))
        for w in r.warnings:
            echo(click.style(f"  ! {w}", fg="yellow"))
        return
    f, v = r.facts, r.verdict
    assert f is not None and v is not None
    colour = {"ready": "green", "ready with warnings": "yellow", "not ready": "red"}[v.status]
    mos = f.mining_os
    head = f"{r.name} ({r.address}): {mos.label}{' ' + mos.version if mos.version else ''}"
    echo(click.style(head, bold=True) + " - " + click.style(v.status, fg=colour))
    if ctx.verbosity >= 0:
        cg = f"cgroup v{f.cgroup.version}{' (hybrid)' if f.cgroup.hybrid else ''}"
        rows = [
            ("system", f"{f.os_release.pretty_name}, kernel {f.kernel.release} {f.kernel.machine}, {cg}"),
            ("cpu/ram", f"{f.cpu.cores} cores {f.cpu.model}, {f.memory.total_mb} MB RAM usable "
                        f"(about {f.memory.installed_mb // 1024} GB installed)"),
            ("disks", "; ".join(f"{m.mountpoint} {m.size_gb:g} GB ({m.free_gb:g} GB free)" for m in f.disks) or "-"),
            ("python3", f"{f.python.version or 'missing'}   sudo: {f.sudo.state}"),
            ("gpus", gpus_line(f)),
            ("miner", (("running (" + ", ".join(f.miner.sessions) + ")") if f.miner.running else "not running")
                      + f"; control: {CONTROLS_SHOWN.get(mos.miner_control, mos.miner_control)}"),
            ("on gpus", holders_line(f)),
            ("stack", f"container toolkit: {f.installed.container_toolkit or '-'}, k3s: {f.installed.k3s or '-'}"
                      f"{' (' + f.installed.k3s_service + ' active)' if f.installed.k3s_service else ''}, "
                      f"m2p agent: {f.installed.agent or '-'}"),
        ]
        for label, value in rows:
            echo(f"  {label:<8} {value}")
    for b in v.blockers:
        echo(click.style(f"  x {b.sentence}", fg="red"))
    for w in (*(f.sentence for f in v.warnings), *r.warnings):
        echo(click.style(f"  ! {w}", fg="yellow"))


def holders_line(f: RigFacts) -> str:
    """``t-rex (pid 812, 2 GPUs; wrapper h-run.sh, screen; API 127.0.0.1:4067 (its default)); unknown GPU process
    python3 (pid 90, 1 GPU; unit x)``."""
    parts = []
    for h in f.holders:
        kind = ("container" if h.in_container else h.miner) or "unknown GPU process"
        name = h.program if kind == h.miner else f"{kind} {h.program}"
        kept = "; " + ", ".join(h.supervisors) if h.supervisors else "; started by hand"
        api = f"; API {h.api} (its default)" if h.api and not h.in_container else ""
        parts.append(f"{name} (pid {h.pid}, {counted(len(h.gpus), 'GPU')}{kept}{api})")
    return "; ".join(parts) or "nothing"


def gpus_line(f: RigFacts) -> str:
    g = f.gpus
    amd = _counts([f"{c.name} ({c.pci_id} rev {c.revision}, {c.vram_gib} GiB)" for c in f.amd_gpus])
    amd_text = ", ".join(f"{n} x {k}" for k, n in amd.items())
    if g.state != "ok":
        nvidia = {"no-nvidia-smi": "none (no nvidia-smi)", "no-gpu": "none found",
                  "driver-error": f"driver error: {g.error}"}[g.state]
        return f"AMD: {amd_text}; NVIDIA: {nvidia}" if amd_text else nvidia
    counts = _counts([f"{gpu.name} ({gpu.pci_id}, {gpu.memory_mib} MiB)" for gpu in g.gpus])
    cards = ", ".join(f"{n} x {k}" for k, n in counts.items())
    return f"{cards}; driver {g.driver_version}, CUDA {f.cuda or '?'}" + (f"; AMD: {amd_text}" if amd_text else "")


def detect_summary(reports: list[RigReport]) -> None:
    counts = _counts(["failed" if not r.ok else r.verdict.status if r.verdict else "unknown" for r in reports])
    order = ["ready", "ready with warnings", "not ready", "failed"]
    echo(f"{counted(len(reports), 'rig')}: " + ", ".join(f"{counts[k]} {k}" for k in order if k in counts))


# -- attributes --------------------------------------------------------------------------


def attributes(market: str, fleet: FleetAttributes, failed: list[str], as_json: bool) -> None:
    """``market``: the marketplace's name as people read it (its ``label``)."""
    if as_json:
        echo_json({
            "rigs": {r.name: {"labels": r.labels, "warnings": list(r.warnings)} for r in fleet.rigs},
            "attributes": [{"key": k, "value": v} for k, v in fleet.attributes],
            "warnings": list(fleet.warnings), "card_list_additions": list(fleet.unknown_entries),
            "failed": failed})
        return
    echo("# Node labels per rig (m2p's gpu_attributes role applies them)")
    echo(yaml.safe_dump({"rigs": {r.name: r.labels for r in fleet.rigs}}, sort_keys=False).rstrip())
    echo(f"# {market} provider attributes for this fleet (paste into your provider config)")
    echo(yaml.safe_dump({"attributes": [{"key": k, "value": v} for k, v in fleet.attributes]},
                        sort_keys=False).rstrip())
    for r in fleet.rigs:
        for w in r.warnings:
            echo(click.style(f"! {r.name}: {w}", fg="yellow"), err=True)
    for w in fleet.warnings:
        echo(click.style(f"! fleet: {w}", fg="yellow"), err=True)
    if fleet.unknown_entries:
        where = f" ({fleet.card_list_where})" if fleet.card_list_where else ""
        echo(f"# Entries missing from {market}'s card list{where}:", err=True)
        for entry in fleet.unknown_entries:
            echo(f"#   {entry}", err=True)


# -- fleet runs ----------------------------------------------------------------------------


def outcomes(results: list[RigOutcome], as_json: bool, show_tasks: bool) -> None:
    if as_json:
        echo_json([asdict(o) for o in results])
        return
    colours = {"converged": "green", "changed": "yellow", "pending": "yellow"}
    width = max((len(o.name) for o in results), default=3)
    echo(f"{'rig':<{width}}  {'result':<12} changed  detail")
    for o in results:
        echo(f"{o.name:<{width}}  " + click.style(f"{o.result:<12}", fg=colours.get(o.result, "red"))
             + f" {o.changed:>7}  {o.message}")
        if show_tasks:
            for task in o.tasks:
                echo(f"{'':<{width}}    ~ {task}")
    counts = _counts([o.result for o in results])
    echo(f"{counted(len(results), 'rig')}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))


# -- status --------------------------------------------------------------------------------


def status_table(rows: list[dict[str, Any]]) -> None:
    width = max((len(r["rig"]) for r in rows), default=3)
    echo(f"{'rig':<{width}}  {'state':<13} {'k3s':<22} {'node':<16} gpus")
    for r in rows:
        colour = {"converged": "green", "not converged": "yellow", "drifted": "yellow"}.get(r["state"], "red")
        echo(f"{r['rig']:<{width}}  " + click.style(f"{r['state']:<13}", fg=colour)
             + f" {r['k3s']:<22} {r['node']:<16} {r['gpus']}")
        if r["detail"]:
            echo(f"{'':<{width}}    {r['detail']}")
        if r["agent"]:
            echo(f"{'':<{width}}    agent: {agent_line(r['agent'])}")
        if r.get("tunnel"):
            echo(f"{'':<{width}}    " + tunnel_line(r["tunnel"]))
        for lease in r.get("reclaims") or ():
            echo(f"{'':<{width}}    {reclaim_line(lease)}")
        if r.get("reclaimer"):
            said = r["reclaimer"]
            line = (f"{'':<{width}}    reclaimer: last sweep {said['at'] or 'never'}, {said['leases']} leases on rigs "
                    "that must mine")
            echo(line + (click.style(f"; {said['last_error']}", fg="red") if said["last_error"] else ""))


def agent_line(agent: dict[str, Any]) -> str:
    """``leasing since 2026-11-22T21:14, next change 2026-11-23T06:00+01:00 (schedule night-lease)``."""
    if not agent["mode"]:
        return f"service {agent['service']}, no status yet"
    line = f"{agent['mode']} since {agent['since'][:16]}"
    line += f", next change {agent['next_change']}" if agent["next_change"] else ", no change ahead"
    line += f" (schedule {agent['schedule']})"
    if agent.get("mine_at") and agent["mode"] != "mining":  # the minute its leases must be gone by
        line += f"; mines from {agent['mine_at']}"
    if agent["service"] != "active":
        line += f"; service {agent['service']}"
    if agent.get("lease_pays") is not None:
        floor = agent.get("floor_per_hour")
        reclaim = agent.get("reclaim_per_hour")
        line += (f"; profit: {'offered' if agent['lease_pays'] else 'mining pays more'}"
                 + (f", floor {floor:g}/h" if floor is not None else "")
                 + (f" + {reclaim:g}/h for the reclamation window" if reclaim else "")
                 + f" ({agent.get('quote_source') or '?'})")
        if agent.get("leased_gpus"):  # what the leases pay against the whole rig's floor
            line += (f"; leased {agent['leased_gpus']} of {agent['leased_of']} GPUs for "
                     f"{agent['leased_per_hour']:g}/h ({hand_over_said(agent.get('hand_over', ''))})")
    if agent.get("hand_over_why"):
        line += f"; whole-rig hand-over: {agent['hand_over_why']}"
    if agent.get("watchdog"):
        line += f"; the mining OS's watchdog {agent['watchdog']}"
    measured = agent.get("measured")
    if measured:
        line += f"; miner {measured['algo']} {' + '.join(f'{v:g}' for v in measured['mhs'])} MH/s"
    if agent["last_error"]:
        line += click.style(f"; last error: {agent['last_error']}", fg="red")
    return line


# -- schedules -----------------------------------------------------------------------------


def schedule_summary(sched: Schedule) -> str:
    grace = "forever" if sched.lease_grace_s is None else f"{sched.lease_grace_s / 60:g} min"
    band = f", hysteresis {sched.hysteresis * 100:g} %" if sched.policy == "profit" else ""
    return (f"policy {sched.policy}, timezone {sched.timezone}, {len(sched.windows)} windows, "
            f"lease grace {grace}, min switch interval {sched.min_switch_interval_s / 60:g} min{band}")


# -- pricing -------------------------------------------------------------------------------


def pricing(floors: list[Floor], economics: Economics, shape: str, market: Marketplace | None = None) -> None:
    """``shape``: table, json, or a marketplace's name (its price mapping alone); ``market``: the farm's marketplace,
    whose price mapping the table and JSON show (None: m2p_marketplace's default)."""
    from miner2provider.market import DEFAULT, MARKETPLACES, marketplace  # here: see the imports above

    if shape in MARKETPLACES:
        echo(marketplace(shape).price_mappings(floors))
        return
    market = market or marketplace(DEFAULT)
    rows = [{"model": f.model, "memory": f.memory, "gpus": f.gpus, "mining_per_day": f.mining_per_day,
             "power_watts": f.power_watts, "net_per_hour": _rounded(f.net_per_hour, 4),
             "floor_per_hour": _rounded(f.floor_per_hour, 4), "floor_per_month": _rounded(f.floor_per_month, 2),
             "source": f.source} for f in floors]
    if shape == "json":
        echo_json({"currency": economics.currency, "margin": economics.margin,
                   "power_price_per_kwh": economics.power_price_per_kwh, "models": rows,
                   "price_target_gpu_mappings": market.price_mappings(floors)})
        return
    echo(f"lease price floors per GPU ({economics.currency}; margin {economics.margin:.0%}, power "
         f"{economics.power_price_per_kwh if economics.power_price_per_kwh is not None else '?'} per kWh; "
         f"figures from {economics.source})")
    echo(f"{'model':<14} {'VRAM':<6} {'GPUs':>5} {'mining/day':>11} {'watts':>6} {'net/h':>8} {'floor/h':>8} "
         f"{'floor/month':>12}")
    for r in rows:
        def cell(value: object, width: int) -> str:
            return f"{'unknown' if value is None else value:>{width}}"
        echo(f"{r['model']:<14} {r['memory']:<6} {r['gpus']:>5} {cell(r['mining_per_day'], 11)} "
             f"{cell(r['power_watts'], 6)} {cell(r['net_per_hour'], 8)} {cell(r['floor_per_hour'], 8)} "
             f"{cell(r['floor_per_month'], 12)}")
    echo(f"price_target_gpu_mappings: {market.price_mappings(floors) or '(no model has a mining figure)'}")


def provider_state(label: str, state: ProviderState, rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        echo_json({"provider": {"url": state.url, "error": state.error, **state.fields}, "rigs": rows})
        return
    if state.error:
        echo(click.style(f"{label} provider ({state.url}): {printable_lines(state.error)}", fg="red"))
    else:
        f = state.fields
        echo(f"{label} provider {printable_lines(f['hostname'] or state.url)} ({printable_lines(f['address'])}): "
             f"{f['active_leases']} active leases, {f['open_orders']} open orders, {f['deployments']} deployments")
    status_table(rows)


def tunnel_line(tunnel: dict[str, Any]) -> str:
    """``tunnel: up, MTU 1280, last handshake 12 s ago (1 peer)``, red when it carries nothing."""
    line = (f"tunnel: {tunnel['link']}, MTU {tunnel['mtu'] or '?'}, {handshake_said(tunnel['handshake_age_s'])} "
            f"({counted(tunnel['peers'], 'peer')})")
    if not tunnel["ok"]:
        return click.style(line + "; not carrying traffic: see docs/sites.md", fg="red")
    silent = tunnel.get("silent") or []
    if silent and tunnel["peers"] > 1:  # the hub: which rigs' tunnels (or sites) carry nothing
        said = ", ".join(f"{printable(str(p['peer']))} ({silent_peer_said(p)})" for p in silent)
        return line + click.style(f"; silent: {said}", fg="red")
    return line


def reclaim_line(lease: dict[str, Any]) -> str:
    """One lease the farm's reclaimer handles on a rig: ``lease X: reclaiming until <deadline>; next close (why)``.
    Its words come from the cluster and the chain: ``echo`` escapes them."""
    state = lease.get("state") or "chain not asked"
    until = f" until {lease['deadline']}" if lease.get("deadline") else ""
    window = (f", window {lease['window_s'] / 3600:g} h" if isinstance(lease.get("window_s"), (int, float))
              else ", no reclamation window" if state != "chain not asked" else "")
    why = f" ({lease['why']})" if lease.get("why") else ""
    line = f"lease {lease.get('lease')}: {state}{until}{window}; next {lease.get('action') or 'nothing'}{why}"
    return line + (f"; error: {lease['error']}" if lease.get("error") else "")


def verdicts(found: list[Verdict], as_json: bool) -> None:
    """One line per verdict: ok, warn or FAIL, the topic, what was found and what to do."""
    if as_json:
        echo_json([{"level": v.level, "topic": v.topic, "text": v.text} for v in found])
        return
    colours = {"ok": "green", "warn": "yellow", "fail": "red"}
    for v in found:
        mark = click.style(f"{v.level.upper() if v.level == 'fail' else v.level:4}", fg=colours.get(v.level))
        echo(f"{mark}  {v.topic}: {printable_lines(v.text)}")


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


# -- history -------------------------------------------------------------------------------


def history_row(rig: str, per_day: list[tuple[date, dict[str, float]]], error: str) -> dict[str, Any]:
    """Hours per mode per day, and over the whole window (rounded to 0.01 h; seconds for the window)."""
    total: dict[str, float] = {}
    for _, seconds in per_day:
        for mode, value in seconds.items():
            total[mode] = total.get(mode, 0.0) + value
    return {"rig": rig, "error": error,
            "seconds": {mode: round(value) for mode, value in sorted(total.items())},
            "hours": {mode: round(value / 3600, 2) for mode, value in sorted(total.items())},
            "days": [{"date": day.isoformat(), "hours": {m: round(v / 3600, 2) for m, v in sorted(s.items())}}
                     for day, s in per_day]}


def history_table(rows: list[dict[str, Any]]) -> None:
    width = max((len(r["rig"]) for r in rows), default=3)
    days = len(rows[0]["days"]) if rows else 0
    echo(f"hours per mode over the last {days} day(s), from each rig's ledger:")
    for row in rows:
        spent = ", ".join(f"{mode} {hours:g} h" for mode, hours in row["hours"].items()) or "no ledger yet"
        line = f"{row['rig']:<{width}}  {spent}"
        echo(click.style(f"{line}  (this sweep failed: {row['error']})", fg="yellow") if row["error"] else line)
