"""Actions the page starts on a rig or a selection: the CLI's own pipeline, plan first, then the run once
confirmed.

Each action runs as ``python -m miner2provider COMMAND -i INVENTORY --limit RIGS ...`` (convert, revert,
schedule apply: exactly what a user types; a selection is one run, in the CLI's own batches) or
in-process (re-detect: one sweep of each rig).  Its output is kept line by line, secrets of the
inventory replaced, for the page to poll.  At most one action per rig at a time; a changing action
(and its plan) is refused while a selected rig's last report shows a lease (the CLI's lease guard
refuses it again on the rig itself, from the rig's own word).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from miner2provider.core.errors import M2PError
from miner2provider.core.textfiles import printable
from miner2provider.detect.ssh import SshOptions, redact

# action: (what its plan is, the CLI's plan command or None, the CLI's command)
ACTIONS: dict[str, tuple[str, list[str] | None, list[str]]] = {
    "detect": ("reads the rig over SSH (the detect probe); nothing on the rig changes", None, []),
    "convert": ("m2p plan: what convert would change", ["plan"], ["convert", "--yes"]),
    "schedule": ("m2p schedule apply --check: the time-share agent with the rig's m2p_schedule",
                 ["schedule", "apply", "--check"], ["schedule", "apply", "--yes"]),
    "revert": ("revert removes k3s, the container toolkit, the device plugin and the agent and starts the "
               "miner as before; the mining OS's config is not touched", None, ["revert", "--yes"]),
}
CHANGING = {"convert", "schedule", "revert"}
MAX_LINES = 5_000  # a page keeps the last lines of a long run
PLAN_VALID_S = 15 * 60  # a changing run needs a plan of the same action on the same rigs this recent


class Refused(M2PError):
    """An action the dashboard will not start now (a lease runs, another action runs)."""


@dataclass
class Job:
    id: str
    rigs: tuple[str, ...]
    action: str
    kind: str  # plan | run
    state: str = "running"  # running | done | failed
    exit_code: int | None = None
    lines: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    ended: float | None = None
    ran: bool = False  # a plan whose run has started: one plan, one run

    def view(self, since: int = 0) -> dict[str, Any]:
        return {"id": self.id, "rigs": list(self.rigs), "action": self.action, "kind": self.kind, "state": self.state,
                "exit_code": self.exit_code, "lines": self.lines[since:], "line_count": len(self.lines)}


@dataclass(frozen=True)
class Fleet:
    """How the dashboard's actions reach the rigs: the same files and SSH settings it was started with."""

    inventory_file: str
    ssh: SshOptions
    vault_password_file: str | None
    secrets: tuple[Any, ...]  # the inventory's Secret values, replaced in every line shown
    redetect: Callable[[str], str]  # re-read one rig into the history; returns a line to show


def cli_options(fleet: Fleet, rigs: tuple[str, ...]) -> list[str]:
    out = ["-i", fleet.inventory_file, "--limit", ",".join(rigs), "--known-hosts", str(fleet.ssh.known_hosts),
           "--connect-timeout", str(fleet.ssh.connect_timeout), "--command-timeout", str(fleet.ssh.command_timeout)]
    if fleet.ssh.accept_new:
        out.append("--accept-new")
    if fleet.vault_password_file:
        out += ["--vault-password-file", fleet.vault_password_file]
    return out


class Actions:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.jobs: dict[str, Job] = {}
        self._busy: dict[str, str] = {}  # rig -> the id of its running job
        self._lock = threading.Lock()

    def start(self, leases: dict[str, list[str]], action: str, kind: str, plan: str | None = None) -> Job:
        """One job for the rigs (``leases``: each rig's running leases as last reported); the CLI runs
        them together (``--limit a,b``: its batches, its lease guard).  A changing action runs only after
        its plan: ``plan`` names a finished plan job of the same action on the same rigs, from the last
        PLAN_VALID_S seconds, not run before (the server checks it; the page's confirm button sends it)."""
        if action not in ACTIONS:
            raise Refused(f"unknown action {action!r}; known: {', '.join(ACTIONS)}")
        if not leases:
            raise Refused("no rig selected")
        leased = [f"{rig} ({', '.join(held)})" for rig, held in leases.items() if held]
        if action in CHANGING and leased:  # no plan either: nothing it shows could run
            runs = "runs a lease" if len(leased) == 1 else "run leases"
            raise Refused(f"{', '.join(leased)} {runs}: no {action} until it ends; leave it out of the selection")
        rigs = tuple(leases)
        with self._lock:
            busy = [f"{rig} ({self.jobs[self._busy[rig]].action})" for rig in rigs if rig in self._busy]
            if busy:
                raise Refused(f"busy with another action: {', '.join(busy)}")
            if kind == "run" and action in CHANGING:
                self._planned(action, rigs, plan).ran = True
            job = Job(uuid.uuid4().hex[:12], rigs, action, kind)
            self.jobs[job.id] = job
            self._busy.update(dict.fromkeys(rigs, job.id))
        threading.Thread(target=self._run, args=(job,), name=f"m2p-{action}", daemon=True).start()
        return job

    def _planned(self, action: str, rigs: tuple[str, ...], plan: str | None) -> Job:
        planned = self.jobs.get(plan or "")
        if planned is None or planned.kind != "plan" or planned.action != action or set(planned.rigs) != set(rigs):
            raise Refused(f"{action} runs only after its plan: plan it on the same rigs first, then confirm")
        if planned.state != "done" or planned.ended is None or time.time() - planned.ended > PLAN_VALID_S:
            raise Refused(f"that plan is {'not finished' if planned.state == 'running' else 'failed or too old'}: "
                          "plan again, then confirm")
        if planned.ran:
            raise Refused("that plan has run already: plan again, then confirm")
        return planned

    def _run(self, job: Job) -> None:
        what, plan_argv, run_argv = ACTIONS[job.action]
        try:
            if job.kind == "plan":
                self._say(job, f"plan: {what}")
                code = self._subprocess(job, plan_argv) if plan_argv else 0
            elif job.action == "detect":
                for rig in job.rigs:
                    self._say(job, self.fleet.redetect(rig))
                code = 0
            else:
                code = self._subprocess(job, run_argv)
        except Exception as exc:  # shown on the page: the action failed, the dashboard goes on
            self._say(job, f"m2p dashboard: {type(exc).__name__}: {exc}")
            code = 1
        job.exit_code = code
        # plan: 1 means changes pending (m2p plan's contract), not a failure
        job.state = "done" if code == 0 or (job.kind == "plan" and code == 1) else "failed"
        job.ended = time.time()
        with self._lock:
            for rig in job.rigs:
                self._busy.pop(rig, None)

    def _subprocess(self, job: Job, argv: list[str]) -> int:
        command = [sys.executable, "-m", "miner2provider", *argv, *cli_options(self.fleet, job.rigs)]
        self._say(job, "$ m2p " + " ".join([*argv, "-i", self.fleet.inventory_file, "--limit", ",".join(job.rigs)]))
        with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace", env=_plain_env()) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                self._say(job, line.rstrip("\n"))
        return proc.returncode

    def _say(self, job: Job, line: str) -> None:
        job.lines.append(printable(redact(line, self.fleet.secrets)))
        if len(job.lines) > MAX_LINES:
            del job.lines[: len(job.lines) - MAX_LINES]

    def running(self) -> dict[str, str]:
        with self._lock:
            return dict(self._busy)


def _plain_env() -> dict[str, str]:
    """The dashboard's environment without colour (the page shows plain lines)."""
    return {**os.environ, "NO_COLOR": "1", "TERM": "dumb"}
