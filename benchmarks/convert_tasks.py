"""Where a convert's time goes, task by task: the lever for CI's time and for weak rigs' CPUs alike.

Run as root, after scripts/install:  .venv/bin/python benchmarks/convert_tasks.py [--top 25] [--before GIT-REF]

Boots the suite's usual farm (a HiveOS-layout k3s server with two cards and a plain Debian agent),
converts it with the TEST bundle, then runs ``m2p convert --full`` (the whole playbook on a converged
farm, as the suite's idempotence proofs do) and reads ansible-runner's job events from both runs'
artifacts: each host-task's wall time, whether it ran a module or was skipped, and which role it
belongs to.  Printed: both runs' wall time and the CPU time of this process's children (m2p, ansible
and ssh; the rigs' own CPU is not counted: their processes are this machine's too, but not our
children), the sum of host-task time by role, and the slowest tasks of the ``--full`` run.

``--before REF`` runs the same farm at another commit (a ``git worktree`` of REF with this checkout's
.venv), side by side, so that a change to the roles is measured against what it changes.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def task_events(artifacts: Path) -> list[dict]:
    """Every host-task end (ok, changed, skipped, failed) from ansible-runner's job events."""
    ends = {"runner_on_ok", "runner_on_skipped", "runner_on_failed", "runner_on_unreachable"}
    found = []
    for path in sorted(artifacts.rglob("job_events/*.json")):
        event = json.loads(path.read_text())
        if event.get("event") in ends:
            found.append(event)
    return found


def summarise(events: list[dict], top: int) -> list[str]:
    by_role: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0, 0])
    tasks: dict[str, float] = collections.defaultdict(float)
    for event in events:
        data = event["event_data"]
        role = data.get("role") or "(playbook)"
        seconds = float(data.get("duration") or 0.0)
        row = by_role[role]
        row[0] += seconds
        if event["event"] == "runner_on_skipped":
            row[2] += 1
        else:
            row[1] += 1
        tasks[f"{role}: {data.get('task', '?')} [{data.get('task_action', '?')}]"] += seconds
    ran = sum(int(r[1]) for r in by_role.values())
    skipped = sum(int(r[2]) for r in by_role.values())
    lines = [f"  {len(events)} host-tasks: {ran} ran, {skipped} skipped; "
             f"{sum(r[0] for r in by_role.values()):.1f} s of host-task time"]
    lines.append("  by role (host-task seconds, ran, skipped):")
    for role, (seconds, n_ran, n_skipped) in sorted(by_role.items(), key=lambda kv: -kv[1][0]):
        lines.append(f"    {seconds:7.1f} s {int(n_ran):4d} {int(n_skipped):4d}  {role}")
    lines.append(f"  the {top} slowest tasks (summed over hosts):")
    for name, seconds in sorted(tasks.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"    {seconds:6.2f} s  {name}")
    return lines


def farm(work: Path, rigs: list) -> tuple[list[str], dict[str, str]]:
    hive, plain = rigs
    inv = work / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"m2p_min_free_disk_gb": 5}, "children": {
        "k3s_server": {"hosts": {"ct-hive": {"ansible_host": hive.address, "ansible_user": hive.user,
                                             "ansible_ssh_private_key_file": hive.key_file}}},
        "k3s_agent": {"hosts": {"ct-plain": {"ansible_host": plain.address, "ansible_user": plain.user,
                                             "ansible_ssh_private_key_file": plain.key_file}}}}}}))
    common = ["-i", str(inv), "--bundle", str(work / "bundle"), "--accept-new", "--known-hosts",
              str(work / "known_hosts"), "--yes", "--json"]
    return common, {**os.environ, "PYTHONUNBUFFERED": "1"}


def measure(checkout: Path, label: str, top: int) -> None:
    from m2p_sandbox import rig as sandbox
    from m2p_sandbox.bundle import build_test_bundle

    work = Path(tempfile.mkdtemp(prefix="m2p-bench-tasks-"))
    build_test_bundle(work / "bundle")
    rigs = sandbox.boot([sandbox.RigSpec("ct-hive", "hiveos", ("rtx3090", "rtx3090")),
                         sandbox.RigSpec("ct-plain", "plain", ("rtx3060",))], owner_pid=os.getpid())
    try:
        common, env = farm(work, rigs)
        m2p = [sys.executable, "-m", "miner2provider", "convert", *common]
        print(f"\n== {label} ({checkout})", flush=True)
        for run, extra in (("first convert", []), ("--full re-run", ["--full"])):
            artifacts = work / run.replace(" ", "-")
            cpu, start = child_cpu(), time.perf_counter()
            proc = subprocess.run([*m2p, *extra, "--keep-artifacts", str(artifacts)], cwd=checkout, env=env,
                                  capture_output=True, text=True)
            wall, cpu = time.perf_counter() - start, child_cpu() - cpu
            if proc.returncode != 0:
                sys.exit(f"{run} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            print(f"{run}: {wall:.1f} s wall, {cpu:.1f} CPU-s in m2p, ansible and ssh", flush=True)
            print("\n".join(summarise(task_events(artifacts), top)), flush=True)
    finally:
        for r in rigs:
            sandbox.stop(r)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--before", help="a git ref to measure side by side (a worktree with this .venv)")
    args = parser.parse_args()
    if args.before:
        tree = Path(tempfile.mkdtemp(prefix="m2p-bench-before-")) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.before], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            measure(tree, f"before: {args.before}", args.top)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    measure(ROOT, "this checkout", args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
