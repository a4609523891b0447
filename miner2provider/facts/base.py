"""The shape of a fact: a read-only shell command and a pure parse of its output.

All facts of a rig run in one probe script over one SSH round trip (``probe.py``);
their outputs are parsed on the controller, so every parser is tested with golden
files of real captured output (tests/unit/facts/<fact>/<case>.json).
"""

from __future__ import annotations

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
