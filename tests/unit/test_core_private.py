"""What m2p keeps private (the agent zipapp rigs run as root, the dashboard's token) is built and read only
where no one else can write: a planted file or folder is never used."""

from __future__ import annotations

import hashlib
import stat

import pytest

from miner2provider.core.private import UnsafePath, private_dir
from miner2provider.fleet import agent_zipapp


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "m2p" / "agent"


def test_the_zipapp_is_built_private_and_hashed(cache):
    path = agent_zipapp.write()
    assert path.parent == cache and stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert hashlib.sha256(path.read_bytes()).hexdigest()[:16] in path.name
    assert agent_zipapp.write() == path  # a second run reuses its own file


def test_a_planted_zipapp_is_never_used(cache):
    real = agent_zipapp.write()
    good = real.read_bytes()
    real.write_bytes(b"#!/bin/sh\nplanted\n")  # same name, other bytes: rebuilt
    assert agent_zipapp.write().read_bytes() == good
    real.unlink()
    real.symlink_to("/etc/passwd")  # a link of the expected name: refused, not followed
    with pytest.raises(UnsafePath, match="not a plain file"):
        agent_zipapp.write()


@pytest.mark.parametrize("make, said", [
    (lambda p: (p.mkdir(parents=True), p.chmod(0o777)), "open to other users"),
    (lambda p: (p.parent.mkdir(parents=True), p.symlink_to(p.parent)), "not a plain folder"),
])
def test_a_shared_or_linked_folder_is_refused(tmp_path, make, said):
    folder = tmp_path / "a" / "agent"
    make(folder)
    with pytest.raises(UnsafePath, match=said):
        private_dir(folder)
    with pytest.raises(UnsafePath, match=said):
        agent_zipapp.write(str(folder))
