"""The farm's reclaimer: AEP-82 reclamation from the k3s server (``m2p-reclaimer.service``, installed by
``m2p provider apply`` when provider.yml offers a reclamation window).

It runs on the server only, never on a worker rig, and holds no wallet material: every chain command runs
inside Akash's provider pod (``pods/exec`` into ``akash-provider-0``, the only pod its Role may exec into),
whose environment names the key, the RPC node and the chain.  Each sweep (every ``interval_s``):

1. the nodes with m2p's agents, and when each must mine (the agent's status annotation, ``mine_at``);
2. the leases on each node: Akash's lease namespaces (``akash.network/lease.id.*`` labels, reclaim.lease_id),
   the nodes their pods run on (only pods the provider's workloads made, never a kubelet's mirror pod:
   reclaim.made_by_provider; else one taken rig could hold or reclaim any lease), and the pods whose container m2p's
   gate refuses there (the hook's reason in the
   container's status, reclaim.gate_refusal; the agent's own status does not list refusals), since when;
3. each lease's window and state from the chain (``provider-services query market lease get``), once per
   lease on m2p's nodes and again when an action is due;
4. what reclaim.plan says: ``start-reclaim`` W plus a margin before mining, ``close`` at the deadline (never
   before: the chain would refuse it), ``leave`` for a lease won without a window (or ``close`` with the
   owner's opt-in); a lease the gate has refused for longer than ``gate_grace_s`` given up (reclaimed, or
   closed when it has no window), whether or not mining is due.

A lease whose pods run on several rigs is reclaimed only when all of them must mine or refuse it, or with the
owner's consent (``reclaim_spanning``); otherwise it is reported.  What it saw and did goes to ``status.json``
(``m2p provider status`` reads it: each lease, its rigs, the next step and why, the gate's refusal) and, one
line per transaction, to ``ledger.jsonl``.

Python 3.8+ and the standard library only (a zipapp, like the agent's: fleet/agent_zipapp.py).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Protocol  # noqa: UP035 (Callable: as the agent's, for 3.8)

from miner2provider.market.akash import reclaim
from miner2provider.market.akash.reclaim import Lease, LeaseId
from miner2provider.rigside import kube
from miner2provider.rigside.disk import write_json
from miner2provider.rigside.status import MODE_LABEL, agent_status_from, node_states

PENDING_S = 60.0  # a sent transaction is not sent again for this long: a few blocks for it to land
DUE = ("start-reclaim", "close")  # the plan's actions that are transactions

class RunInPod(Protocol):
    """Runs a command in the provider pod: (exit, stdout, stderr)."""

    def __call__(self, argv: list[str]) -> tuple[int, str, str]: ...


@dataclass(frozen=True)
class Config:
    kubeconfig: str  # the reclaimer's own ServiceAccount (its token file, the cluster's CA)
    kubectl: tuple[str, ...] = ("k3s", "kubectl")
    pod_namespace: str = "akash-services"
    pod: str = "akash-provider-0"
    container: str = "provider"
    close_without_window: bool = False  # the owner's opt-in: close leases won without a window when mining is due
    reclaim_spanning: bool = False  # the owner's consent: reclaim a lease whose pods run on several rigs
    margin_s: float = reclaim.MARGIN_S
    gate_grace_s: float = reclaim.GATE_GRACE_S  # a lease refused by m2p's gate this long is given up
    interval_s: float = 15.0
    exec_timeout_s: float = 120.0
    state_dir: str = "/var/lib/m2p/reclaimer"
    lease_label: str = "akash.network/manifest-service"  # Akash's lease pods

    @classmethod
    def load(cls, path: str) -> Config:
        raw = json.loads(Path(path).read_text())
        raw["kubectl"] = tuple(str(word) for word in raw.get("kubectl", cls.kubectl))
        return cls(**raw)


@dataclass
class KubectlExec:
    """``kubectl exec`` into the provider pod as the reclaimer's ServiceAccount (k3s's own kubectl)."""

    config: Config

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        c = self.config
        command = [*c.kubectl, "--kubeconfig", c.kubeconfig, "exec", "--namespace", c.pod_namespace, c.pod,
                   "--container", c.container, "--", *argv]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=c.exec_timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 1, "", f"{type(exc).__name__}: {exc}"
        return done.returncode, done.stdout, done.stderr


@dataclass
class LeaseView:
    """One lease the sweep found on m2p's nodes, and what became of it."""

    id: LeaseId
    nodes: list[str]
    mine_at: float | None = None
    on_m2p: bool = False  # some of its pods run on a node with m2p's agent
    refusing: dict[str, str] = field(default_factory=dict)  # node -> why m2p's gate refuses its container there
    refusal: reclaim.Refusal | None = None  # the earliest of those, with since when
    lease: Lease | None = None
    action: str = ""  # start-reclaim | close | wait | leave | hold (spanning, no consent) | "" (nothing to do)
    why: str = ""
    error: str = ""

    def as_status(self) -> dict[str, Any]:
        lease = self.lease
        return {"lease": str(self.id), "nodes": self.nodes, "mine_at": _iso(self.mine_at),
                "window_s": lease.window_s if lease else None,
                "state": "" if lease is None else ("reclaiming" if lease.deadline is not None else "active"),
                "deadline": _iso(lease.deadline if lease else None), "action": self.action, "why": self.why,
                "error": self.error, "refused": _refused(self.refusal)}


@dataclass
class Reclaimer:
    config: Config
    client: kube.KubeClient
    run_in_pod: RunInPod
    clock: Callable[[], float] = time.time
    known: dict[LeaseId, Lease] = field(default_factory=dict)  # the chain's answer, kept while nothing is due
    pending: dict[tuple[str, LeaseId], float] = field(default_factory=dict)  # (kind, lease) -> sent at
    refused_since: dict[tuple[LeaseId, str], float] = field(default_factory=dict)  # (lease, node) -> first seen

    @property
    def lead_s(self) -> float:
        """How long before ``mining - W`` a reclaim is sent: the margin for its block, plus one sweep (the next
        sweep may come that much later)."""
        return self.config.margin_s + self.config.interval_s

    def sweep(self) -> dict[str, Any]:
        """One look and the transactions due; returns the status it wrote."""
        now = self.clock()
        try:
            views = self.leases_on_nodes()
        except kube.ApiError as exc:
            return self._write_status(now, [], f"API: {exc}")
        self._refusals(views, now)
        for view in views:
            self._handle(view, now)
        live = {view.id for view in views}
        self.known = {k: v for k, v in self.known.items() if k in live}
        self.pending = {k: v for k, v in self.pending.items() if now - v < PENDING_S}
        return self._write_status(now, views, "")

    def leases_on_nodes(self) -> list[LeaseView]:
        mine_at = {name: _when(agent_status_from(status).mine_at)
                   for name, (_, status) in node_states(self.client.nodes(MODE_LABEL)).items()}
        leases = {}
        for namespace in self.client.namespaces(reclaim.LABEL + "dseq"):
            meta = namespace.get("metadata", {})
            found = reclaim.lease_id(meta.get("labels") or {})
            if found is not None:
                leases[str(meta.get("name", ""))] = found
        nodes: dict[LeaseId, set[str]] = {}
        refusing: dict[LeaseId, dict[str, str]] = {}  # lease -> node -> why m2p's gate refuses it there
        for pod in self.client.pods(self.config.lease_label):
            meta, spec = pod.get("metadata", {}), pod.get("spec", {})
            lease = leases.get(str(meta.get("namespace", "")))
            where = spec.get("nodeName")
            if lease is None or not where or pod.get("status", {}).get("phase") in kube.FINISHED:
                continue
            if not reclaim.made_by_provider(pod):  # a kubelet's mirror pod: any rig can make one, anywhere
                continue
            nodes.setdefault(lease, set()).add(str(where))
            why = reclaim.gate_refusal(pod) if str(where) in mine_at else ""
            if why:
                refusing.setdefault(lease, {}).setdefault(str(where), why)
        views = []
        for lease, on in sorted(nodes.items()):
            due = [at for at in (mine_at.get(n) for n in on) if at is not None]
            view = LeaseView(lease, sorted(on), min(due) if due else None, on_m2p=bool(on & mine_at.keys()),
                             refusing=refusing.get(lease, {}))
            views.append(view)
            given_up = {n for n in on if mine_at.get(n) is not None} | view.refusing.keys()
            if given_up and len(given_up) < len(on) and not self.config.reclaim_spanning:
                others = ", ".join(n for n in sorted(on) if n not in given_up)
                need = "need not mine" + (" and run it" if view.refusing else "")
                view.action, view.why = "hold", (f"its pods also run on {others}, which {need}: reclaiming it takes "
                                                 "all of them (reclaim_spanning: true consents)")
        return views

    def _refusals(self, views: list[LeaseView], now: float) -> None:
        """Since when m2p's gate refuses each lease on each node (first seen by this reclaimer; forgotten once the
        container runs or the pod goes), and each lease's earliest refusal."""
        seen = {(view.id, node) for view in views for node in view.refusing}
        self.refused_since = {key: since for key, since in self.refused_since.items() if key in seen}
        for view in views:
            for node, why in sorted(view.refusing.items()):
                since = self.refused_since.setdefault((view.id, node), now)
                if view.refusal is None or since < view.refusal.since:
                    view.refusal = reclaim.Refusal(node, since, why)
            if view.refusal is not None and view.action == "hold":
                view.why = f"{view.refusal.said()}; {view.why}"

    def _handle(self, view: LeaseView, now: float) -> None:
        lease = self.known.get(view.id)
        if not view.on_m2p or view.action == "hold":
            view.lease = lease
            return
        action = None if lease is None else self._plan(lease, now, view)
        if lease is None or (action is not None and action.kind in DUE):  # asked again before anything is sent
            lease = self._ask_chain(view)
            if lease is None:
                return
            action = self._plan(lease, now, view)
        view.lease = lease
        if action is None:  # no mining due, no refusal, not reclaiming: nothing to do
            return
        view.action, view.why = action.kind, action.why
        if action.kind in DUE:
            self._send(view, action, now)

    def _plan(self, lease: Lease, now: float, view: LeaseView) -> reclaim.Action | None:
        refused = {} if view.refusal is None else {view.id: view.refusal}
        found = reclaim.plan([lease], now, view.mine_at, self.config.close_without_window, self.lead_s, refused,
                             self.config.gate_grace_s)
        return found[0] if found else None

    def _ask_chain(self, view: LeaseView) -> Lease | None:
        code, out, err = self.run_in_pod(reclaim.query_argv(view.id))
        if code != 0:
            view.error = f"query: exit {code}: {_cut(err or out)}"
            return None
        try:
            lease = reclaim.lease_from_chain(json.loads(out), view.id)
        except (ValueError, reclaim.ChainReplyError) as exc:
            view.error = f"query: {exc}"[:300]
            return None
        if lease is None:
            view.action, view.why = "", "closed on the chain: the provider tears it down"
            self.known.pop(view.id, None)
            return None
        self.known[view.id] = lease
        return lease

    def _send(self, view: LeaseView, action: reclaim.Action, now: float) -> None:
        kind = action.kind
        if (kind, view.id) in self.pending:
            view.why = f"sent at {_iso(self.pending[(kind, view.id)])}, waiting for a block"
            return
        make = reclaim.start_argv if kind == "start-reclaim" else reclaim.close_argv
        code, out, err = self.run_in_pod(make(view.id, action.reason))
        if code != 0:
            said = _cut(err or out)
            name = reclaim.chain_error(said)
            failed = f"exit {code}: {name + ': ' if name else ''}{said}"
        else:
            failed = reclaim.tx_error(out)
        if not failed:
            self.pending[(kind, view.id)] = now
            self.known.pop(view.id, None)  # its state changes: asked again next sweep
        view.error = f"{kind}: {failed}" if failed else ""
        refusal = view.refusal
        self._ledger({"at": _iso(now), "lease": str(view.id), "nodes": view.nodes, "sent": kind,
                      "reason": action.reason, "why": action.why, "mine_at": _iso(view.mine_at),
                      "deadline": _iso(view.lease.deadline if view.lease else None), "result": failed or "accepted",
                      "refused": _refused(refusal)})
        if refusal is not None:  # the owner's journal: which lease, which rig, why (the rig needs looking at)
            print(f"lease {view.id}: {action.why}; {kind} {failed or 'accepted'}", file=sys.stderr, flush=True)

    def _ledger(self, entry: dict[str, Any]) -> None:
        try:
            with open(Path(self.config.state_dir) / "ledger.jsonl", "a") as f:
                f.write(json.dumps(entry, sort_keys=True) + "\n")
        except OSError:
            pass  # a full disk loses a ledger line, never a reclaim; the status says the error

    def _write_status(self, now: float, views: list[LeaseView], error: str) -> dict[str, Any]:
        status = {"at": _iso(now), "leases": [v.as_status() for v in views], "last_error": error}
        try:
            write_json(Path(self.config.state_dir) / "status.json", status)
        except OSError as exc:
            status["last_error"] = f"status: {exc}"
        return status


def _when(text: str) -> float | None:
    """An agent's ``mine_at`` as seconds since the epoch; None when it says none (or nothing readable)."""
    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except ValueError:
        return None


def _refused(refusal: reclaim.Refusal | None) -> dict[str, Any] | None:
    """A gate refusal in the status and the ledger: the rig, since when, the gate's reason."""
    return None if refusal is None else {"node": refusal.node, "since": _iso(refusal.since), "why": refusal.why}


def _iso(ts: float | None) -> str | None:
    return None if ts is None else reclaim.utc(ts)


def _cut(text: str) -> str:
    return " ".join(text.split())[:200]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="m2p-reclaimer", description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--once", action="store_true", help="one sweep, then exit")
    args = parser.parse_args(argv)
    config = Config.load(args.config)
    Path(config.state_dir).mkdir(parents=True, exist_ok=True)
    reclaimer = Reclaimer(config, kube.KubeClient("", None, kubeconfig=config.kubeconfig), KubectlExec(config))
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    while True:
        status = reclaimer.sweep()
        if status["last_error"]:
            print(status["last_error"], file=sys.stderr, flush=True)
        if args.once or stopping:
            return 0
        deadline = time.monotonic() + config.interval_s
        while not stopping and time.monotonic() < deadline:
            time.sleep(0.5)
