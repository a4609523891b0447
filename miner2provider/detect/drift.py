"""Has a converted rig drifted: the fingerprint a rig carries against what would be applied now.

Pure (no I/O): the detect probe already read the rig's fingerprint (facts/fingerprint.py),
and the controller's digest of its roles and settings (fleet/fingerprint.py) comes in as a string.  An empty
tuple of reasons means the rig is converged and the playbook can skip it; every reason is
a sentence the CLI can show.
"""

from __future__ import annotations

from collections.abc import Iterable

from miner2provider.detect.facts.fingerprint import Fingerprint, gpu_signature
from miner2provider.detect.facts.gpu import Gpus


def reasons_to_run(fingerprint: Fingerprint, gpus: Gpus, expected_inputs: str | None) -> tuple[str, ...]:
    """Why convert must run on this rig; () when it is converged.  ``expected_inputs`` None:
    judge drift only (``m2p status`` does not know which roles and bundle a convert would use)."""
    if not fingerprint.present:
        return (f"no fingerprint ({fingerprint.error})" if fingerprint.error
                else "no fingerprint: never converted, or reverted",)
    reasons: list[str] = []
    if expected_inputs is not None and fingerprint.inputs != expected_inputs:
        reasons.append("roles, settings or bundle changed since the last convert")
    signature = gpu_signature(gpus)
    if fingerprint.gpus != signature:
        reasons.append(f"GPUs changed: {fingerprint.gpus or '-'} -> {signature}")
    reasons.extend(drift(fingerprint.recorded, fingerprint.current))
    return tuple(reasons)


def drift(recorded_lines: Iterable[str], current_lines: Iterable[str]) -> list[str]:
    """One sentence per watched item whose state differs from the record (the verify playbook's too)."""
    recorded = {_key(line): line for line in recorded_lines}
    current = {_key(line): line for line in current_lines}
    return [f"drift: {key}: {_value(current.get(key), key)} (was {_value(recorded.get(key), key)})"
            for key in sorted(recorded.keys() | current.keys()) if recorded.get(key) != current.get(key)]


def _key(line: str) -> str:
    kind, _, rest = line.partition(" ")
    return f"{kind} {rest.partition(' ')[0]}"


def _value(line: str | None, key: str) -> str:
    if line is None:
        return "not watched"
    value = line[len(key):].strip()
    if key.startswith("file ") and len(value) == 64:
        return f"sha256 {value[:12]}"
    return value or "-"
