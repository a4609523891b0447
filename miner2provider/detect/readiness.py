"""Is a rig ready to become a GPU node?  Pure: facts and settings in, verdict out.

Each finding has a stable ``code`` (what roles and scripts test: ``no-gpu``, ``cgroup-v1`` ...)
and a ``sentence`` (what people read: what is wrong and what to do).  ``blockers`` make a rig
"not ready"; ``warnings`` leave it "ready" but need the owner's attention.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import date

from miner2provider.core import k8s_lines
from miner2provider.core.collection import role_defaults
from miner2provider.detect import os_records
from miner2provider.detect.facts.probe import RigFacts

# ansible-core 2.19 (the line m2p drives rigs with) supports target Python 3.8-3.13.
MIN_TARGET_PYTHON = (3, 8)
ANSIBLE_LINE = "ansible-core 2.19"
# The floors are the preflight role's (one place for `m2p detect` and convert's refusal alike).
_PREFLIGHT = role_defaults("preflight")
DEFAULT_MIN_FREE_DISK_GB = int(_PREFLIGHT["preflight_min_free_disk_gb"])  # k3s data; images need tens of GB
DEFAULT_MIN_RAM_MB = int(_PREFLIGHT["preflight_min_ram_mb"])
RECOMMENDED_FREE_DISK_GB = 100  # the first marketplace's figure for a worker's ephemeral storage
MIN_CUDA_MAJOR = 12  # most lease images need CUDA 12 (driver >= 525)
# Used share of a disk at which readiness warns: 5 points before kubelet's eviction floor (k3s_kubelet_args'
# nodefs.available<10%), so the owner hears it before leases are evicted or the stick fills.
NEARLY_FULL = 0.85


@dataclass(frozen=True)
class Thresholds:
    min_free_disk_gb: int = DEFAULT_MIN_FREE_DISK_GB
    min_ram_mb: int = DEFAULT_MIN_RAM_MB
    data_dir: str | None = None  # m2p_data_dir: k3s data on another disk
    become_password_given: bool = False
    control_node: bool = False  # m2p_control_node: a k3s server without GPUs (a VPS); no GPU or miner findings
    today: date = field(default_factory=date.today)  # for end-of-life dates
    # The rig's marketplace's rule on mixed models, as a sentence's end (Marketplace.one_model_per_node; "" : none,
    # such as m2p_marketplace none).  The default is for a caller that knows no rig's marketplace (`m2p detect`).
    one_model_per_node: str = "a marketplace lists one GPU model per node"


@dataclass(frozen=True)
class Finding:
    code: str  # stable, one of CODES
    sentence: str

    def __str__(self) -> str:
        return self.sentence


# Every code a finding can carry, with the mining-OS records' refusals (known_codes()); roles select
# findings by these, never by their sentences.
CODES = frozenset({
    "cpu-arch", "no-python", "old-python", "no-sudo", "sudo-password", "no-nvidia-smi", "driver-error",
    "no-gpu", "mixed-gpus", "old-cuda", "disk-unreadable", "low-disk", "small-disk", "low-ram", "cgroup-v1",
    "no-default-route", "xid-errors", "xid-unknown", "unknown-os", "no-miner-adapter", "k3s-eol", "disk-nearly-full",
    "amd-gpus", "amd-gpus-left-out",
})
# The findings no setting can fix: preflight refuses these even in warn-only mode.
HARDWARE_CODES = frozenset({"cpu-arch", "no-nvidia-smi", "driver-error", "no-gpu", "amd-gpus"})


def known_codes() -> frozenset[str]:
    return CODES | {r.refusal.code for r in os_records.records() if r.refusal}


@dataclass(frozen=True)
class Verdict:
    blockers: tuple[Finding, ...] = field(default=())
    warnings: tuple[Finding, ...] = field(default=())

    @property
    def status(self) -> str:
        if self.blockers:
            return "not ready"
        return "ready with warnings" if self.warnings else "ready"


class _Findings(list[Finding]):
    def append_code(self, code: str, sentence: str) -> None:
        assert code in CODES or code in known_codes(), code  # CODES first: known_codes() reads the records
        self.append(Finding(code, sentence))


def assess(facts: RigFacts, settings: Thresholds = Thresholds()) -> Verdict:
    blockers = _Findings()
    warnings = _Findings()

    if facts.kernel.machine not in {"x86_64", "amd64"}:
        blockers.append_code(
            "cpu-arch", f"{facts.kernel.machine} CPU: k3s GPU nodes and NVIDIA's packages here need x86_64")

    py = facts.python
    if py.version is None:
        blockers.append_code("no-python", "no python3: Ansible cannot drive this rig (install python3)")
    elif py.version_tuple[:2] < MIN_TARGET_PYTHON:
        blockers.append_code(
            "old-python",
            f"python3 {py.version} is older than {'.'.join(map(str, MIN_TARGET_PYTHON))}, the oldest "
            f"{ANSIBLE_LINE} drives: reflash to an image on Ubuntu 20.04 or newer, or point "
            "m2p_python_interpreter at a newer python3 installed beside it"
        )

    if facts.sudo.state == "absent":
        blockers.append_code("no-sudo", "no sudo and not root: log in as root or install sudo")
    elif facts.sudo.state == "password" and not settings.become_password_given:
        warnings.append_code(
            "sudo-password",
            "sudo asks for a password: set ansible_become_password (vault) or m2p_become_password_env")

    if not settings.control_node:
        _gpu_reasons(facts, settings, blockers, warnings)
    _disk_reasons(facts, settings, blockers, warnings)

    # The floor is installed RAM (what the owner bought), judged from MemTotal, which is always below it.
    if facts.memory.installed_mb < settings.min_ram_mb:
        blockers.append_code(
            "low-ram",
            f"{facts.memory.total_mb} MB usable of about {facts.memory.installed_mb} MB installed: k3s with GPU "
            f"workloads needs at least {settings.min_ram_mb} MB installed"
        )

    if facts.cgroup.version == 1:
        last = str(role_defaults("k3s")["k3s_cgroup_v1_last_line"])
        eol = k8s_lines.end_of_life(last)
        warnings.append_code(
            "cgroup-v1",
            f"cgroup v1: Kubernetes {last} is the last line whose kubelet runs here (m2p sets "
            f"fail-cgroupv1=false), end of life {eol.isoformat() if eol else 'unknown'}; boot with "
            "systemd.unified_cgroup_hierarchy=1 to stay on supported lines"
        )
    if facts.installed.k3s:
        past = k8s_lines.past_end_of_life(facts.installed.k3s, settings.today)
        if past:
            warnings.append_code("k3s-eol", f"k3s {facts.installed.k3s} runs here: {past}; convert upgrades it "
                                 "one minor line at a time")

    if not facts.default_route.present:
        blockers.append_code(
            "no-default-route",
            "no default route: k3s needs one (add a gateway, or a dummy interface route as k3s's air-gap docs say)")

    if facts.xid.count:
        codes = ", ".join(f"Xid {c}" for c in facts.xid.codes)
        warnings.append_code(
            "xid-errors",
            f"{facts.xid.count} NVIDIA {codes} error(s) in the kernel log (last: {facts.xid.last[-120:]}): "
            "check risers, power and cooling before leasing (Xid 79: the GPU fell off the bus)"
        )
    elif not facts.xid.readable:
        warnings.append_code(
            "xid-unknown",
            "the login user cannot read the kernel log (dmesg restricted, no password-less sudo, not in "
            "systemd-journal or adm): NVIDIA Xid errors unknown; the agent, as root, still reads them")

    mos = facts.mining_os
    if mos.kind == "unknown":
        warnings.append_code(
            "unknown-os", f"unrecognised OS ({facts.os_release.pretty_name}): m2p will treat it as plain Linux")
    elif mos.refusal:  # the mining-OS record says why m2p does not convert it (detect/os_records.py)
        blockers.append_code(*mos.refusal)
    elif not mos.has_adapter and not settings.control_node:  # a control node has no miner to adapt
        warnings.append_code(
            "no-miner-adapter", f"{mos.label}: m2p has no miner adapter for it yet: convert installs k3s without "
                                "time-share, and `schedule apply` refuses the rig (the agent could not stop its "
                                "miner for a lease)")
    return Verdict(tuple(blockers), tuple(warnings))


def _gpu_reasons(facts: RigFacts, settings: Thresholds, blockers: _Findings, warnings: _Findings) -> None:
    gpus = facts.gpus
    if facts.amd_gpus:
        counts = Counter(f"{c.name}, {c.vram_gib} GiB" if c.vram_bytes else c.name for c in facts.amd_gpus)
        cards = ", ".join(f"{n} x {what}" for what, n in counts.items())
        if gpus.state in {"no-nvidia-smi", "no-gpu"}:
            # Not "no NVIDIA driver": the rig has GPUs, of a vendor m2p has no stack for (no silent NVIDIA path).
            blockers.append_code("amd-gpus", f"AMD GPUs: not converted yet ({cards}): m2p installs NVIDIA's stack "
                                             "only; `m2p attributes` lists them")
            return
        warnings.append_code("amd-gpus-left-out", f"AMD GPUs beside the NVIDIA ones ({cards}) are left out: m2p "
                                                  "converts NVIDIA cards only, and the node offers only those")
    if gpus.state == "no-nvidia-smi":
        blockers.append_code("no-nvidia-smi", "no nvidia-smi: no NVIDIA driver installed (or no NVIDIA GPU)")
        return
    if gpus.state == "driver-error":
        blockers.append_code("driver-error", f"nvidia-smi fails: {gpus.error or 'driver not loaded'}")
        return
    if gpus.state == "no-gpu":
        blockers.append_code("no-gpu", "no NVIDIA GPU found by nvidia-smi")
        return
    if len(gpus.models) > 1 and settings.one_model_per_node:
        warnings.append_code(
            "mixed-gpus",
            f"mixed GPU models on one node ({', '.join(gpus.models)}): {settings.one_model_per_node}"
        )
    if facts.cuda:
        major = int(facts.cuda.split(".")[0])
        if major < MIN_CUDA_MAJOR:
            warnings.append_code(
                "old-cuda",
                f"driver {gpus.driver_version} supports CUDA {facts.cuda} only: most lease images need "
                f"CUDA {MIN_CUDA_MAJOR}+ (driver 525 or newer)"
            )


def _disk_reasons(facts: RigFacts, settings: Thresholds, blockers: _Findings, warnings: _Findings) -> None:
    root = next((m for m in facts.disks if m.mountpoint == "/"), None)
    target = root
    if settings.data_dir:
        # The longest mount point that contains the data dir holds it.
        holders = [m for m in facts.disks if settings.data_dir.startswith(m.mountpoint.rstrip("/") + "/")
                   or settings.data_dir == m.mountpoint]
        target = max(holders, key=lambda m: len(m.mountpoint), default=root)
    if target is None:
        warnings.append_code("disk-unreadable", "could not read free disk space (df printed nothing)")
        return
    where = f"{target.mountpoint}" + (f" (m2p_data_dir {settings.data_dir})" if settings.data_dir else "")
    if target.free_gb < settings.min_free_disk_gb:
        others = [m for m in facts.disks if m is not target and m.free_gb >= settings.min_free_disk_gb]
        hint = (f"set m2p_data_dir to a folder on {others[0].mountpoint} ({others[0].free_gb:g} GB free)"
                if others else "add an SSD and set m2p_data_dir to a folder on it")
        size = f"{target.size_gb:g} GB disk" if target.mountpoint == "/" else f"{target.size_gb:g} GB {where}"
        blockers.append_code(
            "low-disk",
            f"{size}, {target.free_gb:g} GB free on {where}: k3s needs {settings.min_free_disk_gb} GB "
            f"for its data; {hint}"
        )
    elif target.free_gb < RECOMMENDED_FREE_DISK_GB:
        warnings.append_code(
            "small-disk",
            f"{target.free_gb:g} GB free on {where}: enough to start; "
            f"lease images may need {RECOMMENDED_FREE_DISK_GB} GB"
        )
    for mount in dict.fromkeys(m for m in (root, target) if m is not None and m.size_gb > 0):
        used = 1 - mount.free_gb / mount.size_gb
        if used >= NEARLY_FULL:
            warnings.append_code(
                "disk-nearly-full",
                f"{mount.mountpoint} is {used:.0%} full ({mount.free_gb:g} GB free): kubelet evicts pods at 90 % "
                "(its nodefs and imagefs floors, 10 %), and a stick that fills up stops logging and may go "
                "read-only; free space there (old miners, logs) before it does")
