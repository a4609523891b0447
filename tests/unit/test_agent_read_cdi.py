"""The agent's read of the CDI spec (agent/sight.py, issue 54): whether the spec still carries m2p's gate hook is
read again only when the file changed (its inode, device, size, mtime or ctime; appearing or going), never
every tick: rigs are weak CPUs and the spec rarely changes.  The answers are today's: no spec, safe; a spec
that cannot be read, not safe; else whether the gate's command is in it, or no NVIDIA device kind (another
vendor's spec)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from test_agent_service import LEASE_FIRST, api, cordoned, make_agent

from miner2provider.agent.config import Config
from miner2provider.agent.sight import GATE_MARK, SETTLED_S, Sight

__all__ = ["api"]  # the fixture, used by name

WITH_GATE = f"kind: nvidia.com/gpu\ncontainerEdits:\n  hooks:\n  - {{path: /bin/sh, args: [sh, -c, 'exec {GATE_MARK}']}}\n"
# The same length, the gate's command gone: a size check alone would not see the change.
WITHOUT_GATE = WITH_GATE.replace(GATE_MARK, "/usr/bin/true")
assert len(WITHOUT_GATE) == len(WITH_GATE)


def opens_of(monkeypatch, spec: Path) -> list[Path]:
    """Every read of ``spec``'s text from now on (the reader's one way in)."""
    opened: list[Path] = []
    read_text = Path.read_text

    def counted(self, *args, **kwargs):
        if self == spec:
            opened.append(self)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    return opened


def settled_now(spec: Path) -> float:
    """A wall clock well past the spec's last change: its stamps can be trusted."""
    return spec.stat().st_ctime + 60.0


def test_the_agent_reads_an_unchanged_spec_once_over_its_ticks(api, tmp_path, monkeypatch):
    spec = tmp_path / "nvidia.yaml"
    spec.write_text(WITH_GATE)
    agent = make_agent(api, tmp_path, LEASE_FIRST)  # its wall clock: 2027, long after the spec was written
    agent.config = Config(**{**agent.config.__dict__, "cdi_spec": str(spec)})
    opened = opens_of(monkeypatch, spec)
    for _ in range(4):
        agent.tick()
    assert len(opened) == 1
    assert agent.state.mode == "idle-mining" and not cordoned(api) and "lacks m2p's gate" not in agent.last_error


def test_an_in_place_rewrite_without_the_gate_and_its_mtime_restored_is_seen_at_the_next_reading(tmp_path,
                                                                                                  monkeypatch):
    spec = tmp_path / "nvidia.yaml"
    spec.write_text(WITH_GATE)
    before = spec.stat()
    sight, now = Sight(), settled_now(spec)
    opened = opens_of(monkeypatch, spec)
    assert [sight.gate_in_spec(str(spec), lambda: now) for _ in range(3)] == [True] * 3 and len(opened) == 1
    time.sleep(0.1)  # past the file system's timestamp granularity (a jiffy): the rewrite's ctime is another
    spec.write_text(WITHOUT_GATE)  # the same file, truncated and written again
    os.utime(spec, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = spec.stat()
    assert (after.st_ino, after.st_dev, after.st_size, after.st_mtime_ns) == (
        before.st_ino, before.st_dev, before.st_size, before.st_mtime_ns)  # only ctime tells
    assert sight.gate_in_spec(str(spec), lambda: now) is False and len(opened) == 2
    assert sight.gate_in_spec(str(spec), lambda: now) is False and len(opened) == 2


def test_a_spec_that_goes_is_safe_and_one_that_appears_without_the_gate_is_not(tmp_path, monkeypatch):
    spec = tmp_path / "nvidia.yaml"
    spec.write_text(WITH_GATE)
    sight, now = Sight(), settled_now(spec)
    opened = opens_of(monkeypatch, spec)
    assert sight.gate_in_spec(str(spec), lambda: now) is True
    spec.unlink()
    assert sight.gate_in_spec(str(spec), lambda: now) is True  # no spec: no container gets the GPUs
    assert sight.gate_in_spec(str(spec), lambda: now) is True and len(opened) == 2  # still none: not read again
    spec.write_text(WITHOUT_GATE)
    assert sight.gate_in_spec(str(spec), lambda: settled_now(spec)) is False and len(opened) == 3


def test_a_spec_that_cannot_be_read_is_not_safe_and_is_read_again_next_tick(tmp_path, monkeypatch):
    """A failed read (EIO, EMFILE: a passing fault) answers "not safe" and is not kept: the next tick reads again, so
    the rig is back on the market as soon as the spec reads, not only when the file changes."""
    spec = tmp_path / "nvidia.yaml"
    spec.write_text(WITH_GATE)
    read_text, failing = Path.read_text, [True]

    def refused(self, *args, **kwargs):
        if self == spec and failing[0]:  # chmod 000 stops no root reader: the refusal is made here
            raise OSError(5, "Input/output error", str(self))
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", refused)
    sight = Sight()
    assert sight.gate_in_spec(str(spec), lambda: settled_now(spec)) is False
    failing[0] = False
    assert sight.gate_in_spec(str(spec), lambda: settled_now(spec)) is True


def test_an_answer_read_in_the_instant_of_a_write_is_not_kept(tmp_path, monkeypatch):
    """A rewrite in the same clock tick as the reading would keep every stamp: such an answer is read again,
    until a reading comes SETTLED_S after the file's last change."""
    spec = tmp_path / "nvidia.yaml"
    spec.write_text(WITH_GATE)
    changed = spec.stat().st_ctime_ns / 1e9  # as the agent reads it (st_ctime, a float of its own, may differ by an ulp)
    sight = Sight()
    opened = opens_of(monkeypatch, spec)
    assert sight.gate_in_spec(str(spec), lambda: changed)
    assert sight.gate_in_spec(str(spec), lambda: changed + SETTLED_S / 2)
    assert len(opened) == 2
    settled = changed + SETTLED_S + 0.001  # a millisecond past: exactly SETTLED_S is a float sum, an ulp either side
    assert sight.gate_in_spec(str(spec), lambda: settled) and sight.gate_in_spec(str(spec), lambda: settled)
    assert len(opened) == 3

