"""Dashboard benchmark: the page and the API over a big history, and what a sweep costs per rig.

Run:  .venv/bin/python benchmarks/dashboard.py [--rigs 1000] [--cards 8] [--days 30] [--sweep-rigs 200] [--repeat 5]

1. A history database of --rigs simulated rigs with --days of ledger each (a change every 4 hours,
   leases named) and one detect report each (a real one: this machine's own, read by `m2p detect
   --local`, renamed per rig), which lists --cards NVIDIA GPUs and the agent's telemetry of them
   (rigside/status.py Telemetry: every figure read, one rig in 50 with a hot card), and a day of the
   cards' samples (history.py card_samples) at the agent's publish pace (agent/telemetry.py PUBLISH_S,
   5 minutes: 288 readings a card); --cards 0: neither (the fleet before issue 56).  The dashboard app
   runs under uvicorn on loopback (as `m2p dashboard` serves it, the background sweep off); the fleet
   page, ``/api/rigs``, one rig's 30-day timeline and page (its card table and day charts) and
   ``/metrics`` (gzipped, as Prometheus asks) are fetched over HTTP, median of --repeat.  Targets: page
   and /api/rigs < 300 ms, timeline and rig page < 200 ms (/metrics has none: a scrape every 15 s or more).
2. With --sweep-rigs N (as root): N sshd endpoints on loopback addresses (detect_fanout.py's), and
   the controller CPU per rig of one `m2p history` sweep (probe, report and ledger into SQLite)
   beside a plain `m2p status --json` over the same rigs.  Target: sweep < 10 ms CPU per rig.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

import uvicorn
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from detect_fanout import BIN, PY, USER, address, ensure_user, start_sshds, stop_sshds, timed  # noqa: E402

from miner2provider.agent.telemetry import PUBLISH_S  # noqa: E402 (the agent publishes new figures every 5 min at most)
from miner2provider.core.inventory import load as load_inventory  # noqa: E402
from miner2provider.dashboard.actions import Actions, Fleet  # noqa: E402
from miner2provider.dashboard.app import DashboardConfig, create_app  # noqa: E402
from miner2provider.dashboard.history import History  # noqa: E402
from miner2provider.dashboard.limits import HeaderDeadline  # noqa: E402
from miner2provider.detect.ssh import SshOptions  # noqa: E402
from miner2provider.rigside.ledger import Entry  # noqa: E402
from miner2provider.rigside.status import Card, Telemetry  # noqa: E402
from miner2provider.timeshare.economics import parse as parse_economics  # noqa: E402

TOKEN = "bench-" + "t" * 32  # every request signs in, as the dashboard now always asks

ECONOMICS = "lease_price_per_gpu_hour: {default: 0.2}\nmining_revenue_per_gpu_day: {default: 0.6}\n"
MODES = ("idle-mining", "leasing", "mining", "leasing")



def gpus_of(n: int, cards: int) -> list[dict[str, Any]]:
    """The detect report's GPUs of a rig of ``cards`` RTX 3090s (detect/facts/gpu.py Gpu, as nvidia-smi lists them)."""
    return [{"index": c, "name": "NVIDIA GeForce RTX 3090", "uuid": f"GPU-{n:08x}-{c:04x}-0000-0000-000000000000",
             "pci_bus_id": f"00000000:{c + 1:02X}:00.0", "vendor_id": "10de", "device_id": "2204",
             "subsystem_id": "0x38801462", "memory_mib": 24576, "driver_version": "550.127.05"} for c in range(cards)]


def telemetry_of(n: int, cards: int, now: float) -> Telemetry:
    """The agent's last reading of the rig's cards: every figure read (the most a row can show), one rig in 50
    with a card over its limit."""
    hot = n % 50 == 0
    return Telemetry(time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now - 60)), tuple(
        Card(c, f"GPU-{n:08x}-{c:04x}-0000-0000-000000000000", "NVIDIA GeForce RTX 3090", f"00000000:{c + 1:02X}:00.0",
             "hot" if hot and c == 3 else "ok", "91 °C, the limit is 85 °C" if hot and c == 3 else "",
             91.0 if hot and c == 3 else 60.0 + (n + c) % 15, 70.0, 280.0 + c, 350.0, 1695.0, 9751.0, 100.0, 5020.0,
             24576.0, 4, 16, 0x4, None) for c in range(cards)))


def add_card_samples(history: History, rig: str, cards: int, now: float) -> None:
    """A day of the rig's card samples at the agent's publish pace, in one transaction (History.add_cards stores
    one reading a call, as a sweep does: 288,000 calls would take the benchmark minutes to build)."""
    rows = [(rig, now - k * PUBLISH_S, c, 60.0 + (k + c) % 15, 280.0 + (k * c) % 40)
            for k in range(int(86_400 // PUBLISH_S)) for c in range(cards)]
    history.db.execute("BEGIN")
    history.db.executemany("INSERT INTO card_samples VALUES (?, ?, ?, ?, ?)", rows)
    history.db.execute("COMMIT")


def build_history(work: Path, rigs: int, days: int, cards: int) -> tuple[Path, Path]:
    local = subprocess.run([PY, "-m", "miner2provider", "detect", "--local", "--json"], capture_output=True,
                           text=True)
    report = json.loads(local.stdout)[0] if local.stdout.strip() else {}
    now = time.time()
    db = work / "history.sqlite3"
    inv = work / "rigs.yml"
    names = [f"rig{i:04d}" for i in range(rigs)]
    inv.write_text(yaml.safe_dump({"all": {"children": {f"farm{g}": {"hosts": {
        n: {"ansible_host": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"} for i, n in enumerate(names) if i % 4 == g}}
        for g in range(4)}}}))
    with History(db) as history:
        for n, name in enumerate(names):
            start = now - days * 86_400 + n  # rigs switch at slightly different times
            ledger = [Entry(start + k * 4 * 3600, MODES[k % 4], gpus=6,
                            leases=(f"lease-{n}/web-{k}",) if MODES[k % 4] == "leasing" and k % 8 == 1 else ())
                      for k in range(days * 6)]
            history.add_ledger(name, ledger, seen_at=now)
            history.add_snapshot(name, now, {**report, "name": name, "read_at": now, **with_cards(report, n, cards, now)})
            if cards:
                add_card_samples(history, name, cards, now)
    return db, inv


def with_cards(report: dict[str, Any], n: int, cards: int, now: float) -> dict[str, Any]:
    """The report's facts with the rig's GPUs and its agent's status carrying telemetry (none: --cards 0)."""
    facts = report.get("facts")
    if not cards or not isinstance(facts, dict):
        return {}
    agent = {**facts["agent_status"], "present": True, "mode": "mining", "telemetry": asdict(telemetry_of(n, cards, now))}
    return {"facts": {**facts, "gpus": {"state": "ok", "gpus": gpus_of(n, cards), "error": ""}, "agent_status": agent}}


def serve(db: Path, inv: Path) -> tuple[str, uvicorn.Server]:
    hosts = load_inventory(inv).hosts
    actions = Actions(Fleet(str(inv), SshOptions(), None, (), lambda rig: rig))
    app = create_app(DashboardConfig(db, list(hosts), parse_economics(ECONOMICS), actions, lambda chosen: [],
                                     lambda chosen: 0, 0, TOKEN))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           http=HeaderDeadline))  # as `m2p dashboard` serves it
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("the dashboard did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def fetch_ms(url: str, repeat: int, headers: dict[str, str] | None = None) -> float:
    times = []
    for _ in range(repeat + 1):  # the first warms the caches (templates, card database)
        started = time.perf_counter()
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}", **(headers or {})})
        with urllib.request.urlopen(request, timeout=60) as answer:
            answer.read()
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:]) * 1000


def sweep_cpu(count: int, repeat: int) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="m2p-bench-"))
    work.chmod(0o755)
    created = ensure_user(work / "home")
    procs = start_sshds(work, count)
    try:
        inv = work / "rigs.yml"
        inv.write_text(yaml.safe_dump({"all": {"vars": {"ansible_user": USER, "ansible_ssh_private_key_file":
                                                         str(work / "id_ed25519")},
                                                "hosts": {f"rig{i:04d}": {"ansible_host": address(i)}
                                                          for i in range(count)}}}))
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        common = ["-i", str(inv), "--accept-new", "--known-hosts", str(work / "known_hosts"), "--forks", "32"]
        contestants = {
            "m2p status --json": [PY, "-m", "miner2provider", "status", *common, "--json"],
            "m2p history (sweep)": [PY, "-m", "miner2provider", "history", *common, "--db",
                                    str(work / "h.sqlite3"), "--json"],
        }
        cpu: dict[str, list[float]] = {name: [] for name in contestants}
        for _ in range(repeat):
            for name, cmd in contestants.items():
                cpu[name].append(timed(cmd, env)[1])
        return {name: statistics.median(values) / count * 1000 for name, values in cpu.items()}
    finally:
        stop_sshds(procs, created, work)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rigs", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--cards", type=int, default=8, help="GPUs a rig, with telemetry (0: none)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sweep-rigs", type=int, default=0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="m2p-dash-bench-"))
    try:
        started = time.monotonic()
        db, inv = build_history(work, args.rigs, args.days, args.cards)
        print(f"history: {args.rigs} rigs x {args.days} days of ledger ({args.days * 6} lines each), "
              f"{args.cards} cards a rig with telemetry and a day of samples, "
              f"{db.stat().st_size / 1e6:.1f} MB, built in {time.monotonic() - started:.1f} s", flush=True)
        base, server = serve(db, inv)
        middle = f"rig{args.rigs // 2:04d}"
        results = {
            "fleet page /": (fetch_ms(base + "/", args.repeat), 300),
            "/api/rigs": (fetch_ms(base + "/api/rigs", args.repeat), 300),
            "/api/rigs?days=30": (fetch_ms(base + "/api/rigs?days=30", args.repeat), 300),
            "timeline 30 days": (fetch_ms(f"{base}/api/rigs/{middle}/timeline?days=30", args.repeat), 200),
            "rig page 30 days": (fetch_ms(f"{base}/rigs/{middle}?days=30", args.repeat), 200),
            "/metrics (gzip)": (fetch_ms(base + "/metrics", args.repeat, {"Accept-Encoding": "gzip"}), None),
        }
        server.should_exit = True
        print(f"median of {args.repeat} over HTTP on loopback (ms; target in brackets):")
        for name, (ms, target) in results.items():
            verdict = "" if target is None else "ok" if ms < target else "OVER"
            print(f"  {name:<20} {ms:7.1f} ms  [{target or '-'}]  {verdict}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.sweep_rigs:
        if os.geteuid() != 0:
            raise SystemExit("--sweep-rigs runs as root: each simulated rig is an sshd on a loopback address")
        cpu = sweep_cpu(args.sweep_rigs, max(1, args.repeat // 2))
        plain, sweep = cpu["m2p status --json"], cpu["m2p history (sweep)"]
        print(f"{args.sweep_rigs} rigs, controller CPU per rig: status {plain:.1f} ms, sweep {sweep:.1f} ms "
              f"(sweep/status {sweep / plain:.2f}x) [sweep < 10 ms]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
