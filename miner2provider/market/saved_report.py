"""Read a saved ``m2p detect --json`` report, so attributes can be planned offline.

The report is a file the user hands over (perhaps edited, perhaps from an older m2p): every entry
is checked against ``GPU_SCHEMA`` before anything from it can become a label or a provider
attribute, and a bad entry is named with its line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from miner2provider.core import textfiles
from miner2provider.core.errors import UsageError
from miner2provider.detect.facts.amd import AmdGpu
from miner2provider.detect.facts.gpu import Gpu, Gpus
from miner2provider.market.base import RigGpus
from miner2provider.rigside.status import measured_from


def _text(pattern: str) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, str) and re.fullmatch(pattern, v) is not None


def _whole(low: int, high: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


# One GPU row of a report: field -> (check, what a valid value looks like).
GPU_SCHEMA: dict[str, tuple[Callable[[Any], bool], str]] = {
    "index": (_whole(0, 1023), "a whole number 0-1023"),
    "name": (_text(r"[\x20-\x7e]{1,100}"), "printable text up to 100 characters"),
    "uuid": (_text(r"[A-Za-z0-9-]{0,64}"), "a GPU UUID"),
    "pci_bus_id": (_text(r"[0-9A-Fa-f:.]{0,20}"), "a PCI bus id"),
    "vendor_id": (_text(r"[0-9a-f]{4}|"), "4 hex digits"),
    "device_id": (_text(r"[0-9a-f]{4}|"), "4 hex digits"),
    "subsystem_id": (_text(r"(0x)?[0-9A-Fa-f]{0,8}"), "0x and 8 hex digits"),
    "memory_mib": (_whole(0, 1 << 20), "MiB as a whole number, 0-1048576"),
    "driver_version": (_text(r"[0-9]{0,4}(\.[0-9]{1,4}){0,3}"), "a driver version such as 550.127.05"),
}
GPU_STATES = ("ok", "no-nvidia-smi", "no-gpu", "driver-error")
# One AMD card of a report (facts.amd_gpus; absent in reports older than m2p's AMD detection).
AMD_SCHEMA: dict[str, tuple[Callable[[Any], bool], str]] = {
    "pci_slot": (_text(r"[0-9A-Fa-f:.]{1,20}"), "a PCI slot such as 0000:03:00.0"),
    "device_id": (_text(r"[0-9a-f]{4}"), "4 hex digits"),
    "revision": (_text(r"[0-9a-f]{2}"), "2 hex digits"),
    "subsystem_id": (_text(r"[0-9a-f]{4}:[0-9a-f]{4}"), "vendor:device, 4 hex digits each"),
    "vram_bytes": (_whole(0, 1 << 44), "bytes as a whole number"),
}
_CUDA = _text(r"([0-9]{1,2}\.[0-9]{1,2})?")
_NAME = _text(r"[\x21-\x7e]{1,253}")


class _Bad(ValueError):
    """One field of one entry is wrong: the message names the field and what it should be."""


def load_report(path: str) -> tuple[list[RigGpus], list[str]]:
    """(rigs with facts, names of rigs that had failed when the report was made)."""
    text = textfiles.read_text(path, "report", UsageError)
    rigs, failed = [], []
    for i, (line, entry) in enumerate(_entries(text, path), start=1):
        try:
            rig = _rig(entry)
        except _Bad as exc:
            raise UsageError(f"rig #{i} of the report: {exc}", where=f"{path}:{line}") from None
        if rig is None:
            failed.append(entry["name"])
        else:
            rigs.append(rig)
    return rigs, failed


def _entries(text: str, path: str) -> list[tuple[int, Any]]:
    """The report's top-level list as (line, entry) pairs, so an entry's error can name its line."""
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    at = len(text) - len(text.lstrip())
    if not text[at:at + 1] == "[":
        raise UsageError("not an `m2p detect --json` report (expected a list of rigs)", where=f"{path}:1")
    out: list[tuple[int, Any]] = []
    at += 1
    try:
        while True:
            at = _skip_space(text, at)
            if text[at:at + 1] == "]" and not out:
                at += 1
                break
            entry, end = decoder.raw_decode(text, at)
            out.append((text.count("\n", 0, at) + 1, entry))
            at = _skip_space(text, end)
            if text[at:at + 1] == ",":
                at += 1
                continue
            if text[at:at + 1] == "]":
                at += 1
                break
            raise json.JSONDecodeError("expected , or ]", text, at)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not JSON: {exc.msg}", where=f"{path}:{exc.lineno}") from None
    except RecursionError:
        raise UsageError("not a report: JSON nested too deep", where=path) from None
    except _Bad as exc:
        raise UsageError(f"not a report: {exc}", where=f"{path}:{text.count(chr(10), 0, at) + 1}") from None
    if text[_skip_space(text, at):]:
        raise UsageError("not JSON: extra data after the list", where=f"{path}:{text.count(chr(10), 0, at) + 1}")
    return out


def _skip_space(text: str, at: int) -> int:
    while text[at:at + 1] in (" ", "\t", "\n", "\r"):
        at += 1
    return at


def _no_constant(name: str) -> Any:
    raise _Bad(f"{name} is no number a report holds")


def _rig(entry: Any) -> RigGpus | None:
    if not isinstance(entry, dict):
        raise _Bad("an entry is an object with name and facts")
    if not _NAME(entry.get("name")):
        raise _Bad("name must be the rig's name (printable, no spaces)")
    facts = entry.get("facts")
    if facts is None:
        return None  # the rig had failed when the report was made
    if not isinstance(facts, dict) or not isinstance(facts.get("gpus"), dict):
        raise _Bad(f"{entry['name']}: facts must be an object with gpus")
    g = facts["gpus"]
    if g.get("state") not in GPU_STATES:
        raise _Bad(f"{entry['name']}: gpus.state must be one of {', '.join(GPU_STATES)}")
    rows = g.get("gpus")
    if not isinstance(rows, list) or len(rows) > 64:
        raise _Bad(f"{entry['name']}: gpus.gpus must be a list of at most 64 GPUs")
    cuda = facts.get("cuda", "")
    if not _CUDA(cuda):
        raise _Bad(f"{entry['name']}: cuda must be a version such as 12.4 (or empty), found {textfiles.shown(cuda)}")
    error = g.get("error", "")
    gpus = Gpus(g["state"], tuple(_gpu(entry["name"], n, row) for n, row in enumerate(rows)),
                error[:300] if isinstance(error, str) else "")
    amd_rows = facts.get("amd_gpus", [])
    if not isinstance(amd_rows, list) or len(amd_rows) > 64:
        raise _Bad(f"{entry['name']}: amd_gpus must be a list of at most 64 GPUs")
    amd = tuple(AmdGpu(**_checked(entry["name"], f"AMD GPU {n}", row, AMD_SCHEMA)) for n, row in enumerate(amd_rows))
    agent = facts.get("agent_status")
    measured = measured_from(agent.get("measured")) if isinstance(agent, dict) else None
    return RigGpus(entry["name"], gpus, cuda, amd=amd, measured=measured)


def _gpu(rig: str, n: int, row: Any) -> Gpu:
    return Gpu(**_checked(rig, f"GPU {n}", row, GPU_SCHEMA))


def _checked(rig: str, what: str, row: Any, schema: dict[str, tuple[Callable[[Any], bool], str]]) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise _Bad(f"{rig}: {what} is not an object")
    for field, (ok, expected) in schema.items():
        if not ok(row.get(field)):
            raise _Bad(f"{rig}: {what} {field} must be {expected}, found {textfiles.shown(row.get(field))}")
    return {field: row[field] for field in schema}

