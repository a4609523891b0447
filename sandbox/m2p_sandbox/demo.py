"""``m2p demo``: the whole flow on a sandbox rig, for people without rigs at hand.

The harness's, not the product's: the m2p command line finds it through the entry point
``miner2provider.commands`` this distribution declares (sandbox/pyproject.toml); without the harness,
``m2p demo`` says how to get it (miner2provider/cli/app.py).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from m2p_sandbox.errors import DemoFailed
from miner2provider.cli.app import Context, cli, main, pass_ctx
from miner2provider.core import collection

DEMO_TOKEN_ENV = "M2P_DEMO_AGENT_TOKEN"


@cli.command("demo")
@click.option("--dashboard", "serve", is_flag=True,
              help="After status, serve `m2p dashboard` over the demo rig on 127.0.0.1:8477 until Ctrl-C, then revert.")
@pass_ctx
def demo_command(ctx: Context, serve: bool) -> None:
    """Try m2p without rigs: detect, plan, convert, status, the time-share with a lease, history and revert
    on a SANDBOX rig.

    Boots a HiveOS-layout sandbox rig here (systemd-nspawn; needs root and the packages
    scripts/install adds) and converts it with m2p's TEST bundle, whose k3s and NVIDIA
    toolkit are stand-ins.  Nothing outside this machine is touched.  Needs the sandbox
    harness (m2p-sandbox), which a plain install of m2p leaves out.
    """
    from m2p_sandbox import base, network, provider_demo, tenant
    from m2p_sandbox import rig as sandbox
    from m2p_sandbox.bundle import build_test_bundle
    from m2p_sandbox.kube_api import KubeApiStandin

    ctx.info(click.style("m2p demo: a SANDBOX rig (HiveOS layout, 2 stand-in RTX 3090s), STAND-IN k3s and NVIDIA "
                         "toolkit packages, a STAND-IN Kubernetes API and a STAND-IN tenant's lease; no real rig, "
                         "GPU, marketplace or vendor download is involved.", bold=True))
    work = Path(tempfile.mkdtemp(prefix="m2p-demo-"))
    rigs: list[Any] = []
    api = None
    token = secrets.token_urlsafe(24)
    os.environ[DEMO_TOKEN_ENV] = token  # the agent's API token, as a user names one in m2p_agent_token_env
    closing = contextlib.ExitStack()  # the provider steps' stand-ins
    try:
        build_test_bundle(work / "bundle")
        if not base.is_built(sandbox.cache_dir()):
            ctx.info("building the sandbox rigs' image first (Debian packages from this machine's mirror; about a "
                     f"minute, once; its log: {sandbox.cache_dir()}) ...")
        ctx.info("booting the sandbox rig demo-hive ...")
        rigs = sandbox.boot([sandbox.RigSpec("demo-hive", "hiveos", ("rtx3090", "rtx3090"))], owner_pid=os.getpid())
        rig = rigs[0]
        api = KubeApiStandin(host=str(network.gateway()))  # HTTPS with its own CA, as kube-apiserver
        api.add_node("demo-hive", token, gpus=2)
        assert api.authority is not None
        (work / "cluster-ca.crt").write_bytes(api.authority.pem)  # the agent's token comes with the cluster's CA
        inv = work / "rigs.yml"
        # Its own k3s server (group k3s_server): the farm an Akash provider needs.
        inv.write_text(f"all:\n  children:\n    k3s_server:\n      hosts:\n        demo-hive:\n"
                       f"          ansible_host: {rig.address}\n          ansible_user: {rig.user}\n"
                       f"          ansible_ssh_private_key_file: {rig.key_file}\n          m2p_min_free_disk_gb: 5\n"
                       f"          m2p_agent_token_env: {DEMO_TOKEN_ENV}\n"
                       f"          m2p_agent_ca_file: {work / 'cluster-ca.crt'}\n")
        # Policy profit: the rig is offered while a lease pays more than mining.  The stand-in miner
        # reports 58 MH/s kawpow at 240 W a card (HiveOS's stats file): 58 x 0.02 = 1.16 a day, power
        # 0.029/h; floor 0.029 + 1.15 x 0.019 = 0.051/h a card, so a 0.25 lease pays: offered.
        (work / "demo-schedule.yml").write_text("timezone: UTC\npolicy: profit\nmin_switch_interval: 0s\n")
        (work / "economics.yml").write_text(
            "currency: USD\nlease_price_per_gpu_hour: {rtx3090: 0.25}\nmining_revenue_per_gpu_day: {rtx3090: 0.95}\n"
            "gpu_power_watts: {default: 250}\npower_price_per_kwh: 0.12\nmargin: 0.15\n"
            "mining_revenue_per_mhs_day: {kawpow: 0.02}\n")
        ssh = ["--accept-new", "--known-hosts", str(work / "known_hosts")]
        bundle = ["--bundle", str(work / "bundle")]
        history = ["--db", str(work / "history.sqlite3")]
        schedule = [str(work / "demo-schedule.yml"), "--economics", str(work / "economics.yml"), "--api-server",
                    api.url]
        lease: dict[str, int] = {}

        def lease_starts() -> int:
            hook = collection.role_defaults("nvidia_container_toolkit")["nvidia_container_toolkit_gate_hook"]
            code, out, lease["pid"] = tenant.container_at_the_gate(rig, "lease/lease-1", hook)
            ctx.info(out.strip() or "(the gate handed the GPUs over)")
            if code == 0:
                assert api is not None
                api.add_pod("lease-1", "demo-hive", 2)
                code = 0 if _wait(lambda: "lease/lease-1" in _agent_status(api)) else 1
            return code

        def offered() -> int:
            assert api is not None
            return 0 if _wait(lambda: '"source": "measured' in _agent_status(api)
                              and _mode(api) == "idle-mining") else 1

        def lease_ends() -> int:
            assert api is not None
            api.delete_pod("lease-1")
            tenant.container_ends(rig, lease.get("pid", 0))
            return 0 if _wait(lambda: _mode(api) == "idle-mining") else 1

        # (what it shows, the command or a stand-in's act, the exit it must end with)
        steps: list[tuple[str, list[str] | Callable[[], int], int]] = [
            ("detect: what is this rig?", ["detect", "-i", str(inv), *ssh], 0),
            ("plan: what would convert change? (exit 1: changes pending)", ["plan", "-i", str(inv), *bundle, *ssh], 1),
            ("convert", ["convert", "-i", str(inv), *bundle, *ssh, "--yes"], 0),
            ("convert again: nothing to change", ["convert", "-i", str(inv), *bundle, *ssh, "--yes"], 0),
            ("status", ["status", "-i", str(inv), *ssh], 0),
            *provider_demo.steps(rig, api, work, inv, ssh, closing),
            ("schedule apply: the time-share agent (policy profit: offered while a lease pays more than mining)",
             ["schedule", "apply", "-i", str(inv), *schedule, *ssh, "--yes"],
             0),
            ("the agent measures the miner and offers the rig (idle mining: it mines until a lease comes)",
             offered, 0),
            ("status: the agent's quote", ["status", "-i", str(inv), *ssh], 0),
            ("a STAND-IN tenant's lease reaches the gate: the miner stops, the GPUs go to the lease", lease_starts, 0),
            ("status: the agent leasing", ["status", "-i", str(inv), *ssh], 0),
            ("history: the rig's ledger kept on this machine", ["history", "-i", str(inv), *ssh, *history], 0),
            *([("dashboard: open http://127.0.0.1:8477/ in a browser; Ctrl-C goes on",
                ["dashboard", "-i", str(inv), *ssh, *history, "--economics", str(work / "economics.yml")], 0)]
              if serve else []),
            ("the lease ends: the miner mines again", lease_ends, 0),
            ("revert: a mining rig again", ["revert", "-i", str(inv), *bundle, *ssh, "--yes"], 0)]
        for title, step, expected in steps:
            # The whole command, to copy and run again while the demo's rig is up.
            shown = shlex.join(["m2p", *step]) if isinstance(step, list) else "(a stand-in acts)"
            ctx.info("")
            ctx.info(click.style(f"$ {shown}   # {title}", fg="cyan", bold=True))
            code = main(step) if isinstance(step, list) else step()
            ctx.info(f"(exit {code})")
            if code != expected:  # the demo stops at the first step that went wrong, and says which
                raise DemoFailed(f"the demo's step `{shown}` ({title}) exited {code}, not {expected}; "
                                 "see its output above")
        ctx.info("")
        ctx.info(click.style("Your own fleet in a browser: m2p dashboard -i rigs.yml (http://127.0.0.1:8477/); "
                             "m2p demo --dashboard serves this demo's rig, its lease included, before it reverts.",
                             bold=True))
    finally:
        closing.close()
        if api is not None:
            api.close()
        for r in rigs:
            sandbox.stop(r)
        shutil.rmtree(work, ignore_errors=True)


def _mode(api: Any) -> str:
    return str(api.nodes["demo-hive"]["metadata"]["labels"].get("m2p.io/mode", ""))


def _agent_status(api: Any) -> str:
    return str(api.nodes["demo-hive"]["metadata"].get("annotations", {}).get("m2p.io/status", ""))


def _wait(check: Callable[[], bool], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.5)
    return False
