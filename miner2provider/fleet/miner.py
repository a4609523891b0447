"""``m2p miner adopt`` and ``m2p miner release``: a miner m2p has no adapter for runs in m2p's own unit, so the
time-share can stop and start it (issue 38).  The plan is pure (``choose``); the rig does the work (adopt_on_rig.py,
run as root by the rig's python3, sent over SSH on stdin: nothing is left on the rig but what it writes, root only).

Which process: the GPU holder the rig's holders fact names a known miner, or the one the owner names with
``--pid``.  An unknown GPU process is never touched unless the owner names it, and a container's never.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from miner2provider.core.errors import UsageError
from miner2provider.core.inventory import Host
from miner2provider.detect.facts.holders import Holder
from miner2provider.detect.ssh import SshOptions, run_one
from miner2provider.fleet.pipeline import RigOutcome

UNIT = "m2p-miner.service"
RIG_SIDE = Path(__file__).resolve().with_name("adopt_on_rig.py")  # stdlib only: the rig's python3 3.8+ runs it
_END = "M2P_ADOPT_EOF"
WORK_S = 180.0  # a stop (30 s grace, then KILL), a respawn check, a start that must hold a GPU (20 s), a rollback
HASHRATE_WINDOW_S = 120.0  # a real miner builds its DAG (tens of seconds) before it hashes at full speed


def choose(holders: tuple[Holder, ...], pid: int | None) -> Holder:
    """The miner to adopt (pure)."""
    outside = [h for h in holders if not h.in_container]
    if pid is not None:
        named = next((h for h in outside if h.pid == pid), None)
        if named is None:
            raise UsageError(f"process {pid} holds no GPU outside a container on this rig (holders: "
                             f"{_listed(holders) or 'none'})")
        return named
    known = [h for h in outside if h.miner]
    if len(known) == 1:
        return known[0]
    if not outside:
        raise UsageError("no process holds a GPU outside a container: there is no miner to adopt")
    if not known:
        raise UsageError(f"no known miner holds a GPU, only {_listed(outside)}: m2p never touches an unknown GPU "
                         "process unless you name it (--pid PID)")
    raise UsageError(f"several miners hold GPUs ({_listed(known)}): name one (--pid PID)")


def stats_port(host: Host, holder: Holder) -> int:
    """Where the miner's hashrate can be read before and after the adoption (T-Rex's /summary): the owner's
    m2p_trex_api_port, else T-Rex's default (holders.DEFAULT_APIS) for a miner named t-rex, else none (0)."""
    port = host.var("m2p_trex_api_port", 0)
    if isinstance(port, int) and not isinstance(port, bool) and port > 0:
        return port
    return int(holder.api.rsplit(":", 1)[1]) if holder.miner == "t-rex" and holder.api else 0


def _listed(holders: list[Holder] | tuple[Holder, ...]) -> str:
    return ", ".join(f"{h.miner or h.program} (pid {h.pid})" for h in holders)


def said(holder: Holder) -> str:
    keeps = "; ".join(holder.supervisors) or "started by hand"
    return f"{holder.miner or holder.program} (pid {holder.pid}, {len(holder.gpus)} GPUs; {keeps})"


def _script(*args: str) -> str:
    source = RIG_SIDE.read_text()
    if _END in source:  # a heredoc ends at its first such line
        raise RuntimeError(f"{RIG_SIDE} contains {_END}")
    return ("S=; [ \"$(id -u)\" = 0 ] || S='sudo -n'\n"
            f"$S python3 - {' '.join(args)} <<'{_END}'\n{source}\n{_END}\n")


def run_on_rig(host: Host, opts: SshOptions, *args: str, window_s: float = 0.0) -> RigOutcome:
    """adopt_on_rig.py ``args`` on the rig; its one JSON line becomes the rig's outcome.  ``window_s``: the time
    the rig side may spend waiting for the hashrate, on top of its own work."""
    slow = dataclasses.replace(opts, command_timeout=max(opts.command_timeout, WORK_S + window_s))
    result = run_one(host, _script(*args), slow)
    if not result.ok:
        return RigOutcome(host.name, "unreachable", message=result.error or "no answer")
    lines = (result.stdout or "").strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        answer = {}
    if not isinstance(answer, dict) or "result" not in answer:
        why = "sudo needs a password there" if result.rc == 1 and not lines else f"exit {result.rc}"
        return RigOutcome(host.name, "failed", message=f"the rig's side did not answer ({why})")
    result_word = {"changed": "changed", "converged": "converged"}.get(str(answer["result"]), "failed")
    return RigOutcome(host.name, result_word, int(result_word == "changed"), str(answer.get("message", ""))[:300])
