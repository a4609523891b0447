"""Where m2p keeps its files on a rig, and how it writes them there.

The agent's state directory holds its state, status, ledger, gate and the owner's requests (drain); the
controller reads the same paths over SSH (detect's facts) and writes the drain request (fleet/guards.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

AGENT_DIR = "/var/lib/m2p/agent"  # the agent's state directory (roles/timeshare_agent)
STATUS_FILE = f"{AGENT_DIR}/status.json"  # written by the agent when it changes, 0644
LEDGER_FILE = f"{AGENT_DIR}/ledger.jsonl"  # one line per change of mode (ledger.py), 0644
LEDGER_ROTATED = f"{AGENT_DIR}/ledger.1.jsonl"  # the previous ledger file (ledger.py)
DRAIN_REQUEST = f"{AGENT_DIR}/drain"  # m2p ... --drain asks the agent to cordon the node
LABELS_FILE = "/var/lib/m2p/node-labels.json"  # gpu_attributes' labels for the node, kept in step by the agent
CDI_SPEC = "/etc/cdi/nvidia.yaml"  # carries the gate's hook (roles/nvidia_container_toolkit)
# The directories a container runtime reads CDI specs from (container-device-interface pkg/cdi/spec-dirs.go@0dfd23b,
# containerd's cdi_spec_dirs default): every spec there that names an NVIDIA device must carry the gate, not only
# CDI_SPEC.  NVIDIA's own refresher (toolkit 1.18+, nvidia-cdi-refresh) writes /var/run/cdi/nvidia.yaml without it,
# and CDI ranks /var/run/cdi above /etc/cdi (the role masks the refresher and removes its spec).
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
AGENT_CONFIG = "/etc/m2p/agent.json"


def write_json(path: Path, data: Any) -> None:
    """Atomic: a rig that loses power mid-write keeps the previous file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n")
    os.replace(tmp, path)
