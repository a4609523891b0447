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


def test_an_http_api_is_refused_outside_the_sandbox_and_redirects_keep_no_token(monkeypatch, tmp_path):
    import http.server
    import threading

    from miner2provider.agent.kube import ApiError, KubeClient
    from miner2provider.core import checks

    monkeypatch.delenv(checks.STANDIN_PLAIN_HTTP)
    assert not checks.is_api_server("http://10.0.0.1:6443") and checks.is_api_server("https://10.0.0.1:6443")
    monkeypatch.setenv(checks.STANDIN_PLAIN_HTTP, "1")
    assert checks.is_api_server("http://10.0.0.1:6443")

    seen = []

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.end_headers()

    server = http.server.HTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "token").write_text("agent-token-xyz")
        client = KubeClient(f"http://127.0.0.1:{server.server_port}", str(tmp_path / "token"))
        with pytest.raises(ApiError, match="HTTP 302"):
            client.node("rig1")
        assert [path for path, _ in seen] == ["/api/v1/nodes/rig1"]  # the redirect was not followed
    finally:
        server.shutdown()


def test_a_100_character_card_name_gives_legal_label_keys_and_the_status_still_updates(tmp_path):
    """A rig reports whatever card name it likes: every label key m2p makes from it stays legal (the
    STAND-IN API validates labels as the real one does), and a label the API refuses does not silence the
    status, which goes in its own patch first."""
    from m2p_sandbox.kube_api import KubeApiStandin, _legal_label
    from miner2provider.agent.kube import ApiError, KubeClient
    from miner2provider.agent.publish import Publisher
    from miner2provider.detect.facts.gpu import Gpu, Gpus
    from miner2provider.market.akash.labels import node_labels

    name = "NVIDIA GeForce " + "RTX Hyper Ultra Edition " * 4
    assert len(name) >= 100
    gpus = Gpus("ok", (Gpu(0, name, "GPU-0", "00000000:01:00.0", "10de", "ffff", "0x0", 24576, "550.54.15"),))
    labels = node_labels(gpus, "12.4")
    assert any(".model." in key for key in labels)
    assert all(_legal_label(key, value) for key, value in labels.items()), labels
    api = KubeApiStandin()
    try:
        api.add_node("rig1", "node-token-" + "z" * 20)
        (tmp_path / "token").write_text("node-token-" + "z" * 20)
        client = KubeClient(api.url, str(tmp_path / "token"))
        publisher = Publisher(tmp_path / "status.json")
        assert publisher.push(client, "rig1", '{"mode": "mining"}', labels)
        assert api.nodes["rig1"]["metadata"]["labels"] == labels
        with pytest.raises(ApiError, match="HTTP 422"):
            publisher.push(client, "rig1", '{"mode": "leasing"}', {**labels, "m2p.io/" + "x" * 100: "1"})
        assert api.nodes["rig1"]["metadata"]["annotations"]["m2p.io/status"] == '{"mode": "leasing"}'
        api.add_node("rig2", "other-" + "q" * 20)
        with pytest.raises(ApiError, match="HTTP 403"):  # another node: neither read nor written
            client.node("rig2")
    finally:
        api.close()
