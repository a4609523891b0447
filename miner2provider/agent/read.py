"""The tick's reading: the API, the gate, the miner, NVML, the card map, the schedule and the files the owner
and m2p leave on the rig, into the Observation decide.py takes and the Rig rules.py takes.  Nothing here
answers the gate, starts or stops anything or writes a file but the caches its readers keep."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from miner2provider.agent import rules
from miner2provider.agent.decide import Observation
from miner2provider.agent.sight import spec_paths
from miner2provider.rigside import kube
from miner2provider.timeshare import policy

if TYPE_CHECKING:
    from miner2provider.agent.service import Agent


@dataclass
class Reading:
    obs: Observation
    rig: rules.Rig
    node: dict[str, Any] | None  # the node as the API gave it (None: the API did not answer)
    leases_waiting: list[Path] = field(default_factory=list)  # the leases' requests at the gate
    others_waiting: list[Path] = field(default_factory=list)  # the other containers' requests at the gate
    leases_refused: list[Path] = field(default_factory=list)  # the leases' requests for an unhealthy card


def read(agent: Agent, now: float, mono: float) -> Reading:
    config, seen, gpus = agent.config, agent.seen, agent.gpus
    node, gpu_leases = seen.read_api(agent.client, config.node, kube.LeaseRule(
        config.lease_label, config.system_namespaces), agent.say)
    running = config.miner.running()
    leases_waiting, others = seen.read_gate(agent.gates)
    watch = gpus.watch(config)
    watch.read(mono, now)
    for sentence in watch.said():  # a leased card that overheats is said at once (and every tick it stays so)
        agent.say(sentence)
    at_gate, sick = watch.refusals(seen.waiting, seen.gated, seen.listed)
    refused = [leases_waiting[n] for n in sick]  # those never wait: the rest go on as if they were alone
    leases_waiting = [entry for n, entry in enumerate(leases_waiting) if n not in sick]
    seen.waiting = [record for n, record in enumerate(seen.waiting) if n not in sick]
    waiting = bool(leases_waiting)
    # A container waiting for the GPUs is not kept waiting on a miner's API; a miner on some cards beside a
    # lease (per card) is not the rig's mining: its figures would start the rig's average anew on fewer GPUs.
    if not waiting and not agent.state.mine_on:
        agent.sample_miner(now, running)
    at = datetime.fromtimestamp(now, timezone.utc)
    desired = policy.desired_at(agent.schedule, at, agent.price_offer(now))
    lease_pays = agent.profit.offer.offered
    desired = policy.with_lead(agent.schedule, desired, at,
                               agent.windows.mine_at(agent.schedule, at, desired.offered, lease_pays))
    busy = gpus.busy(agent.gpu_holders, mono, running, waiting)
    cards = gpus.cards(config)
    held = seen.held_cards(gpus.card_map) if cards else frozenset()
    obs = Observation(
        now=mono, desired=desired, api_ok=node is not None,
        leases=gpu_leases if node is not None else len(seen.leases), gated=len(seen.gated),
        gate_waiting=waiting, miner_running=running, gpus_busy=busy, wall=now, cards=cards, held=held,
        busy_cards=gpus.busy_cards(agent.gpu_processes_by_card, mono, waiting, agent.say) if held else frozenset(),
        retuned=gpus.retuned_cards(config.clocks, mono, agent.state.mode, agent.hand.clocks_reset, held, agent.say),
        unhealthy=watch.unhealthy(), gate_unhealthy=at_gate,
    )
    # Every spec a container given GPUs could get must carry the gate: m2p's, and any other naming NVIDIA's devices
    # (NVIDIA's refresher writes one to /var/run/cdi, which outranks /etc/cdi)
    lacking = seen.spec_without_gate(spec_paths(config.cdi_spec, config.cdi_dirs), agent.clock)
    rig = rules.Rig(
        respawns=agent.hand.respawns, lease_gated=bool(seen.gated), others_waiting=bool(others),
        watchdog_was=agent.watchdog_was, watchdog_checked=agent.watchdog_checked,
        node=None if node is None else (bool(node.get("spec", {}).get("unschedulable")), kube.has_old_taint(node)),
        cordoned_here=agent.node_sync.cordoned_here(), drain=(agent.dir / "drain").exists(),
        gate_in_spec=not lacking, cdi_spec=lacking or config.cdi_spec,
        mine_on=agent.state.mine_on, beside_since=agent.hand.beside_since)
    if config.miner.watchdog_stop_cmd and rules.watchdog_wanted(agent.state.mode, obs, rig):
        rig = replace(rig, watchdog_running=watchdog_running(agent))
    return Reading(obs, rig, node, leases_waiting, others, refused)


def boot_id(path: str = "/proc/sys/kernel/random/boot_id") -> str:
    """This boot's identity: a monotonic clock reading means something only within the boot it was read in."""
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def watchdog_running(agent: Agent) -> bool | None:
    try:
        return agent.config.miner.watchdog_running()
    except (RuntimeError, OSError) as exc:
        agent.say(f"watchdog: {exc}")
        return None
