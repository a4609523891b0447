"""known_hosts files as OpenSSH writes them (issue 18, item 2): markers, hashed and plain lines
mixed, a truncated key, a byte that is not UTF-8.  m2p reads what it can, says which lines it
skipped, and never trusts an @revoked key."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko
import pytest

from miner2provider.core.inventory import Host
from miner2provider.detect.ssh import RevokedHostKey, SshOptions, _KnownHostsPolicy, classify, load_known_hosts

HOST = Host("rig03", "10.0.0.3", 22, "user", None, None, None, ("all",), {})


@pytest.fixture
def keys(tmp_path) -> dict[str, paramiko.PKey]:
    made = {}
    for name in ("plain", "hashed", "revoked", "ca"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)], check=True)
        made[name] = paramiko.Ed25519Key.from_private_key_file(str(tmp_path / name))
    return made


def write(tmp_path: Path, keys: dict[str, paramiko.PKey]) -> Path:
    def entry(names: str, k: paramiko.PKey) -> bytes:
        return f"{names} {k.get_name()} {k.get_base64()}\n".encode()
    path = tmp_path / "known_hosts"
    path.write_bytes(b"".join([
        b"# a comment\n",
        entry("10.0.0.1", keys["plain"]),
        entry(paramiko.HostKeys.hash_host("10.0.0.2"), keys["hashed"]),
        b"@cert-authority *.farm " + entry("", keys["ca"]).lstrip(),
        b"@revoked * " + entry("", keys["revoked"]).lstrip(),
        entry("10.0.0.3", keys["revoked"]),  # listed, but revoked: never trusted
        b"10.0.0.4 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI\n",  # truncated
        b"10.0.0.5 ssh-ed25519 \xff\xfe\n",  # not UTF-8
        b"\n",
    ]))
    return path


def test_reads_what_it_can_and_names_the_lines_it_skipped(tmp_path, keys) -> None:
    path = write(tmp_path, keys)
    known = load_known_hosts(SshOptions(known_hosts=path))
    assert known.lookup("10.0.0.1")["ssh-ed25519"] == keys["plain"]
    assert known.lookup("10.0.0.2")["ssh-ed25519"] == keys["hashed"]
    assert known.lookup("10.0.0.3") is None
    assert known.revoked == {keys["revoked"].get_base64()}
    assert known.skipped == [
        f"{path}:4: @cert-authority line skipped (m2p does not check host certificates)",
        f"{path}:7: unreadable or unsupported key, skipped",
        f"{path}:8: not UTF-8, skipped",
    ]


@pytest.mark.parametrize("accept_new", [False, True])
def test_a_revoked_key_is_refused_before_any_login_even_with_accept_new(tmp_path, keys, accept_new) -> None:
    path = write(tmp_path, keys)
    known = load_known_hosts(SshOptions(known_hosts=path))
    policy = _KnownHostsPolicy(path, accept_new, known.revoked)
    before = path.read_bytes()
    with pytest.raises(RevokedHostKey) as caught:
        policy.missing_host_key(paramiko.SSHClient(), "10.0.0.3", keys["revoked"])
    assert path.read_bytes() == before  # never recorded
    failure, sentence = classify(caught.value, HOST, SshOptions(known_hosts=path))
    assert failure == "host-key-revoked"
    assert sentence.endswith(f"is marked @revoked in {path}: refused")


def test_a_missing_file_is_empty(tmp_path) -> None:
    known = load_known_hosts(SshOptions(known_hosts=tmp_path / "absent"))
    assert known.skipped == [] and known.revoked == set()
