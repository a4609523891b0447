"""Re-applying a converged Akash provider: `m2p provider apply` (its fingerprint) vs the playbook run again.

Run as root, after scripts/install:  .venv/bin/python benchmarks/provider_reapply.py [--rigs 3] [--repeat 5]

Boots ``--rigs`` sandbox rigs (HiveOS layout, stand-in RTX 3090s; the first is the k3s server), converts
them with m2p's TEST bundle, points the server's stand-in kubectl at a STAND-IN Kubernetes API, and installs
Akash's provider (the charts from ../shared/akash; the inventory operator's Deployment put in the API as
k3s's Helm job would make it, then a second apply to finish).  Then, side by side, each ``--repeat`` times
(median), both as separate processes on the converged provider:

- baseline: the same playbook (playbooks/provider.yml) through ansible-runner with the variables m2p passes
  (the stack built the same way, every rig probed), as an apply without the fingerprint would run it;
- m2p: ``m2p provider apply --yes``: the detect probe of every rig (the attributes and prices need them),
  the stack built, one SSH read of the server's record, no Ansible.
Target: the m2p re-apply under 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
PASS_ENV = "M2P_BENCH_AKASH_KEY_PASS"
KEY = ("-----BEGIN TENDERMINT PRIVATE KEY-----\nkdf: bcrypt\nsalt: 00112233445566778899AABBCCDDEEFF\n"
       "type: secp256k1\n\nYmVuY2htYXJrIGtleSwgbm90IGEgd2FsbGV0\n=BnCh\n-----END TENDERMINT PRIVATE KEY-----\n")

# The baseline child: the provider playbook through ansible-runner with what m2p passes (the stack built
# the same way), no fingerprint read.
BASELINE = r'''
import os, sys
from pathlib import Path
from miner2provider.core import collection, inventory, textfiles
from miner2provider.core.errors import ProviderFileError
from miner2provider.detect.survey import detect
from miner2provider.detect.ssh import SshOptions
from miner2provider.fleet import provider as provider_run
from miner2provider.fleet.runner import run_playbook
from miner2provider.market import marketplace, pricing
from miner2provider.market.base import ProviderFarm
from miner2provider.timeshare import economics
from miner2provider.cli.rigs import gpus_of
inv, provider_path, econ_path, charts, known_hosts = sys.argv[1:6]
market = marketplace()
provider = market.read_provider_file(textfiles.read_text(provider_path, "provider file", ProviderFileError), provider_path)
hosts = list(inventory.load(inv).hosts)
opts = SshOptions(known_hosts=Path(known_hosts))
rigs = gpus_of(hosts, detect(hosts, opts))
server = provider_run.server_of(hosts)
farm = ProviderFarm(market.fleet_attributes(rigs, provider.region or None).attributes,
                    tuple(pricing.fleet_floors(rigs, economics.load(econ_path))), server.node_name,
                    market.card_list(rigs)[0], next(h for h in hosts if h.name == provider.ingress_rig).node_name)
stack = market.provider_stack(provider, farm, Path(charts), os.environ)
variables = {**provider_run.server_vars(server, market.provider_parts), "market_provider_state": "present",
             "market_provider_manifests": stack.files, "market_provider_fingerprint": stack.fingerprint,
             "market_provider_patches": list(stack.patches)}
report = run_playbook(collection.playbook("provider"), hosts, role_vars={server.name: variables},
                      known_hosts=Path(known_hosts), limit=[server.name],
                      secret_vars={server.name: {"market_provider_secret": stack.secret}}, secret_env=stack.secret_env)
failed = sum(s.failures + s.unreachable for s in report.hosts.values())
print(f"changed={report.changed} failed={failed}")
sys.exit(0 if failed == 0 else 1)
'''


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
    return time.perf_counter() - start, proc


def must(proc: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    if proc.returncode != 0:
        sys.exit(f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rigs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from m2p_sandbox import helm, network, tenant
    from m2p_sandbox import rig as sandbox
    from m2p_sandbox.bundle import build_test_bundle
    from m2p_sandbox.kube_api import KubeApiStandin
    from miner2provider.market.akash.address import encode

    work = Path(tempfile.mkdtemp(prefix="m2p-bench-provider-"))
    build_test_bundle(work / "bundle")
    print(f"booting {args.rigs} sandbox rigs ...", flush=True)
    rigs = sandbox.boot([sandbox.RigSpec(f"pv{i:02d}", "hiveos", ("rtx3090",)) for i in range(args.rigs)],
                        owner_pid=os.getpid())
    api = KubeApiStandin(host=str(network.gateway()), tls=True)  # HTTPS with its own CA, as kube-apiserver
    try:
        entry = {r.name: {"ansible_host": r.address, "ansible_user": r.user, "ansible_ssh_private_key_file": r.key_file}
                 for r in rigs}
        inv = work / "rigs.yml"
        inv.write_text(yaml.safe_dump({"all": {"vars": {"m2p_min_free_disk_gb": 5}, "children": {
            "k3s_server": {"hosts": {rigs[0].name: entry[rigs[0].name]}},
            "k3s_agent": {"hosts": {r.name: entry[r.name] for r in rigs[1:]}}}}}))
        known_hosts = work / "known_hosts"
        ssh = ["--known-hosts", str(known_hosts), "--accept-new"]
        env = {"PYTHONUNBUFFERED": "1", PASS_ENV: secrets.token_urlsafe(16)}
        must(timed([PY, "-m", "miner2provider", "convert", "-i", str(inv), "--bundle", str(work / "bundle"), *ssh,
                    "--yes"], env)[1], "convert")
        admin = secrets.token_urlsafe(16)
        api.admin_tokens.add(admin)
        client = tenant.ssh(rigs[0])
        try:
            assert api.authority is not None
            ca_file = "/etc/m2p-standin/kube-api-ca.crt"  # the stand-in kubectl checks the API against it
            config = json.dumps({"url": api.url, "token": admin, "ca_file": ca_file})
            rc, out = tenant.run(client, f"sudo mkdir -p /etc/m2p-standin && echo "
                                         f"{shlex.quote(api.authority.pem.decode())} | sudo tee {ca_file} > /dev/null && "
                                         f"echo {shlex.quote(config)} | sudo tee /etc/m2p-standin/kube-api.json > /dev/null")
            if rc:
                sys.exit(f"pointing the server's stand-in kubectl at the API failed: {out}")
        finally:
            client.close()
        charts = helm.chart_folder(work / "charts")
        (work / "provider.key").write_text(KEY)
        (work / "provider.key").chmod(0o600)
        (work / "provider.yml").write_text(
            f"domain: bench.example\nwallet: {{address: {encode(bytes(range(20)))}, key_file: provider.key, "
            f"passphrase_env: {PASS_ENV}}}\nemail: ops@bench.example\ningress_rig: {rigs[0].name}\n"
            "rpc_node: http://akash-node:26657\n")
        (work / "economics.yml").write_text("mining_revenue_per_gpu_day: {rtx3090: 0.95}\n"
                                            "gpu_power_watts: {default: 300}\npower_price_per_kwh: 0.12\n")
        apply = [PY, "-m", "miner2provider", "provider", "apply", "-i", str(inv), "-p", str(work / "provider.yml"),
                 "--economics", str(work / "economics.yml"), "--charts", str(charts), *ssh, "--yes", "--json"]
        first, proc = timed(apply, env)
        must(proc, "the first provider apply")
        api.apply([{"apiVersion": "apps/v1", "kind": "Deployment",  # k3s's Helm job, standing in
                    "metadata": {"name": "operator-inventory", "namespace": "akash-services"},
                    "spec": {"template": {"spec": {"containers": [{"name": "operator-inventory", "env": []}]}}}}])
        second, proc = timed(apply, env)
        must(proc, "the second provider apply")
        print(f"first apply {first:.1f}s, second (the operator patched) {second:.1f}s", flush=True)

        baseline = [PY, "-c", BASELINE, str(inv), str(work / "provider.yml"), str(work / "economics.yml"),
                    str(charts), str(known_hosts)]
        base_times, m2p_times = [], []
        for _ in range(args.repeat):
            t, proc = timed(baseline, env)
            must(proc, "the baseline playbook run")
            base_times.append(t)
            t, proc = timed(apply, env)
            (outcome,) = json.loads(must(proc, "m2p provider apply").stdout)
            if outcome["result"] != "converged":
                sys.exit(f"the converged provider was not skipped: {outcome}")
            m2p_times.append(t)
        base, fast = statistics.median(base_times), statistics.median(m2p_times)
        print(f"\nre-apply on a converged provider, {args.rigs} rigs (median of {args.repeat}):")
        print(f"  baseline  ansible-runner, provider.yml on the server  {base:6.2f}s   1.00x")
        print(f"  m2p       provider apply (fingerprint)                {fast:6.2f}s  {base / fast:5.1f}x faster")
        print(f"\ntarget < 2 s: {'met' if fast < 2 else 'NOT met'} ({fast:.2f}s)")
        return 0 if fast < 2 else 1
    finally:
        api.close()
        for r in rigs:
            sandbox.stop(r)


if __name__ == "__main__":
    sys.exit(main())
