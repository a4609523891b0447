"""What the agent sees of its node and of the gate, kept between ticks, with the readers that fill it.

The API's leases and labels stay as last read while the API does not answer (m2p's lease guard errs on the
safe side); the CDI spec is read again only when the file changed.  Reading only: nothing here answers the
gate or writes anything.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from miner2provider.agent.gate import GateDir
from miner2provider.rigside import kube

GATE_MARK = "/opt/m2p/gate"  # the hook's command in the CDI spec
# What names an NVIDIA device in a CDI spec: the kinds NVIDIA's tools write (nvidia.com/gpu, and nvidia-ctk's
# management.nvidia.com/gpu, which hands over every device node).  A spec that names none is another vendor's.
NVIDIA_KIND = "nvidia.com/"
# The spec files a runtime reads (container-device-interface pkg/cdi/cache.go: .json and .yaml only).
SPEC_SUFFIXES = (".json", ".yaml")
# Timestamps are coarse (a jiffy; 2 s on FAT): a write in the same instant as a reading can leave every
# stamp as it was, so an answer read this close to the file's last change is not kept (git's racy files).
SETTLED_S = 2.0


@dataclass
class Sight:
    leases: list[dict[str, Any]] = field(default_factory=list)  # lease pods on the node (any: CPU-only too)
    gated: list[dict[str, Any]] = field(default_factory=list)  # lease containers the gate let through, still running
    node_labels: dict[str, str] = field(default_factory=dict)  # the node's labels
    file_labels: dict[str, str] | None = None  # labels_file's, read once a tick (None: not yet this tick)
    # Pods the API listed on the node this tick, lease or not (None: the API did not answer): a container
    # at the gate whose pod is listed and is no lease is not handed the GPUs while the miner runs.
    listed: set[str] | None = None
    lease_names: set[str] = field(default_factory=set)  # the lease pods' names among them
    waiting: list[dict[str, Any]] = field(default_factory=list)  # the leases' requests at the gate, this tick
    # The cards each lease pod's containers were given (learnt at the gate): a container that restarts (or
    # crash-loops) gets the same cards again, which stay the lease's between its runs.
    pod_cards: dict[str, frozenset[str]] = field(default_factory=dict)
    _specs: dict[str, tuple[tuple[int, ...], bool]] = field(default_factory=dict)  # CDI specs read: identity, gate

    def read_api(self, client: kube.KubeClient, node_name: str, rule: kube.LeaseRule,
                 say: Callable[[str], None]) -> tuple[dict[str, Any] | None, int]:
        """The node and the pods bound to it: (the node, None when the API did not answer; the GPU leases)."""
        self.listed = None
        try:
            pods = client.pods_on_node(node_name)
            node = client.node(node_name)
        except kube.ApiError as exc:
            say(f"API: {exc}")  # the leases last read stay: m2p's lease guard errs on the safe side
            return None, 0
        self.node_labels = dict(node.get("metadata", {}).get("labels") or {})
        leases = rule.leases(pods)
        self.leases = sorted((kube.lease_summary(p) for p in leases), key=lambda lease: lease["pod"])
        self.listed = {kube.pod_name(p) for p in pods}
        self.lease_names = {kube.pod_name(p) for p in leases}
        return node, len(rule.gpu_leases(pods))

    def for_a_lease(self, record: dict[str, Any]) -> bool:
        """A container at (or through) the gate is a lease's unless the API lists its pod as no lease.  A pod
        the API does not list (yet), or no API at all, counts as a lease: the miner stops for it, and mining
        resumes once the API says otherwise."""
        pod = str(record.get("pod") or "")
        return self.listed is None or pod in self.lease_names or pod not in self.listed

    def read_gated(self, gates: GateDir) -> None:
        """The leases' containers through the gate that still run (other containers never count)."""
        self.gated = [record for record in gates.gated() if self.for_a_lease(record)]

    def read_gate(self, gates: GateDir) -> tuple[list[Path], list[Path]]:
        """The leases' containers through the gate that still run (``gated``), and the requests waiting at it:
        (the leases', the other containers')."""
        self.read_gated(gates)
        leases: list[Path] = []
        others: list[Path] = []
        self.waiting = []
        for entry, record in gates.waiting_records():
            if self.for_a_lease(record):
                leases.append(entry)
                self.waiting.append(record)
            else:
                others.append(entry)
        return leases, others

    def held_cards(self, card_map: dict[int, str]) -> frozenset[str] | None:
        """The cards the leases hold: their containers' through the gate (running) or at it (waiting), and
        those a lease pod's container was given before (between two runs of it).  None where one is unknown:
        a container whose spec names no card m2p knows, or a lease pod with GPUs whose container has not
        reached the gate yet (the device plugin picks its cards when the container is created)."""
        held: set[str] = set()
        for record in [*self.gated, *self.waiting]:
            cards = record_cards(record, card_map)
            if cards is None:
                return None
            pod = str(record.get("pod") or "")
            self.pod_cards[pod] = self.pod_cards.get(pod, frozenset()) | cards  # each container's
            held |= cards
        if self.listed is not None:  # the API answered: forget the pods that are gone
            self.pod_cards = {pod: cards for pod, cards in self.pod_cards.items() if pod in self.listed}
        for lease in self.leases:
            if int(lease.get("gpus") or 0) > 0:
                if lease["pod"] not in self.pod_cards:
                    return None
                held |= self.pod_cards[lease["pod"]]
        return frozenset(held)

    def handed_cards(self, card_map: dict[int, str]) -> frozenset[str] | None:
        """The cards the waiting lease containers get, where the rig knows each (per card); None: every card."""
        cards: set[str] = set()
        for record in self.waiting:
            given = record_cards(record, card_map)
            if given is None:
                return None
            cards |= given
        return frozenset(cards)

    def leased_gpus(self, gpu_count: int) -> int:
        """The GPUs the leases hold (their pods' limits, as last read), not the rig's: a 1-GPU lease on an
        8-GPU rig is one."""
        return min(gpu_count, sum(int(lease.get("gpus") or 0) for lease in self.leases))

    def leases_seen(self) -> list[dict[str, Any]]:
        """The tenant pods the API lists, and the containers the gate let through that the API does not list
        (yet: a lease's pod is read a tick after its container passed the gate; or the API is unreachable).
        m2p's lease guard reads these: a convert in that tick would otherwise restart k3s under a lease."""
        listed = list(self.leases)
        known = {lease["pod"] for lease in listed}
        for record in self.gated:
            pod = str(record.get("pod") or "").strip()
            pod = pod if pod.strip("/") else "a container through m2p's gate (no pod named)"
            if pod not in known:
                since = record.get("since")
                listed.append({"pod": pod, "since": iso(since) if isinstance(since, (int, float)) else ""})
                known.add(pod)
        return listed

    def spec_without_gate(self, paths: list[str], clock: Callable[[], float] = time.time) -> str:
        """The first of ``paths`` (spec_paths) that would hand a container NVIDIA GPUs without the gate; "" when
        none would.  What is kept of specs no longer there goes."""
        for gone in set(self._specs) - set(paths):
            del self._specs[gone]
        return next((path for path in paths if not self.gate_in_spec(path, clock)), "")

    def gate_in_spec(self, path: str, clock: Callable[[], float] = time.time) -> bool:
        """Idle mining is safe only while the CDI spec carries the gate: a spec regenerated without it (the
        toolkit's nvidia-cdi-refresh after a driver update) would let a lease's container start beside the
        miner.  The spec rarely changes and a rig's CPU is weak: it is read again only when its identity
        (spec_identity) differs from the last reading's.  An answer is kept only from a whole read (or no file), and
        only once the file has settled by ``clock`` (the wall clock, the file times', read right after the stat): a
        read that failed (EIO, EMFILE) answers "not safe" this tick and is tried again at the next."""
        stamp = spec_identity(path)
        known = self._specs.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        settled = len(stamp) == 1 or abs(clock() - stamp[-1] / 1e9) >= SETTLED_S
        carries, whole = spec_carries_gate(path)
        if settled and whole:
            self._specs[path] = (stamp, carries)
        else:
            self._specs.pop(path, None)
        return carries


def spec_identity(path: str) -> tuple[int, ...]:
    """The file as os.stat knows it: inode, device, size, mtime and ctime (every write changes ctime and no
    program can set it back, so an in-place rewrite with its mtime restored is still seen); (errno,) where
    there is none to stat (a spec that appears or goes is a change)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return (exc.errno or 0,)
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def spec_paths(ours: str, dirs: tuple[str, ...]) -> list[str]:
    """m2p's spec, then every spec file in the runtime's CDI directories (a directory that cannot be listed holds
    none a runtime could read either), each once."""
    paths = [ours]
    for directory in dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        paths += [p for name in names if name.endswith(SPEC_SUFFIXES)
                  and (p := os.path.join(directory, name)) not in paths]
    return paths


def spec_carries_gate(path: str) -> tuple[bool, bool]:
    """(whether the spec carries the gate or names no NVIDIA device, whether that was read whole).  No spec at all: no
    container gets the GPUs, so safe; one that cannot be read: not safe."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return True, True
    except OSError:
        return False, False
    return GATE_MARK in text or NVIDIA_KIND not in text, True


def record_cards(record: dict[str, Any], card_map: dict[int, str]) -> frozenset[str] | None:
    """The cards a gate record's container was given (its device minors, mapped); None: none named, or one
    m2p does not know."""
    minors = record.get("gpus")
    if (not isinstance(minors, list) or not minors
            or any(not isinstance(m, int) or m not in card_map for m in minors)):
        return None
    return frozenset(card_map[m] for m in minors)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")
