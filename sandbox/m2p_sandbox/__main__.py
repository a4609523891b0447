"""Command line of the sandbox-rig harness, for Molecule's create/destroy playbooks and
for people: ``python -m m2p_sandbox up|down|list|sweep|base``.

Must run as root (it mounts overlays and creates network namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import yaml

from m2p_sandbox import base, rig
from m2p_sandbox.errors import SandboxError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m m2p_sandbox")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="boot rigs; prints them as JSON")
    up.add_argument("specs", nargs="+", metavar="NAME[:FLAVOUR[:GPU+GPU...[:PYTHON+PYTHON...]]]",
                    help="PYTHON: the rig's python3 (3.8), then versions installed beside it")
    up.add_argument("--owner-pid", type=int, default=None,
                    help="tear the rigs down when this process dies "
                         "(default: $M2P_SANDBOX_OWNER_PID, else none)")
    up.add_argument("--instance-config", metavar="FILE",
                    help="also write the rigs as a Molecule delegated-driver instance config")
    down = sub.add_parser("down", help="stop rigs by name or id")
    down.add_argument("names", nargs="*")
    down.add_argument("--all", action="store_true")
    down.add_argument("--instance-config", metavar="FILE",
                      help="stop the rigs listed in this Molecule instance config, then empty it")
    down.add_argument("--at-once", action="store_true", help="kill the rigs without powering them off")
    sub.add_parser("list", help="running rigs as JSON")
    sub.add_parser("sweep", help="tear down rigs whose owner died")
    sub.add_parser("base", help="build (or find) the base root filesystem")
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except SandboxError as exc:
        print(f"m2p-sandbox: error: {exc}", file=sys.stderr)
        return exc.exit_code


def _parse_spec(text: str) -> rig.RigSpec:
    name, _, rest = text.partition(":")
    flavour, _, rest = rest.partition(":")
    gpus, _, python = rest.partition(":")
    return rig.RigSpec(name, flavour or "plain", tuple(g for g in gpus.split("+") if g),
                       tuple(v for v in python.split("+") if v))


def _run(args: argparse.Namespace) -> int:
    if args.command == "up":
        owner = args.owner_pid or int(os.environ.get("M2P_SANDBOX_OWNER_PID", "0")) or None
        rig.sweep()
        rigs = rig.boot([_parse_spec(s) for s in args.specs], owner_pid=owner)
        if args.instance_config:
            _write_instance_config(Path(args.instance_config), rigs)
        print(json.dumps([asdict(r) for r in rigs], indent=2))
    elif args.command == "down":
        wanted = set(args.names)
        # A rig id is a slot, reused by the next rig booted: an instance config left by an interrupted
        # Molecule run (its rigs swept since) names ids that other tests' rigs now hold, and `molecule test`
        # begins with destroy.  Its entries match by id AND name, so a stale one stops nothing of anyone else's.
        listed: set[tuple[str, str]] = set()
        if args.instance_config and Path(args.instance_config).is_file():
            items = yaml.safe_load(Path(args.instance_config).read_text()) or []
            listed = {(item["rig_id"], item["instance"]) for item in items}
        for r in rig.running():
            if args.all or r.name in wanted or r.id in wanted or (r.id, r.name) in listed:
                rig.stop(r, why=f"down {' '.join(sys.argv[2:])[:200]}", at_once=args.at_once)
        if args.instance_config:
            _write_instance_config(Path(args.instance_config), [])
    elif args.command == "list":
        print(json.dumps([asdict(r) for r in rig.running()], indent=2))
    elif args.command == "sweep":
        for rig_id in rig.sweep():
            print(f"swept {rig_id}")
    elif args.command == "base":
        image = base.ensure_base(rig.cache_dir())
        state = f"built in {image.build_seconds:.1f}s" if image.built_now else "cached"
        print(f"{image.rootfs} ({state}, recipe {image.recipe_hash})")
    return 0


def _write_instance_config(path: Path, rigs: list[rig.Rig]) -> None:
    """The keys Molecule's delegated driver reads, plus rig_id for ``down``."""
    instances = [
        {"instance": r.name, "address": r.address, "user": r.user, "port": r.port,
         "identity_file": r.key_file, "rig_id": r.id}
        for r in rigs
    ]
    path.write_text(yaml.safe_dump(instances, sort_keys=False))
    path.chmod(0o600)


if __name__ == "__main__":
    sys.exit(main())
