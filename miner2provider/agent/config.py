"""The agent's configuration: ``/etc/m2p/agent.json``, written by roles/timeshare_agent from the inventory."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from miner2provider.agent import nvml, rig
from miner2provider.agent.clocks import Clocks
from miner2provider.rigside import disk


@dataclass(frozen=True)
class Config:
    node: str
    schedule: str
    miner: rig.Miner
    gpu_count: int
    clocks: Clocks = field(default_factory=Clocks)
    # Who the agent is to the API: the rig's kubelet credential (k3s's kubelet.kubeconfig) where m2p built the
    # cluster; else (a cluster outside the inventory) api_server with the owner's token_file and ca_file.
    kubeconfig: str = ""
    api_server: str = ""
    token_file: str = ""
    ca_file: str | None = None
    state_dir: str = disk.AGENT_DIR
    labels_file: str = disk.LABELS_FILE
    cdi_spec: str = disk.CDI_SPEC  # carries the gate's hook (roles/nvidia_container_toolkit)
    cdi_dirs: tuple[str, ...] = disk.CDI_DIRS  # every NVIDIA spec in them must carry the gate too (a runtime reads all)
    hashrate_file: str = ""  # the mining OS's own miner stats (measure.py); empty: none known
    trex_api: str = ""  # T-Rex's /summary on the rig's loopback (measure.py); read instead of hashrate_file
    economics: str = ""  # policy profit: the owner's economics file, re-read when it changes
    interval_s: float = 2.0
    marketplace: str = ""  # the marketplace the rig is offered on, or none (said in the status)
    # The marketplace's own services' namespaces (from market/, by role_vars): their pods are not leases.
    system_namespaces: tuple[str, ...] = ()
    lease_label: str = ""  # the label key only the marketplace's lease pods carry (market/); empty: no marketplace
    wake_on_signal: bool = True  # answer the gate at once; False: only every tick (a plain poll)
    schedule_name: str = ""  # the owner's name for the schedule (its file's, on the controller); said in the status
    gpu_info_dir: str = nvml.GPU_INFO_DIR  # the driver's cards (device minor -> UUID): per-card hand-over
    # Health (telemetry.py): the owner's limit (m2p_gpu_temperature_limit, its default the role's; None: no
    # temperature rule), nvidia-smi's telemetry read every telemetry_interval_s, and the kernel log for Xids.
    temperature_limit_c: float | None = None
    telemetry_interval_s: float = 30.0
    kernel_log: str = "/dev/kmsg"

    @classmethod
    def load(cls, path: str) -> Config:
        raw = json.loads(Path(path).read_text())
        miner_raw = raw.pop("miner")
        miner = rig.Miner(**{**miner_raw, "processes": tuple(miner_raw.get("processes", ())),
                             "config_files": tuple(str(f) for f in miner_raw.get("config_files", ())),
                             "per_card": str(miner_raw.get("per_card", False)).lower() == "true",
                             "start_believed": str(miner_raw.get("start_believed", False)).lower() == "true"})
        raw["clocks"] = Clocks(**raw.get("clocks", {}))
        raw["gpu_count"] = int(raw["gpu_count"])
        raw["interval_s"] = float(raw.get("interval_s", 2.0))
        for key in ("temperature_limit_c", "telemetry_interval_s"):
            if raw.get(key) in (None, ""):
                raw.pop(key, None)
            else:
                raw[key] = float(raw[key])
        raw["system_namespaces"] = tuple(str(n) for n in raw.get("system_namespaces", ()))
        if "cdi_dirs" in raw:
            raw["cdi_dirs"] = tuple(str(d) for d in raw["cdi_dirs"])
        return cls(miner=miner, **raw)
