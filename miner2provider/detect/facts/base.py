"""The shape of a fact: a read-only shell command and a pure parse of its output.

All facts of a rig run in one probe script over one SSH round trip (``probe.py``);
their outputs are parsed on the controller, so every parser is tested with golden
files of real captured output (tests/unit/facts/<fact>/<case>.json).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Output:
    """What one fact's command printed (stdout and stderr together) and its exit status."""

    text: str
    rc: int


class Fact(Generic[T]):
    name: ClassVar[str]
    # POSIX sh, read-only; runs as the login user (``sudo -n`` only where it must).
    command: ClassVar[str]

    @staticmethod
    def parse(out: Output) -> T:  # pragma: no cover - every fact overrides it
        raise NotImplementedError


# A rig's numbers fit in 18 ASCII digits; more (or `N/A`, `-`, `²`) is output m2p cannot read.
_WHOLE = re.compile(r"[0-9]{1,18}")


def whole(text: str) -> int | None:
    """``text`` as a whole number when it is 1-18 ASCII digits (``str.isdigit`` also takes ``²``, which
    ``int`` refuses, and ``int`` refuses 4,301 digits); None otherwise."""
    text = text.strip()
    return int(text) if _WHOLE.fullmatch(text) else None
