"""Dashboard benchmark: the page and the API over a big history, and what a sweep costs per rig.

Run:  .venv/bin/python benchmarks/dashboard.py [--rigs 1000] [--days 30] [--sweep-rigs 200] [--repeat 5]

1. A history database of --rigs simulated rigs with --days of ledger each (a change every 4 hours,
   leases named) and one detect report each (a real one: this machine's own, read by `m2p detect
   --local`, renamed per rig).  The dashboard app runs under uvicorn on loopback (as `m2p dashboard`
   serves it, the background sweep off); the fleet page, ``/api/rigs`` and one rig's 30-day timeline
   are fetched over HTTP, median of --repeat.  Targets: page and /api/rigs < 300 ms, timeline < 200 ms.
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
from pathlib import Path

import uvicorn
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from detect_fanout import BIN, PY, USER, address, ensure_user, start_sshds, stop_sshds, timed  # noqa: E402

from miner2provider.core.inventory import load as load_inventory  # noqa: E402
from miner2provider.dashboard.actions import Actions, Fleet  # noqa: E402
from miner2provider.dashboard.app import DashboardConfig, create_app  # noqa: E402
from miner2provider.dashboard.history import History  # noqa: E402
from miner2provider.dashboard.limits import HeaderDeadline  # noqa: E402
from miner2provider.detect.ssh import SshOptions  # noqa: E402
from miner2provider.rigside.ledger import Entry  # noqa: E402
from miner2provider.timeshare.economics import parse as parse_economics  # noqa: E402

TOKEN = "bench-" + "t" * 32  # every request signs in, as the dashboard now always asks

ECONOMICS = "lease_price_per_gpu_hour: {default: 0.2}\nmining_revenue_per_gpu_day: {default: 0.6}\n"
MODES = ("idle-mining", "leasing", "mining", "leasing")


def build_history(work: Path, rigs: int, days: int) -> tuple[Path, Path]:
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
            history.add_snapshot(name, now, {**report, "name": name, "read_at": now})
    return db, inv


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


def fetch_ms(url: str, repeat: int) -> float:
    times = []
    for _ in range(repeat + 1):  # the first warms the caches (templates, card database)
        started = time.perf_counter()
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
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
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sweep-rigs", type=int, default=0)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="m2p-dash-bench-"))
    try:
        started = time.monotonic()
        db, inv = build_history(work, args.rigs, args.days)
        print(f"history: {args.rigs} rigs x {args.days} days of ledger ({args.days * 6} lines each), "
              f"{db.stat().st_size / 1e6:.1f} MB, built in {time.monotonic() - started:.1f} s", flush=True)
        base, server = serve(db, inv)
        middle = f"rig{args.rigs // 2:04d}"
        results = {
            "fleet page /": (fetch_ms(base + "/", args.repeat), 300),
            "/api/rigs": (fetch_ms(base + "/api/rigs", args.repeat), 300),
            "/api/rigs?days=30": (fetch_ms(base + "/api/rigs?days=30", args.repeat), 300),
            "timeline 30 days": (fetch_ms(f"{base}/api/rigs/{middle}/timeline?days=30", args.repeat), 200),
            "rig page 30 days": (fetch_ms(f"{base}/rigs/{middle}?days=30", args.repeat), 200),
        }
        server.should_exit = True
        print(f"median of {args.repeat} over HTTP on loopback (ms; target in brackets):")
        for name, (ms, target) in results.items():
            print(f"  {name:<20} {ms:7.1f} ms  [{target}]  {'ok' if ms < target else 'OVER'}", flush=True)
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
