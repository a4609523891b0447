"""``m2p demo``: the whole flow on a sandbox rig, for people without rigs at hand."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click

from miner2provider.errors import DemoFailed, UsageError

from .app import Context, cli, main, pass_ctx


@cli.command("demo")
@click.option("--dashboard", "serve", is_flag=True,
              help="After status, serve `m2p dashboard` over the demo rig on 127.0.0.1:8477 until Ctrl-C, then revert.")
@pass_ctx
def demo_command(ctx: Context, serve: bool) -> None:
    """Try m2p without rigs: detect, plan, convert, status, history and revert on a SANDBOX rig.

    Boots a HiveOS-layout sandbox rig here (systemd-nspawn; needs root and the packages
    scripts/install adds) and converts it with m2p's TEST bundle, whose k3s and NVIDIA
    toolkit are stand-ins.  Nothing outside this machine is touched.  Needs the sandbox
    harness (m2p-sandbox), which a plain install of m2p leaves out.
    """
    try:
        from m2p_sandbox import rig as sandbox
        from m2p_sandbox.bundle import build_test_bundle
    except ModuleNotFoundError:
        raise UsageError("m2p demo needs the sandbox harness (m2p-sandbox), which a plain install leaves out: "
                         "from a clone of m2p's repository run scripts/install as root, then .venv/bin/m2p demo"
                         ) from None

    ctx.info(click.style("m2p demo: a SANDBOX rig (HiveOS layout, 2 stand-in RTX 3090s) and STAND-IN k3s and "
                         "NVIDIA toolkit packages; no real rig, GPU or vendor download is involved.", bold=True))
    work = Path(tempfile.mkdtemp(prefix="m2p-demo-"))
    rigs: list[Any] = []
    try:
        build_test_bundle(work / "bundle")
        ctx.info("booting the sandbox rig demo-hive ...")
        rigs = sandbox.boot([sandbox.RigSpec("demo-hive", "hiveos", ("rtx3090", "rtx3090"))], owner_pid=os.getpid())
        rig = rigs[0]
        inv = work / "rigs.yml"
        inv.write_text(f"all:\n  hosts:\n    demo-hive:\n      ansible_host: {rig.address}\n"
                       f"      ansible_user: {rig.user}\n      ansible_ssh_private_key_file: {rig.key_file}\n"
                       "      m2p_min_free_disk_gb: 5\n")
        ssh = ["--accept-new", "--known-hosts", str(work / "known_hosts")]
        bundle = ["--bundle", str(work / "bundle")]
        # (what it shows, the command, the exit it must end with)
        steps = [("detect: what is this rig?", ["detect", "-i", str(inv), *ssh], 0),
                 ("plan: what would convert change? (exit 1: changes pending)",
                  ["plan", "-i", str(inv), *bundle, *ssh], 1),
                 ("convert", ["convert", "-i", str(inv), *bundle, *ssh, "--yes"], 0),
                 ("convert again: nothing to change", ["convert", "-i", str(inv), *bundle, *ssh, "--yes"], 0),
                 ("status", ["status", "-i", str(inv), *ssh], 0),
                 ("history: the rig's report and ledger kept on this machine",
                  ["history", "-i", str(inv), *ssh, "--db", str(work / "history.sqlite3")], 0),
                 *([("dashboard: open http://127.0.0.1:8477/ in a browser; Ctrl-C goes on",
                     ["dashboard", "-i", str(inv), *ssh, "--db", str(work / "history.sqlite3")], 0)] if serve else []),
                 ("revert: a mining rig again", ["revert", "-i", str(inv), *bundle, *ssh, "--yes"], 0)]
        for title, args, expected in steps:
            ctx.info(click.style(f"\n$ m2p {' '.join(args[:1])}   # {title}", fg="cyan", bold=True))
            code = main(args)
            ctx.info(f"(exit {code})")
            if code != expected:  # the demo stops at the first step that went wrong, and says which
                raise DemoFailed(f"the demo's step `m2p {args[0]}` ({title}) exited {code}, not {expected}; "
                                 "see its output above")
        ctx.info(click.style("\nYour own fleet in a browser: m2p dashboard -i rigs.yml (http://127.0.0.1:8477/); "
                             "m2p demo --dashboard serves this demo's rig before it reverts.", bold=True))
    finally:
        for r in rigs:
            sandbox.stop(r)
        shutil.rmtree(work, ignore_errors=True)
