"""`m2p keys install` (fleet/keys.py): the line it adds, the script that adds it (run here by sh, in a scratch
home, as the rig's shell runs it), and where the password comes from.  Over SSH on a sandbox HiveOS rig:
tests/integration/test_detect.py (password_rig_gets_a_key)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import paramiko
import pytest

from miner2provider.cli import main
from miner2provider.fleet import keys

PUB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHd5b5GQ6uV2mJm0Zl4QyYtJvQ8l0Q5o3b6yq3Yk3o9X owner@laptop.local\n"


def test_the_line_is_the_key_with_m2ps_mark_not_the_owners_machine():
    assert keys.public_line(PUB) == PUB.split()[0] + " " + PUB.split()[1] + " m2p-login"
    for odd in ("", "ssh-ed25519", 'command="sh" ' + PUB, PUB + PUB):
        with pytest.raises(ValueError, match="not one OpenSSH public key"):
            keys.public_line(odd)


def test_the_script_adds_one_line_keeps_the_others_and_locks_the_folder(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "authorized_keys").write_text("ssh-rsa AAAAB3Nza theirs\n")
    script = keys._install_script(keys.public_line(PUB))

    def run() -> str:
        done = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True,
                              env={**os.environ, "HOME": str(home)})
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run() == "added" and run() == "present"
    lines = (home / ".ssh" / "authorized_keys").read_text().splitlines()
    assert lines == ["ssh-rsa AAAAB3Nza theirs", keys.public_line(PUB)]
    assert oct((home / ".ssh").stat().st_mode)[-3:] == "700"
    assert oct((home / ".ssh" / "authorized_keys").stat().st_mode)[-3:] == "600"


def test_without_a_password_or_a_terminal_it_says_how_to_give_one(tmp_path, capsys, monkeypatch):
    key = tmp_path / "id_ed25519"
    key.write_text("stand-in private key\n")
    (tmp_path / "id_ed25519.pub").write_text(PUB)
    inv = tmp_path / "rigs.yml"
    inv.write_text("all:\n  hosts:\n    rig01: {ansible_host: 192.0.2.7, ansible_user: user}\n")
    monkeypatch.delenv("M2P_TEST_PW", raising=False)
    assert main(["keys", "install", "-i", str(inv), "--key", str(key), "--yes"]) == 2
    assert "rig01 has no password in the inventory and there is no terminal to ask: pass --password-env VAR" in \
        capsys.readouterr().err
    assert main(["keys", "install", "-i", str(inv), "--key", str(key), "--yes", "--password-env", "M2P_TEST_PW"]) == 2
    assert "M2P_TEST_PW is not set" in capsys.readouterr().err


class _Harvester(paramiko.ServerInterface):
    """An SSH server that answers at a rig's address first and keeps every password offered to it: an ATTACKER
    on the rig's LAN, not a stand-in for the rig.  It lets nobody in."""

    def __init__(self, offered: list[str]) -> None:
        self.offered = offered

    def get_allowed_auths(self, username: str) -> str:
        return "password,publickey"

    def check_auth_password(self, username: str, password: str) -> int:
        self.offered.append(password)
        return paramiko.AUTH_FAILED


@pytest.fixture(scope="module")
def harvester():
    """(port, the server's host key, the passwords it was offered) on loopback."""
    key = paramiko.RSAKey.generate(2048)
    offered: list[str] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            transport = paramiko.Transport(conn)
            transport.add_server_key(key)
            try:
                transport.start_server(server=_Harvester(offered))
            except (paramiko.SSHException, EOFError, OSError):
                transport.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], key, offered
    stop.set()
    thread.join(timeout=5)
    listener.close()


class _Terminal(io.StringIO):
    """The owner's terminal: these answers typed in."""

    def isatty(self) -> bool:
        return True


def _install_against(harvester, tmp_path, monkeypatch, *args: str) -> tuple[int, Path]:
    port, _, offered = harvester
    offered.clear()
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    inv = tmp_path / "rigs.yml"
    inv.write_text(f"all:\n  hosts:\n    rig01: {{ansible_host: 127.0.0.1, ansible_port: {port}, ansible_user: user}}\n")
    monkeypatch.setenv("M2P_TEST_PW", "typed-Secret-pw")
    known = tmp_path / "known_hosts"
    code = main(["keys", "install", "-i", str(inv), "--key", str(key), "--accept-new", "--known-hosts", str(known),
                 "--password-env", "M2P_TEST_PW", "--connect-timeout", "5", *args])
    return code, known


def test_accept_new_sends_no_password_to_a_host_key_nobody_confirmed(harvester, tmp_path, monkeypatch, capsys):
    code, known = _install_against(harvester, tmp_path, monkeypatch, "--yes")  # no terminal
    err = capsys.readouterr().err
    assert code == 2 and "no terminal to confirm it" in err and harvester[1].fingerprint in err
    assert harvester[2] == [] and not (known.exists() and known.read_text())


def test_a_new_host_key_the_owner_declines_gets_no_password(harvester, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", _Terminal("n\n"))
    code, known = _install_against(harvester, tmp_path, monkeypatch, "--yes", "--json")
    out, err = capsys.readouterr()
    assert code != 0 and harvester[1].fingerprint in err
    (rig,) = json.loads(out)
    assert rig["result"] == "failed" and "was not confirmed: no password sent" in rig["message"]
    assert harvester[2] == [] and not (known.exists() and known.read_text())


def test_the_password_goes_only_to_the_host_key_the_owner_confirmed(harvester, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", _Terminal("y\n"))
    _, known = _install_against(harvester, tmp_path, monkeypatch, "--yes")
    err = capsys.readouterr().err
    assert err.count("new host key at") == 1 and harvester[1].fingerprint in err  # one question for one key
    port, key, offered = harvester
    assert known.read_text() == f"[127.0.0.1]:{port} {key.get_name()} {key.get_base64()}\n"
    # Once, to the key confirmed (it lets nobody in), then only HiveOS's public default (the default-login check).
    assert offered[:1] == ["typed-Secret-pw"] and set(offered[1:]) <= {"1"}
    assert "typed-Secret-pw" not in err
