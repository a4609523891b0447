"""Income benchmark (issue 57): the fleet page with its income chart, side by side with the page before it.

Run:  .venv/bin/python benchmarks/dashboard_income.py [--baseline REV] [--rigs 1000] [--days 30] [--cards 0]
      [--repeat 7] [--runs 2] [--freeze]

Each side builds its own history with benchmarks/dashboard.py's ``build_history`` (--rigs rigs x --days of ledger, a
change every 4 hours, leases named; --cards GPUs a rig with telemetry, 0: none, the quick build) in its own tree,
serves it with its own app under uvicorn on loopback and fetches its pages over HTTP, median of --repeat: this
checkout, and REV (default: the commit before the income section, 8c8f235) checked out in a temporary git worktree,
so "today's page" is exactly the code before the change.  --runs alternates the two sides.  Target: the fleet page
with the chart < 300 ms; the ratio to the baseline is printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
BASELINE = "8c8f235"  # the commit before the income section

# Run inside a tree (its own code, its own benchmarks/dashboard.py): build, serve, fetch, print JSON.
DRIVER = """
import json, shutil, statistics, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "benchmarks")
from dashboard import TOKEN, build_history, fetch_ms, serve
import urllib.request
def once(url):
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": "Bearer " + TOKEN}), timeout=60) as a:
        a.read()
rigs, days, cards, repeat, freeze = (int(a) for a in sys.argv[1:6])
paths = sys.argv[6:]
work = Path(tempfile.mkdtemp(prefix="m2p-income-bench-"))
try:
    db, inv = build_history(work, rigs, days, cards)
    base, server = serve(db, inv)
    for path in paths:
        fetch_ms(base + path, 1)  # every cache filled (the decoded and typed reports, the templates)
    if freeze:
        import gc
        gc.freeze()  # what is alive now (those caches) is left out of the cyclic collector's full passes
    out = {}
    for path in paths:
        fetch_ms(base + path, 1)  # warm
        cpu = []
        for _ in range(repeat):  # the process's CPU time a page (server and client threads): steadier than wall time
            started = time.process_time()  # on a machine other work shares
            once(base + path)
            cpu.append((time.process_time() - started) * 1000)
        out[path] = [fetch_ms(base + path, repeat), statistics.median(cpu)]
    print(json.dumps(out))
    server.should_exit = True
finally:
    shutil.rmtree(work, ignore_errors=True)
"""
PATHS = {  # what each side is asked: the baseline has no income section nor its API
    "fleet page /": ("/", "/"),
    "fleet page ?per=month": ("/?per=month", None),
    "/api/income": ("/api/income", None),
    "rig page": ("/rigs/rig0500", "/rigs/rig0500"),
}


def measure(tree: Path, args: argparse.Namespace, baseline: bool) -> dict[str, list[float]]:
    paths = [pair[1 if baseline else 0] for pair in PATHS.values()]
    asked = [p for p in paths if p is not None]
    done = subprocess.run([PY, "-c", DRIVER, str(args.rigs), str(args.days), str(args.cards), str(args.repeat),
                           str(int(args.freeze)), *asked],
                          cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the benchmark failed in {tree}: {done.stderr.strip().splitlines()[-1:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: found[p] for name, p in zip(PATHS, paths, strict=True) if p is not None}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--rigs", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--cards", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--freeze", action="store_true",
                        help="gc.freeze() once the caches are filled: the code's own cost, without the cyclic "
                             "collector's full passes over the cached reports (~90 ms every second or third page)")
    args = parser.parse_args()
    worktree = Path(tempfile.mkdtemp(prefix="m2p-baseline-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.baseline],
                   check=True, capture_output=True)
    results: dict[str, list[dict[str, list[float]]]] = {"after": [], "before": []}
    try:
        for _ in range(args.runs):
            results["before"].append(measure(worktree, args, baseline=True))
            results["after"].append(measure(ROOT, args, baseline=False))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=False,
                       capture_output=True)
        shutil.rmtree(worktree.parent, ignore_errors=True)
    print(f"{args.rigs} rigs x {args.days} days of ledger, {args.cards} cards a rig; median of {args.repeat} a run, "
          f"{args.runs} runs alternating; wall ms (CPU ms of the process); before: {args.baseline}"
          + ("; gc frozen after the warm-up" if args.freeze else ""))
    for name in PATHS:
        after = [run[name] for run in results["after"]]
        before = [run[name] for run in results["before"] if name in run]
        ratio = (f"{statistics.median(a[0] for a in after) / statistics.median(b[0] for b in before):.2f}x wall, "
                 f"{statistics.median(a[1] for a in after) / statistics.median(b[1] for b in before):.2f}x CPU"
                 if before else "-")
        wall = statistics.median(a[0] for a in after)
        target = f" [< 300: {'ok' if wall < 300 else 'OVER'}]" if name.startswith("fleet") else ""
        print(f"  {name:<22} after {_shown(after):<28} before {_shown(before) or '-':<28} {ratio}{target}")
    return 0


def _shown(runs: list[list[float]]) -> str:
    return ", ".join(f"{wall:.0f} ({cpu:.0f})" for wall, cpu in runs)


if __name__ == "__main__":
    sys.exit(main())
