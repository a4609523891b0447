"""Detect: probe rigs (over SSH, or this machine with --local) and judge their readiness."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from miner2provider.core.inventory import Host, python_of
from miner2provider.detect.facts import probe
from miner2provider.detect.facts.base import Fact, Output
from miner2provider.detect.facts.gpu import Gpus
from miner2provider.detect.readiness import Thresholds, assess
from miner2provider.detect.report import RigReport
from miner2provider.detect.ssh import Result, SshOptions, fan_out, run_one


def settings_for(host: Host) -> Thresholds:
    return Thresholds(
        min_free_disk_gb=host.var("m2p_min_free_disk_gb", Thresholds.min_free_disk_gb),
        min_ram_mb=host.var("m2p_min_ram_mb", Thresholds.min_ram_mb),
        data_dir=host.var("m2p_data_dir"),
        become_password_given=host.become_password is not None,
        control_node=host.control_node,
    )


def report_from(result: Result, seen: dict[tuple[str, Output], Any] | None = None) -> RigReport:
    """``seen``: the facts parsed for the fan-out's other rigs (probe.gather)."""
    host = result.host
    if not result.ok:
        return RigReport(host.name, host.address, None, None, result.failure, result.error, result.warnings)
    try:
        facts = probe.gather(result.stdout, seen)
    except probe.ProbeIncomplete as exc:
        return RigReport(host.name, host.address, None, None, "probe",
                         f"probe on {host.address} ended early (exit {result.rc}): {exc}", result.warnings)
    except probe.ProbeUnreadable as exc:
        return RigReport(host.name, host.address, None, None, "probe", f"{exc} on {host.address}",
                         result.warnings)
    try:
        verdict = assess(facts, settings_for(host))
    except Exception as exc:  # noqa: BLE001 - a bug judging one rig must not lose the fleet's results
        return RigReport(host.name, host.address, facts, None, "probe",
                         f"m2p could not judge the rig's facts ({type(exc).__name__}: {str(exc)[:100]})",
                         result.warnings)
    return RigReport(host.name, host.address, facts, verdict, warnings=result.warnings)


def detect(hosts: list[Host], opts: SshOptions,
           on_done: Callable[[RigReport], None] | None = None) -> list[RigReport]:
    reports: dict[str, RigReport] = {}  # host names are unique in an inventory
    seen: dict[tuple[str, Output], Any] = {}

    def done(result: Result) -> None:
        report = reports[result.host.name] = report_from(result, seen)
        if on_done:
            on_done(report)

    fan_out(hosts, lambda host: probe.script(python_of(host.vars)), opts, done)
    return [reports[h.name] for h in hosts]


T = TypeVar("T")


def ask(host: Host, fact: type[Fact[T]], opts: SshOptions) -> T | str:
    """One fact of one rig (a fact the probe does not gather), or why the rig did not answer."""
    result = run_one(host, fact.command + "\n", opts, file_notes=False)
    if not result.ok:
        return result.error or "no answer"
    return fact.parse(Output(result.stdout, result.rc if result.rc is not None else 1))


def detect_local(settings: Thresholds | None = None) -> RigReport:
    """This machine, without SSH: the same probe run locally; GPUs from NVML when pynvml is there."""
    out = subprocess.run(["sh", "-s"], input=probe.script(), capture_output=True, text=True, timeout=120)
    facts = probe.gather(out.stdout)
    nvml = read_nvml()
    if nvml is not None:
        gpus, cuda = nvml
        facts = replace(facts, gpus=gpus, cuda=cuda or facts.cuda)
    return RigReport(socket.gethostname(), "localhost", facts, assess(facts, settings or Thresholds()))


def read_nvml() -> tuple[Gpus, str] | None:
    """GPUs through NVML (the ``pynvml`` module of nvidia-ml-py), or None when it is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    from miner2provider.detect.facts.gpu import gpus_from_nvml

    return gpus_from_nvml(pynvml)
