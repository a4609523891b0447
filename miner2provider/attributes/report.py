"""Read a saved ``m2p detect --json`` report, so attributes can be planned offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from miner2provider.attributes.provider import RigGpus
from miner2provider.errors import UsageError
from miner2provider.facts.gpu import Gpu, Gpus


def load_report(path: str) -> tuple[list[RigGpus], list[str]]:
    """(rigs with facts, names of rigs that had failed when the report was made)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read report: {exc.strerror}", where=path) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"not JSON: {exc.msg}", where=f"{path}:{exc.lineno}") from None
    if not isinstance(data, list):
        raise UsageError("not an `m2p detect --json` report (expected a list of rigs)", where=path)
    rigs, failed = [], []
    for i, entry in enumerate(data):
        try:
            rigs_or_none = _rig(entry)
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"rig #{i + 1} is not a detect report entry ({exc})", where=path) from None
        if rigs_or_none is None:
            failed.append(str(entry.get("name", f"#{i + 1}")))
        else:
            rigs.append(rigs_or_none)
    return rigs, failed


def _rig(entry: dict[str, Any]) -> RigGpus | None:
    facts = entry.get("facts")
    if not facts:
        return None
    g = facts["gpus"]
    gpus = Gpus(g["state"], tuple(Gpu(**row) for row in g["gpus"]), g.get("error", ""))
    return RigGpus(entry["name"], gpus, facts.get("cuda", ""))
