"""What in the mining OS's own configuration keeps the miner from being started on some cards only (per-card
hand-over, decide.py): read from the OS's files, never printed (they hold wallets and pool passwords); the
answer names a file, a variable and a flag, nothing of their values.

HiveOS (minershive/hiveos-linux hive/bin/miner @fae42644): rig.conf's ``MINER`` is run in window 1 and
``MINER2`` ... ``MINER32`` in windows of their own; wallet.conf (the flight sheet) carries each miner's extra
arguments in ``<MINER>_USER_CONFIG`` (``CUSTOM_USER_CONFIG`` for a custom miner), which its h-config.sh hands to
the miner.  A miner started with ``CUDA_VISIBLE_DEVICES`` naming the free cards sees them renumbered from 0, so:

- arguments that select devices by index (T-Rex ``-d``/``--devices``, lolMiner ``--devices``, GMiner
  ``--cuda_devices``/``--devices``) name other cards, or cards it no longer sees, and it may not start;
- per-GPU lists (``--intensity 22,21``, ``"lhr-tune": "70,71"``) apply to the wrong cards;
- several miners (MINER2 ...) each need their own cards;
- a miner's own reboot on failure (T-Rex ``--watchdog-exit-mode ...:r``, lolMiner ``--watchdog script``,
  ``--reboot*``) would reboot the rig under the lease.

Each of these hands the whole rig over instead (the miner stops on every card for a lease).  Python 3.8.
"""

from __future__ import annotations

import re
from pathlib import Path

# NAME="value" / NAME='value' / NAME=value, a quoted value over several lines too (bash assignments).
_ASSIGNMENT = re.compile(r"""^([A-Za-z_][A-Za-z0-9_]*)=("(?:[^"\\]|\\.)*"|'[^']*'|[^\n]*)""", re.M | re.S)
_DEVICES = re.compile(r"""(?:^|[\s"'])(?:-d|--devices?|--cuda[-_]devices|--gpus?|--di|-di)(?=[\s="':]|$)"""
                      r"""|"devices"\s*:""")
_PER_GPU = re.compile(r"""(?:^|[\s="':])\d+(?:\.\d+)?(?:\s*,\s*\d+(?:\.\d+)?)+(?=[\s"',]|$)""")
_REBOOT = re.compile(r"""reboot|--watchdog-exit-mode[\s=]+\S*r\b|--watchdog[\s=]+script""", re.I)


def _values(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, raw in _ASSIGNMENT.findall(text):
        out[name] = raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'" else raw
    return out


def why_whole(files: tuple[str, ...]) -> str:
    """Why the rig must hand over whole ("" where nothing in ``files`` says so); a file that cannot be read says
    nothing (the OS that has none starts the miner on every card)."""
    for path in files:
        try:
            values = _values(Path(path).read_text(errors="replace"))
        except OSError:
            continue
        name = Path(path).name
        extra = sorted(key for key, value in values.items() if re.fullmatch(r"MINER([2-9]|[12][0-9]|3[0-2])", key)
                       and value.strip())
        if extra:
            return f"{name} runs several miners ({', '.join(extra)})"
        for key, value in sorted(values.items()):
            if not key.endswith("_USER_CONFIG"):
                continue
            found = _reason(value)
            if found:
                return f"{name} {key} {found}"
    return ""


def _reason(value: str) -> str | None:
    if _DEVICES.search(value):
        return "selects devices by index"
    if _REBOOT.search(value):
        return "reboots the rig on a failure"
    if _PER_GPU.search(value):
        return "sets per-GPU lists"
    return None
