"""Detect fan-out benchmark: `m2p detect` vs `ansible all -m setup` vs a bare paramiko probe.

Run as root:  .venv/bin/python benchmarks/detect_fanout.py [--rigs 50 200] [--forks 32]
              .venv/bin/python benchmarks/detect_fanout.py --rigs 50 --profile detect.prof

``--before DIR`` adds a fourth contestant, `m2p detect` run from DIR (a checkout of an earlier commit, such as
``git archive COMMIT | tar -x -C DIR``), interleaved with the others: before and after side by side on the same
rigs and the same load.  ``--skip-ansible`` leaves Ansible out (a minute a run at 200 rigs) while iterating.
``--profile FILE`` runs `m2p detect` once per size under cProfile instead (every thread profiled: the
fan-out's workers and paramiko's transports too), writes the merged stats to FILE and prints the top of them.

Each simulated rig is an sshd on its own loopback address (127.77.x.y), lighter than a
sandbox rig.  All log in as the throwaway user ``m2pbench`` (shell /bin/sh, created and
removed by the benchmark): root's shell start-up on this machine (pyenv in .bashrc) costs
about 0.1 s per SSH command, which no rig pays and which would swamp what we measure.  Every rig every rig shares this machine's 2 cores, so absolute times are pessimistic
and the ratios are what carries over.  All three contestants use the same parallelism
(--forks), run as separate processes (start-up included), and are timed side by side;
each is run --repeat times and the median is reported.  Targets: m2p detect at
least 10x faster than `ansible -m setup`, within 1.3x of the bare probe.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
BIN = Path(PY).parent

BARE_PROBE = r'''
import sys, paramiko, json
from concurrent.futures import ThreadPoolExecutor
hosts, key, forks = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def one(addr):
    c = paramiko.SSHClient()
    c.set_missing_host_key_policy(paramiko.AutoAddPolicy())
    c.connect(addr, username="m2pbench", key_filename=key, allow_agent=False, look_for_keys=False, timeout=30)
    _, out, _ = c.exec_command("true")
    out.read(); rc = out.channel.recv_exit_status(); c.close(); return rc
with ThreadPoolExecutor(forks) as pool:
    codes = list(pool.map(one, hosts))
sys.exit(0 if all(c == 0 for c in codes) else 1)
'''


# `m2p detect` under cProfile with every thread profiled (cProfile alone sees only the main thread).
PROFILED = r'''
import cProfile, pstats, runpy, sys, threading, time
out, sys.argv = sys.argv[1], ["m2p", *sys.argv[2:]]
profiles = [cProfile.Profile(time.thread_time)]  # CPU, not waits
bootstrap = threading.Thread._bootstrap_inner  # paramiko's Transport overrides run(), not this
def profiled(self):
    profile = cProfile.Profile(time.thread_time)
    profiles.append(profile)
    profile.enable()
    try:
        bootstrap(self)
    finally:
        profile.disable()
threading.Thread._bootstrap_inner = profiled
profiles[0].enable()
try:
    runpy.run_module("miner2provider", run_name="__main__")
except SystemExit:
    pass
profiles[0].disable()
stats = pstats.Stats(profiles[0])
for profile in profiles[1:]:
    stats.add(profile)
stats.dump_stats(out)
'''

USER = "m2pbench"


def ensure_user(home: Path) -> bool:
    """Create the benchmark's login user; True when this run created it."""
    if subprocess.run(["id", USER], capture_output=True).returncode == 0:
        return False
    # Password "*": no password login, but not "locked" (sshd without PAM refuses locked accounts).
    subprocess.run(["useradd", "--system", "--password", "*", "--home-dir", str(home), "--create-home",
                    "--shell", "/bin/sh", USER],
                   check=True)
    return True


def address(i: int) -> str:
    return f"127.77.{i // 250}.{i % 250 + 1}"


def start_sshds(work: Path, count: int) -> list[subprocess.Popen[bytes]]:
    key = work / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "host_key")], check=True)
    shutil.copy(str(key) + ".pub", work / "authorized_keys")
    os.makedirs("/run/sshd", exist_ok=True)
    procs = []
    for i in range(count):
        cfg = work / f"sshd_{i}.conf"
        cfg.write_text(
            f"ListenAddress {address(i)}:22\nHostKey {work / 'host_key'}\nPidFile none\n"
            f"AuthorizedKeysFile {work / 'authorized_keys'}\nStrictModes no\nUsePAM no\n"
            "PermitRootLogin no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UseDNS no\nMaxStartups 200\n"
        )
        procs.append(subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(cfg)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    deadline = time.monotonic() + 60
    import socket

    for i in range(count):
        while True:
            try:
                socket.create_connection((address(i), 22), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"sshd on {address(i)} did not start") from None
                time.sleep(0.05)
    return procs


def stop_sshds(procs: list[subprocess.Popen[bytes]], created_user: bool, work: Path) -> None:
    """End the simulated rigs this run started (by their PIDs), the user it created and its files."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(timeout=10)
    if created_user:
        subprocess.run(["userdel", USER], capture_output=True)
    shutil.rmtree(work, ignore_errors=True)


def timed(cmd: list[str], env: dict[str, str], cwd: str | None = None) -> tuple[float, float]:
    """(wall seconds, controller CPU seconds) of one run; the rigs' sshd CPU is not counted."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd)
    elapsed = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stdout[:1500]}\n...\n{proc.stdout[-1500:]}")
    return elapsed, cpu


def run_size(count: int, forks: int, repeat: int, profile: str | None = None, before: str | None = None,
             skip_ansible: bool = False) -> dict[str, tuple[float, float]]:
    work = Path(tempfile.mkdtemp(prefix="m2p-bench-"))
    work.chmod(0o755)
    created = ensure_user(work / "home")
    procs = start_sshds(work, count)
    try:
        key = str(work / "id_ed25519")
        hosts = {f"rig{i:04d}": {"ansible_host": address(i)} for i in range(count)}
        inv = work / "rigs.yml"
        inv.write_text(yaml.safe_dump({"all": {"vars": {"ansible_user": USER,
                                                         "ansible_ssh_private_key_file": key},
                                                "hosts": hosts}}))
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
               "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PIPELINING": "True",
               "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3", "ANSIBLE_STDOUT_CALLBACK": "oneline",
               "ANSIBLE_SSH_ARGS": "-o ControlMaster=no -o UserKnownHostsFile=/dev/null"}
        known = work / "known_hosts"
        contestants = {
            "m2p detect": [PY, "-m", "miner2provider", "detect", "-i", str(inv), "--accept-new",
                           "--known-hosts", str(known), "--forks", str(forks), "--json"],
            "ansible -m setup": [str(BIN / "ansible"), "all", "-i", str(inv), "-m", "setup", "-f", str(forks)],
            "bare paramiko probe": [PY, "-c", BARE_PROBE, json.dumps([address(i) for i in range(count)]),
                                    key, str(forks)],
        }
        if skip_ansible:
            del contestants["ansible -m setup"]
        cwds = {}
        if before:  # `python -m` puts the working directory first on sys.path: DIR's miner2provider runs
            contestants["m2p detect, before"] = contestants["m2p detect"]
            cwds["m2p detect, before"] = before
        if profile:
            detect = contestants["m2p detect"]
            return {"m2p detect": timed([PY, "-c", PROFILED, profile, *detect[3:]], env)}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in contestants}
        for _ in range(repeat):
            for name, cmd in contestants.items():  # interleaved, so load drifts hit all alike
                times[name].append(timed(cmd, env, cwds.get(name)))
        return {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t))
                for name, t in times.items()}
    finally:
        stop_sshds(procs, created, work)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rigs", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--forks", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", metavar="FILE", help="run m2p detect once under cProfile, stats to FILE")
    parser.add_argument("--before", metavar="DIR", help="also time m2p detect from this checkout, side by side")
    parser.add_argument("--skip-ansible", action="store_true", help="leave ansible -m setup out")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: each simulated rig is an sshd on port 22 of a loopback address")
    print(f"detect fan-out, forks={args.forks}, median of {args.repeat}. wall = seconds for the whole run;"
          " cpu = controller CPU per rig (what carries over to a real fleet, whose rigs have their own CPUs)")
    for count in args.rigs:
        if args.profile:
            wall, cpu = run_size(count, args.forks, args.repeat, args.profile)["m2p detect"]
            print(f"{count:>4} rigs  m2p detect under cProfile: {wall:.2f}s, {cpu * 1000 / count:.1f}ms CPU per rig")
            pstats.Stats(args.profile).sort_stats("tottime").print_stats(25)
            pstats.Stats(args.profile).sort_stats("cumulative").print_stats(40)
            continue
        t = run_size(count, args.forks, args.repeat, before=args.before, skip_ansible=args.skip_ansible)
        per = 1000 / count
        print(f"{count:>4} rigs  " + "  ".join(f"{name}: {w:.2f}s, {c * per:.1f}ms CPU/rig" for name, (w, c) in t.items()),
              flush=True)
        (m2p_w, m2p_c), (bare_w, bare_c) = t["m2p detect"], t["bare paramiko probe"]
        ratios = [f"m2p/bare wall {m2p_w / bare_w:.2f}x cpu {m2p_c / bare_c:.2f}x"]
        if "ansible -m setup" in t:
            ans_w, ans_c = t["ansible -m setup"]
            ratios.insert(0, f"ansible/m2p wall {ans_w / m2p_w:.1f}x cpu {ans_c / m2p_c:.1f}x")
        if "m2p detect, before" in t:
            old_w, old_c = t["m2p detect, before"]
            ratios.append(f"before/after wall {old_w / m2p_w:.2f}x cpu {old_c / m2p_c:.2f}x")
        print(f"{'':>4}       " + "  |  ".join(ratios), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
