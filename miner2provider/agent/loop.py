"""The agent's process: ``m2p-agent [run|gate|stopped]``, the tick loop and its sleep between ticks."""

from __future__ import annotations

import argparse
import signal
import sys
import time

from miner2provider.agent import decide, gate
from miner2provider.agent.config import Config
from miner2provider.agent.service import Agent
from miner2provider.rigside import disk, kube

HURRY_S = 0.5  # the tick while a lease waits for the GPUs
WAKE_S = 0.1  # how often a sleeping agent looks for a container at the gate (one directory scan)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="m2p-agent", description="m2p's time-share agent (runs on a rig)")
    parser.add_argument("--config", default=disk.AGENT_CONFIG)
    parser.add_argument("--once", action="store_true", help="one tick, then exit")
    parser.add_argument("command", nargs="?", choices=["run", "gate", "stopped"], default="run",
                        help="run: the agent (default); gate: the container runtime's hook (state on stdin); "
                             "stopped: the unit's ExecStopPost (the node leaves the market)")
    parser.add_argument("gate_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    config = Config.load(args.config)
    if args.command == "gate":
        return gate.main(args.gate_args, config.state_dir)
    agent = Agent(config, kube.KubeClient(config.api_server, config.token_file or None, config.ca_file,
                                          kubeconfig=config.kubeconfig))
    if args.command == "stopped":
        try:
            agent.leave_market()
        except (kube.ApiError, OSError) as exc:
            print(f"m2p-agent: could not cordon {config.node}: {exc}", file=sys.stderr)
            return 1
        return 0
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        actions: list[str] = []
        try:
            actions = agent.tick()
        except Exception as exc:  # noqa: BLE001 - one bad tick never ends the agent (the miner is not its child)
            agent.last_error = f"tick: {type(exc).__name__}: {exc}"
            print(f"m2p-agent: {agent.last_error}", file=sys.stderr)
        if args.once or stopping:
            return 0
        hurry = config.wake_on_signal and agent.lease_waiting()
        if hurry and decide.STOP_MINER in actions:
            continue  # the stop waited for the cards to be free: the next tick grants at once
        # A container waits at the gate: look again soon (the miner is letting go of the GPUs).
        # Else sleep a tick, but answer the gate as soon as it asks (a directory scan per WAKE_S).
        deadline = time.monotonic() + (min(HURRY_S, config.interval_s) if hurry else config.interval_s)
        while not stopping and time.monotonic() < deadline:
            time.sleep(min(WAKE_S, config.interval_s))
            if not hurry and config.wake_on_signal and agent.lease_waiting():
                break
