"""Secrets never garble or enter a message: a short password (HiveOS's ``1``) is masked only where it stands
alone, an Ansible run gets none of m2p's environment but what ansible and ssh need, and the debug log is
private."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from m2p_sandbox.served import serve_in_background
from miner2provider.core import inventory
from miner2provider.core.inventory import Host, Secret
from miner2provider.detect.ssh import MASK, WHOLE_ONLY, SshOptions, redact, run_one
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


def test_a_run_passes_only_what_ansible_needs_and_what_m2p_and_the_runner_set():
    parent = {"HOME": "/home/op", "LANG": "C.UTF-8", "LC_TIME": "en_GB.UTF-8", "SSH_AUTH_SOCK": "/run/agent",
              "SSH_AGENT_PID": "42", "NO_COLOR": "1", "AKASH_KEY_PASS": "1", "CF_API_TOKEN": "tok",
              "ANSIBLE_BECOME_PASS": "pw", "ANSIBLE_PIPELINING": "True", "RIG_PW": "1", "PATH": "/usr/bin"}
    ours = {"PATH": "/venv/bin:/usr/bin", "ANSIBLE_PIPELINING": "True"}
    built = {**parent, **ours, "ANSIBLE_STDOUT_CALLBACK": "awx_display"}  # as ansible-runner builds it
    env = runner.run_environment(built, parent, ours, hidden={"RIG_PW", "SSH_AGENT_PID"})
    # By name, never by value: NO_COLOR=1 passes beside a hidden password "1"; a hidden name goes even if passed.
    assert env == {"HOME": "/home/op", "LANG": "C.UTF-8", "LC_TIME": "en_GB.UTF-8", "SSH_AUTH_SOCK": "/run/agent",
                   "NO_COLOR": "1", "PATH": "/venv/bin:/usr/bin",
                   "ANSIBLE_PIPELINING": "True",  # m2p's own, though the user's says the same
                   "ANSIBLE_STDOUT_CALLBACK": "awx_display"}


def test_no_playbook_run_sees_a_wallet_passphrase_nor_leaves_it_in_an_artifact(monkeypatch, tmp_path):
    """A real run (ansible-playbook against this machine): whichever command runs it (provider remove, convert,
    revert, schedule apply pass no secret_env), the wallet's passphrase variable set in m2p's environment is not
    in the run's environment, in what its tasks see, nor in any artifact file."""
    passphrase = "Wallet-Pa55phrase-9f3c"
    monkeypatch.setenv("AKASH_KEY_PASS", passphrase)
    monkeypatch.setenv("M2P_DEMO_AKASH_KEY_PASS", passphrase)
    monkeypatch.setenv("LC_MEASUREMENT", "C.UTF-8")
    playbook = tmp_path / "env.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Read the environment a task gets\n      ansible.builtin.command: env\n      register: seen\n"
        "      changed_when: false\n"
        "    - name: Read it as a lookup on the controller\n      ansible.builtin.debug:\n"
        "        msg: \"[{{ lookup('ansible.builtin.env', 'AKASH_KEY_PASS') }}]\"\n"
        "    - name: Say it\n      ansible.builtin.debug:\n        var: seen.stdout_lines\n")
    host = Host("local", "127.0.0.1", 22, None, None, None, None, ("all",),
                {"ansible_connection": "local", "ansible_python_interpreter": sys.executable})
    artifacts = tmp_path / "artifacts"
    events = []
    report = runner.run_playbook(playbook, [host], on_event=events.append, keep_artifacts=artifacts)
    assert report.status == "successful", (report, events)
    assert os.environ["AKASH_KEY_PASS"] == passphrase  # m2p's own environment is left as it was
    files = [path for path in artifacts.rglob("*") if path.is_file()]
    assert files
    for path in files:
        assert passphrase not in path.read_text(errors="replace"), path
    command = json.loads(next(path for path in files if path.name == "command").read_text())
    assert "AKASH_KEY_PASS" not in command["env"] and "M2P_DEMO_AKASH_KEY_PASS" not in command["env"]
    assert command["env"]["LC_MEASUREMENT"] == "C.UTF-8"  # what ansible needs still passes
    stdout = "\n".join(path.read_text(errors="replace") for path in files if path.name == "stdout")
    assert "[]" in stdout and "LC_MEASUREMENT=C.UTF-8" in stdout  # the task ran, and saw no passphrase
    assert "AKASH_KEY_PASS" not in stdout


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


def test_an_http_api_is_refused_everywhere_and_redirects_keep_no_token(monkeypatch, tmp_path, capsys):
    """An http:// API would carry the agents' and the dashboard's tokens in clear: refused by the inventory
    check, `schedule apply --api-server` and `dashboard --kube-api`, even with the switch that once let the
    sandbox's plain-HTTP stand-in through (M2P_STANDIN_PLAIN_HTTP=1, gone: the stand-in speaks TLS)."""
    import http.server

    from miner2provider.cli import app
    from miner2provider.core import checks
    from miner2provider.rigside.kube import ApiError, KubeClient

    monkeypatch.setenv("M2P_STANDIN_PLAIN_HTTP", "1")
    assert checks.is_api_server("https://10.0.0.1:6443")
    for url in ("http://10.0.0.1:6443", "HTTP://10.0.0.1:6443", "http://127.0.0.1:6443/"):
        assert not checks.is_api_server(url), url
    plain = "http://127.0.0.1:6443"
    (tmp_path / "token").write_text("dashboard-token-xyz")
    inv = tmp_path / "rigs.yml"
    inv.write_text(f"all:\n  hosts:\n    rig1:\n      ansible_host: 10.0.0.1\n      m2p_agent_api_server: {plain}\n")
    (tmp_path / "schedule.yml").write_text("timezone: UTC\npolicy: lease-first\n")
    for argv, code, option in (
            (["dashboard", "-i", str(inv), "--kube-api", plain, "--kube-token-file", str(tmp_path / "token")], 2,
             "--kube-api"),
            (["schedule", "apply", "-i", str(inv), str(tmp_path / "schedule.yml"), "--api-server", plain, "--yes"], 2,
             "--api-server"),
            (["inventory", "check", str(inv)], 3, "m2p_agent_api_server")):
        capsys.readouterr()
        assert app.main(argv) == code, argv
        said = capsys.readouterr().err
        assert option in said and "https://" in said, (argv, said)

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
    serve_in_background(server)
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
    from miner2provider.agent.publish import Publisher
    from miner2provider.detect.facts.gpu import Gpu, Gpus
    from miner2provider.market.akash.labels import node_labels
    from miner2provider.rigside.kube import ApiError, KubeClient

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
        assert api.authority is not None  # HTTPS, as kube-apiserver: the client trusts the stand-in's CA
        (tmp_path / "ca.crt").write_bytes(api.authority.pem)
        client = KubeClient(api.url, str(tmp_path / "token"), str(tmp_path / "ca.crt"))
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


@pytest.mark.parametrize(("text", "said"), [
    ("the password is 1.", "the password is ********."),  # the end of a sentence
    ("password 1. Try again", "password ********. Try again"),
    ("1- refused", "********- refused"),  # a dash that joins nothing
    ("pw=1-\n", "pw=********-\n"),
    ("(1).", "(********)."),
])
def test_a_short_secret_before_a_dot_or_dash_that_ends_it_is_still_masked(text, said):
    assert redact(text, [Secret("1")]) == said


def test_a_short_secret_ending_in_punctuation_is_masked_before_a_word():
    # A word character after '!' does not make the secret part of a longer word: that is the secret.
    assert redact("login p4ss!failed", [Secret("p4ss!")]) == "login ********failed"
    assert redact("pw:#1!a", [Secret("#1!")]) == "pw:********a"


_WORDS = st.text(alphabet="abcXYZ019_", min_size=1, max_size=6)
_SECRETS = st.text(alphabet="abcXYZ019_!@#$%.-", min_size=1, max_size=WHOLE_ONLY - 1)
_LEFT = st.sampled_from(["", " ", "password: ", "=", "'", "(", "\n", "pw "])
_RIGHT = st.sampled_from(["", " ", ".", ". Next", "-", "- next", ",", "\n", "'", ")", "!", ".\n", "-\n"])


@settings(max_examples=400, deadline=None)
@given(secret=_SECRETS, left=_LEFT, right=_RIGHT)
def test_a_short_secret_standing_as_itself_is_always_masked(secret, left, right):
    text = left + secret + right
    assume(text.count(secret) == 1)
    assert redact(text, [Secret(secret)]) == left + MASK + right


@settings(max_examples=400, deadline=None)
@given(secret=_WORDS, before=_WORDS, after=_WORDS, joins=st.sampled_from([("", ""), (".", "."), ("-", "-"),
                                                                              (".", ""), ("", "-")]))
def test_a_short_secret_inside_a_longer_word_or_address_is_left_alone(secret, before, after, joins):
    text = f"at {before}{joins[0]}{secret}{joins[1]}{after} now"
    assume(text.count(secret) == 1)
    assert redact(text, [Secret(secret)]) == text
