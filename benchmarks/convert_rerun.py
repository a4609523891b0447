"""Re-running convert on a converged fleet: `m2p convert` (fingerprints) vs a plain ansible-runner run.

Run as root, after scripts/install:  .venv/bin/python benchmarks/convert_rerun.py [--rigs 10] [--repeat 3]

Boots ``--rigs`` sandbox rigs (HiveOS layout, stand-in GPUs; each its own k3s server),
converts them once with m2p's TEST bundle (stand-in k3s and toolkit packages), then times
side by side, each ``--repeat`` times (median), both as separate processes:

- baseline: the same playbook (playbooks/convert.yml) with the same extra vars through
  ansible-runner, on every rig, as a plain re-run would do;
- m2p: ``m2p convert --yes``: one detect probe per rig reads the fingerprint, and the
  playbook runs only where it differs (here: nowhere).

Then drift: a hand-edited /etc/rancher/k3s/config.yaml on the first rig and a stopped
k3s on the second.  ``m2p convert`` must run the playbook on exactly those two and repair
them (checked: the next run skips every rig).  Target: m2p >= 20x faster.
All rigs share this machine's cores, so absolute times are pessimistic; the ratio carries.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

# The baseline child: the playbook through ansible-runner with what m2p would pass, no probe.
BASELINE = r'''
import sys
from pathlib import Path
from miner2provider.core import collection
from miner2provider.core import inventory
from miner2provider.fleet.bundle.manifest import load_bundle
from miner2provider.fleet.fingerprint import expected_inputs
from miner2provider.fleet.pipeline import fleet_role_vars
from miner2provider.fleet.runner import run_playbook
inv, bundle_dir, known_hosts = sys.argv[1:4]
hosts = inventory.load(inv).select(None)
derived = fleet_role_vars(hosts)
for name, digest in expected_inputs(hosts, derived, load_bundle(bundle_dir)).items():
    derived[name]["fingerprint_inputs"] = digest
report = run_playbook(collection.playbook("convert"), hosts, {"m2p_bundle_dir": bundle_dir}, role_vars=derived,
                      forks=32, known_hosts=Path(known_hosts))
changed = sum(s.changed for s in report.hosts.values())
failed = sum(s.failures + s.unreachable for s in report.hosts.values())
print(f"changed={changed} failed={failed}")
sys.exit(0 if failed == 0 and changed == 0 else 1)
'''


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return time.perf_counter() - start, proc


def must(proc: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    if proc.returncode != 0:
        sys.exit(f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def results(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, object]]:
    return {o["name"]: o for o in json.loads(proc.stdout)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rigs", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from m2p_sandbox import rig as sandbox
    from m2p_sandbox.bundle import build_test_bundle

    work = Path(tempfile.mkdtemp(prefix="m2p-bench-convert-"))
    build_test_bundle(work / "bundle")
    print(f"booting {args.rigs} sandbox rigs ...", flush=True)
    rigs = sandbox.boot([sandbox.RigSpec(f"bench{i:02d}", "hiveos", ("rtx3090",)) for i in range(args.rigs)],
                        owner_pid=os.getpid())
    try:
        inv = work / "rigs.yml"
        inv.write_text(yaml.safe_dump({"all": {"vars": {"m2p_min_free_disk_gb": 5}, "hosts": {
            r.name: {"ansible_host": r.address, "ansible_user": r.user, "ansible_ssh_private_key_file": r.key_file}
            for r in rigs}}}))
        known_hosts = work / "known_hosts"
        m2p = [PY, "-m", "miner2provider", "convert", "-i", str(inv), "--bundle", str(work / "bundle"),
               "--known-hosts", str(known_hosts), "--accept-new", "--yes", "--json"]
        first, proc = timed(m2p)
        must(proc, "the first convert")
        print(f"first convert of {args.rigs} rigs: {first:.1f}s", flush=True)

        baseline_cmd = [PY, "-c", BASELINE, str(inv), str(work / "bundle"), str(known_hosts)]
        base_times, m2p_times = [], []
        for _ in range(args.repeat):
            t, proc = timed(baseline_cmd)
            must(proc, "the baseline re-run (it must change nothing on a converged fleet)")
            base_times.append(t)
            t, proc = timed(m2p)
            skipped = results(must(proc, "m2p convert"))
            if any(o["result"] != "converged" or o["changed"] for o in skipped.values()):
                sys.exit(f"m2p convert did not skip the converged fleet: {skipped}")
            m2p_times.append(t)
        base, fast = statistics.median(base_times), statistics.median(m2p_times)
        print(f"\nre-run on a converged fleet of {args.rigs} rigs (median of {args.repeat}):")
        print(f"  baseline  ansible-runner, convert.yml on every rig  {base:7.2f}s   1.00x")
        print(f"  m2p       convert (fingerprints)                    {fast:7.2f}s  {base / fast:5.1f}x faster")

        on_rig(rigs[0], "sudo sh -c 'echo \"# edited by hand\" >> /etc/rancher/k3s/config.yaml'")
        on_rig(rigs[1], "sudo systemctl stop k3s")
        t, proc = timed(m2p)
        drift = results(must(proc, "m2p convert after drift"))
        ran = sorted(name for name, o in drift.items() if o["result"] == "changed")
        expected = sorted([rigs[0].name, rigs[1].name])
        print(f"\ndrift (edited config on {rigs[0].name}, stopped k3s on {rigs[1].name}): m2p convert {t:.2f}s,")
        for name in ran:
            print(f"  ran on {name}: {drift[name]['message']}")
        if ran != expected or any(o["result"] not in {"changed", "converged"} for o in drift.values()):
            sys.exit(f"drift: expected the playbook on {expected} only, got {drift}")
        after = results(must(timed(m2p)[1], "m2p convert after the repair"))
        if any(o["message"] != "fingerprint matches: skipped" for o in after.values()):
            sys.exit(f"after the repair, not every rig was skipped: {after}")
        print("  next run: every rig converged and skipped")
        ratio = base / fast
        print(f"\ntarget >= 20x: {'met' if ratio >= 20 else 'NOT met'} ({ratio:.1f}x)")
        return 0 if ratio >= 20 else 1
    finally:
        for r in rigs:
            sandbox.stop(r)


def on_rig(rig: Any, command: str) -> None:
    """Run a command on a sandbox rig as its admin user, with the rig's key."""
    proc = subprocess.run(["ssh", "-i", str(rig.key_file), "-o", "StrictHostKeyChecking=no",
                           "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                           f"{rig.user}@{rig.address}", command], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        sys.exit(f"on {rig.name}: {command} failed: {proc.stderr}")


if __name__ == "__main__":
    sys.exit(main())
