"""`m2p keys install` (fleet/keys.py): the line it adds, the script that adds it (run here by sh, in a scratch
home, as the rig's shell runs it), and where the password comes from.  Over SSH on a sandbox HiveOS rig:
tests/integration/test_detect.py (password_rig_gets_a_key)."""

from __future__ import annotations

import os
import subprocess

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
