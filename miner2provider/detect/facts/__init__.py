"""Read-only facts about a rig: each a command and a pure parse (see base.py)."""

from miner2provider.detect.facts.amd import AmdGpusFact
from miner2provider.detect.facts.fingerprint import FingerprintFact
from miner2provider.detect.facts.gpu import CudaFact, GpusFact
from miner2provider.detect.facts.health import DefaultRouteFact, HostnameFact, XidFact
from miner2provider.detect.facts.holders import HoldersFact
from miner2provider.detect.facts.listening import ListeningFact
from miner2provider.detect.facts.mining_os import MinerFact, MiningOsFact
from miner2provider.detect.facts.node import AgentLedgerFact, AgentStatusFact, InstalledFact
from miner2provider.detect.facts.reclaimer import ReclaimerFact
from miner2provider.detect.facts.system import (
    CgroupFact,
    CpuFact,
    DisksFact,
    KernelFact,
    MemoryFact,
    OsReleaseFact,
    PythonFact,
    SudoFact,
)
from miner2provider.detect.facts.tunnel import TunnelFact

# Every fact the detect probe gathers, in the order the probe runs them.
ALL_FACTS = (
    OsReleaseFact, KernelFact, CgroupFact, CpuFact, MemoryFact, DisksFact, PythonFact, SudoFact,
    MiningOsFact, MinerFact, GpusFact, CudaFact, AmdGpusFact, InstalledFact, HostnameFact, DefaultRouteFact, XidFact,
    FingerprintFact, AgentStatusFact, AgentLedgerFact, ReclaimerFact, TunnelFact, HoldersFact,
)
# Facts asked of one rig when a command needs them, never by the probe.
ON_DEMAND_FACTS = (ListeningFact,)
FACTS_BY_NAME = {f.name: f for f in (*ALL_FACTS, *ON_DEMAND_FACTS)}
