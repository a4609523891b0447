"""Secrets never garble or enter a message: a short password (HiveOS's ``1``) is masked only where it stands
alone, the environment is filtered by the names the inventory gives, and the debug log is private."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from miner2provider.core import inventory
from miner2provider.core.inventory import Secret
from miner2provider.detect.ssh import SshOptions, redact, run_one
from miner2provider.fleet import runner


def test_a_short_secret_is_masked_as_a_whole_word_only():
    one, long = Secret("1"), Secret("Sup3r-Secret")
    assert redact("10.0.0.1:22 refused, password 1 tried", [one]) == "10.0.0.1:22 refused, password ******** tried"
    assert redact("user=1 rig-1 1.5 x1", [one]) == "user=******** rig-1 1.5 x1"
    assert redact("pw Sup3r-Secret; tokenSup3r-Secretx", [long, None]) == "pw ********; token********x"


def test_detect_with_password_1_keeps_the_address_and_never_says_the_password(tmp_path):
    with socket.socket() as closed:  # a port nobody listens on: refused at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    (tmp_path / "rigs.yml").write_text(f"all:\n  hosts:\n    rig1: {{ansible_host: 127.0.0.1, ansible_port: {port}, "
                                       "ansible_user: user, m2p_ssh_password_env: RIG_PW}\n")
    host, = inventory.load(tmp_path / "rigs.yml", environ={"RIG_PW": "1"}).hosts
    result = run_one(host, "true", SshOptions(known_hosts=tmp_path / "kh", connect_timeout=2))
    assert result.error == f"connection refused on 127.0.0.1:{port}: is sshd running, and is the port right?"
    warning, = result.warnings
    assert "user/1" not in warning and "default password" in warning


def test_the_environment_ansible_sees_loses_only_the_named_secrets(monkeypatch, tmp_path):
    (tmp_path / "rigs.yml").write_text("all:\n  hosts:\n    rig1: {ansible_host: 10.0.0.1, m2p_ssh_password_env: RIG_PW}\n")
    monkeypatch.setenv("RIG_PW", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    hosts = inventory.load(tmp_path / "rigs.yml").hosts
    names = {str(h.var(k)) for h in hosts for k in runner.SECRET_ENV_SETTINGS if h.var(k)}
    with runner._environ_without(names):
        assert "RIG_PW" not in os.environ and os.environ["NO_COLOR"] == "1"
    assert os.environ["RIG_PW"] == "1"


def test_the_debug_log_is_private_and_masks_secrets(tmp_path, monkeypatch, capsys):
    from miner2provider.cli import app

    log = tmp_path / "cache" / "m2p" / "debug.log"
    monkeypatch.setenv("M2P_DEBUG_LOG", str(log))
    Secret("hunter2-Sup3r")

    def boom(*args, **kwargs):
        raise RuntimeError("pool password hunter2-Sup3r rejected")
    monkeypatch.setattr(app.cli, "main", boom)
    assert app.main(["detect"]) == 70
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and stat.S_IMODE(log.parent.stat().st_mode) == 0o700
    assert "hunter2-Sup3r" not in log.read_text() and "pool password ******** rejected" in log.read_text()
    assert "hunter2" not in capsys.readouterr().err or pytest.fail("the terminal line quoted the secret")
