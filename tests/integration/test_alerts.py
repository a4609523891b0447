"""Issue 56 end to end on sandbox rigs: a card made hot (the STAND-IN nvidia-smi's row in gpus.json) leaves the
market by the agent's own reading and shows in /metrics, `m2p dashboard --alerts` tells the webhook, Telegram and
SMTP stand-ins once and its recovery once when the card cools, and a rig whose sshd stops is said to be silent."""

from __future__ import annotations

import email
import email.policy
import json
import os
import secrets
import shlex
import subprocess
import time
import urllib.request

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from m2p_sandbox import network
from m2p_sandbox import rig as sandbox
from m2p_sandbox.alert_receivers import SmtpStandin, TelegramStandin, WebhookStandin
from m2p_sandbox.kube_api import KubeApiStandin

from .conftest import M2P, run, ssh
from .test_agent import wait_for
from .test_dashboard import free_port

pytestmark = pytest.mark.integration

HOT_C = 95  # over the role's default limit (85 °C)


def get(port: int, token: str, path: str) -> str:
    """The dashboard's answer at ``path``, asked with its bearer token (as a Prometheus scrape is)."""
    ask = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(ask, timeout=10) as answer:
        return answer.read().decode()


def set_temperature(r: sandbox.Rig, index: int, celsius: int | None) -> None:
    """The stand-in nvidia-smi's card ``index`` reads ``celsius`` (None: its own figure again)."""
    edit = ("import json; p='/etc/m2p-standin/gpus.json'; r=json.load(open(p)); "
            f"gpus = r['gpus'] if isinstance(r, dict) else r; g = gpus[{index}]; "
            + (f"g['temperature.gpu'] = '{celsius}'" if celsius is not None else "g.pop('temperature.gpu', None)")
            + "; json.dump(r, open(p, 'w'))")
    with ssh(r) as client:
        code, out = run(client, "sudo python3 -c " + shlex.quote(edit))
    assert code == 0, out


def said(hook: WebhookStandin, telegram: TelegramStandin, smtp: SmtpStandin, rule: str, rig: str,
         kind: str) -> list[int]:
    """How many messages of ``kind`` (firing, resolved) about ``rule`` on ``rig`` each receiver got."""
    hooks = [m for m in hook.received if m["rule"] == rule and m["rig"] == rig and m["kind"] == kind]
    key = hooks[0]["text"] if hooks else None
    return [len(hooks), sum(1 for m in telegram.received if key is not None and m["text"] == key),
            sum(1 for m in smtp.received if key is not None and key in mail_text(m["data"]))]


def mail_text(data: str) -> str:
    """A mail's body as its reader sees it (a line with "°C" travels encoded)."""
    body = email.message_from_string(data, policy=email.policy.default).get_body(("plain",))
    assert body is not None, data
    return str(body.get_content())


def test_a_hot_card_leaves_the_market_every_receiver_hears_it_once_then_its_recovery_and_a_silent_rig(
        boot_rigs, tmp_path):
    hive, plain = boot_rigs(sandbox.RigSpec("al-hive", "hiveos", ("rtx3090", "rtx3090")),
                            sandbox.RigSpec("al-plain", "plain", ("rtx3060",)))
    api = KubeApiStandin(host=str(network.gateway()))
    agent_token, dashboard_token, bot_token = (secrets.token_urlsafe(24) for _ in range(3))
    api.add_node(hive.name, agent_token, gpus=2)
    ca = tmp_path / "cluster-ca.crt"
    ca.write_bytes(api.authority.pem)
    hosts = {r.name: {"ansible_host": r.address, "ansible_user": r.user, "ansible_ssh_private_key_file": r.key_file}
             for r in (hive, plain)}
    # Cards read every 5 s (every 10 s through the stand-in's nvidia-smi), not every 30 (60): the waits below are
    # the agent's readings, and a test that waits a minute for each spends its worker's time idle.
    hosts[hive.name].update({"m2p_agent_token_env": "AL_AGENT_TOKEN", "m2p_agent_ca_file": str(ca),
                             "m2p_gpu_telemetry_interval": 5})
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (tmp_path / "schedule.yml").write_text("timezone: UTC\npolicy: lease-first\nmin_switch_interval: 0s\n")
    env = {**os.environ, "AL_AGENT_TOKEN": agent_token, "AL_BOT_TOKEN": bot_token}
    common = ["-i", str(inv), "--known-hosts", str(tmp_path / "known_hosts"), "--accept-new"]
    applied = subprocess.run([*M2P, "schedule", "apply", *common, str(tmp_path / "schedule.yml"), "--limit",
                              hive.name, "--api-server", api.url, "--yes"], env=env, capture_output=True, text=True,
                             timeout=600)
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    with ssh(hive) as client:  # the inventory's interval reached the agent
        code, config = run(client, "sudo cat /etc/m2p/agent.json")
    assert code == 0 and float(json.loads(config)["telemetry_interval_s"]) == 5.0, config

    def node() -> dict:
        return api.nodes[hive.name]
    wait_for("offered", lambda: node()["metadata"]["labels"].get("m2p.io/mode") == "idle-mining"
             and not node()["spec"].get("unschedulable"), timeout=60)

    hook, telegram, smtp = WebhookStandin(), TelegramStandin(bot_token), SmtpStandin(tls=False)
    alerts = tmp_path / "alerts.yml"
    alerts.write_text(yaml.safe_dump({
        "rules": {"silent_after": "1m", "repeat_every": "never", "disable": ["lease", "miner", "provider", "wallet"]},
        "receivers": [{"name": "hook", "type": "webhook", "url": hook.url + "/m2p"},
                      {"name": "phone", "type": "telegram", "token_env": "AL_BOT_TOKEN", "chat_id": "-100777",
                       "api": telegram.url},
                      {"name": "mail", "type": "email", "host": "127.0.0.1", "port": smtp.port, "starttls": False,
                       "from": "m2p@farm.example", "to": ["owner@farm.example"]}]}))
    token_file = tmp_path / "dashboard-token"
    token_file.write_text(dashboard_token + "\n")
    token_file.chmod(0o600)
    port = free_port()
    log = open(tmp_path / "dashboard.log", "w")
    server = subprocess.Popen([*M2P, "dashboard", *common, "--port", str(port), "--interval", "10s",
                               "--db", str(tmp_path / "history.sqlite3"), "--alerts", str(alerts),
                               "--token-file", str(token_file)], env=env, stdout=log, stderr=subprocess.STDOUT)

    def swept() -> bool:
        try:
            rigs = json.loads(get(port, dashboard_token, "/api/rigs"))["rigs"]
        except OSError:
            return False
        return len(rigs) == 2 and all(r["seen_at"] for r in rigs)

    try:
        wait_for("the dashboard's first sweep of both rigs", swept, timeout=90)
        # The hot card: the agent reads it within its telemetry interval and takes the rig off the market.
        set_temperature(hive, 1, HOT_C)
        with ssh(plain) as client:  # and a rig that stops answering
            code, out = run(client, "sudo systemctl stop ssh")
        assert code == 0, out
        wait_for("the node off the market", lambda: node()["spec"].get("unschedulable") is True, timeout=120)
        assert node()["metadata"]["labels"].get("m2p.io/mode") == "idle-mining"  # the miner is not blamed: it mines
        wait_for("the hot card said to every receiver",
                 lambda: said(hook, telegram, smtp, "temperature", hive.name, "firing") == [1, 1, 1], timeout=90)
        assert str(HOT_C) in next(m["text"] for m in hook.received if m["rule"] == "temperature")
        # Prometheus reads the same: every card the agent reports, the hot one at its temperature and health.
        families = {f.name: f for f in text_string_to_metric_families(get(port, dashboard_token, "/metrics"))}
        temps = {s.labels["card"]: s.value for s in families["m2p_gpu_temperature_celsius"].samples
                 if s.labels["rig"] == hive.name}
        assert set(temps) == {"0", "1"} and temps["1"] == HOT_C, temps
        assert {(s.labels["card"], s.value) for s in families["m2p_gpu_health"].samples
                if s.labels["rig"] == hive.name and s.labels["health"] == "hot"} == {("0", 0), ("1", 1)}
        assert {s.labels["rig"]: s.value for s in families["m2p_rig_gpus"].samples} == {hive.name: 2, plain.name: 1}
        wait_for("the silent rig said to every receiver",
                 lambda: said(hook, telegram, smtp, "silent", plain.name, "firing") == [1, 1, 1], timeout=150)

        set_temperature(hive, 1, None)
        wait_for("the node back on the market", lambda: not node()["spec"].get("unschedulable"), timeout=120)
        wait_for("the recovery said to every receiver",
                 lambda: said(hook, telegram, smtp, "temperature", hive.name, "resolved") == [1, 1, 1], timeout=90)
        # Once each: nothing said again over further sweeps (repeat_every: never).
        swept_more = len(hook.received)
        time.sleep(25)  # two sweeps and more
        assert said(hook, telegram, smtp, "temperature", hive.name, "firing") == [1, 1, 1]
        assert said(hook, telegram, smtp, "silent", plain.name, "firing") == [1, 1, 1]
        assert len(hook.received) == swept_more, hook.received[swept_more:]
        texts = json.dumps([hook.received, telegram.received, smtp.received])
        assert bot_token not in texts and agent_token not in texts and dashboard_token not in texts
    except AssertionError as exc:
        log.flush()
        raise AssertionError(f"{exc}\ndashboard:\n{(tmp_path / 'dashboard.log').read_text()[-4000:]}\n"
                             f"webhook: {hook.received}") from None
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
        for standin in (hook, telegram, smtp, api):
            standin.close()
