"""The alert file (miner2provider/alerts/config.py): every mistake is one AlertsFileError at its file:line, a secret
is read only from the variable the file names and never quoted, and `m2p alerts test` reaches every receiver's
stand-in on loopback, end to end, saying ok or why not without a secret."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from m2p_sandbox.alert_receivers import DiscordStandin, SmtpStandin, TelegramStandin, WebhookStandin
from miner2provider.alerts import config
from miner2provider.alerts.receivers import Discord, Telegram, Webhook
from miner2provider.alerts.rules import Rules
from miner2provider.alerts.smtp import Email
from miner2provider.core.errors import AlertsFileError

TOKEN = "7123456789:AAHstandinBotTokenNeverShown_0123456"
PASSWORD = "smtp-password-never-shown-42"
ENV = {"TG": TOKEN, "DISCORD": "https://discord.example/api/webhooks/1/discord-secret-token", "PW": PASSWORD}

GOOD = """\
rules:
  silent_after: 15m
  repeat_every: never
  temperature_limit_c: 83
  miner_grace: 5m
  wallet_low: 25.5
  disable: [lease]
receivers:
  - {name: hook, type: webhook, url: "https://hooks.example.com/m2p"}
  - {name: phone, type: telegram, token_env: TG, chat_id: -1001234, timeout: 5s}
  - {name: team, type: discord, url_env: DISCORD}
  - name: mail
    type: email
    host: smtp.example.com
    username: alerts@example.com
    password_env: PW
    from: alerts@example.com
    to: owner@example.com
"""


def test_a_good_file_reads_into_rules_and_receivers():
    found = config.parse(GOOD, "alerts.yml", ENV)
    assert found.rules == Rules(900, None, 83, 300, 25.5, frozenset({"lease"}))
    hook, phone, team, mail = found.receivers
    assert isinstance(hook, Webhook) and hook.url.reveal() == "https://hooks.example.com/m2p"
    assert isinstance(phone, Telegram) and (phone.token.reveal(), phone.chat_id, phone.timeout_s) == (TOKEN, "-1001234",
                                                                                                       5.0)
    assert isinstance(team, Discord) and team.url.reveal() == ENV["DISCORD"]
    assert isinstance(mail, Email) and (mail.port, mail.starttls, mail.to) == (587, True, ("owner@example.com",))
    assert TOKEN not in repr(found) and PASSWORD not in repr(found)


@pytest.mark.parametrize(("text", "line", "said"), [
    ("receivers: []\n", 1, "receivers is a list of receivers, at least one"),
    ("rules:\n  silent_after: 10\nreceivers: []\n", 2, "silent_after 10: a duration from 1m to 7d"),
    ("rules:\n  repeat_every: 5s\n", 1, "receivers missing"),
    ("rules:\n  temperature: 80\nreceivers: []\n", 2, "unknown rules key 'temperature'"),
    ("rules:\n  disable: [leases]\nreceivers: []\n", 2, "disable is a list of rules: silent, card"),
    ("receivers:\n  - name: a\n    type: pager\n", 3, "a receiver's type is one of webhook, telegram"),
    ("receivers:\n  - {name: a, type: webhook}\n", 2, "a webhook takes url or url_env"),
    ("receivers:\n  - {name: a, type: webhook,\n     url: 'http://hooks.example.com/x'}\n", 3, "url: an https:// URL"),
    ("receivers:\n  - {name: a, type: telegram, chat_id: 1,\n     token: 'x'}\n", 3, "unknown telegram receiver key"),
    ("receivers:\n  - {name: a, type: telegram, chat_id: 1,\n     token_env: UNSET_VAR}\n", 3,
     "token_env: the environment variable UNSET_VAR is not set"),
    ("receivers:\n  - {name: a, type: discord, url_env: DISCORD}\n  - {name: a, type: discord, url_env: DISCORD}\n",
     3, "receiver a is named twice"),
    ("receivers:\n  - name: m\n    type: email\n    host: smtp.example.com\n    starttls: false\n"
     "    password_env: PW\n    from: a@b.example\n    to: c@d.example\n", 6, "a password goes only over STARTTLS"),
    ("receivers:\n  - name: m\n    type: email\n    host: h\n    from: a@b.example\n    to: [nobody]\n", 6,
     "from and to: e-mail addresses"),
    ("receivers:\n  - {name: m, type: email, host: h, port: 70000, from: a@b.example, to: c@d.example}\n", 2,
     "port: a number from 1 to 65535"),
    ("receivers:\n  - {name: a, type: discord, url_env: DISCORD, timeout: 10m}\n", 2, "timeout: at most 120 s"),
    ("receivers:\n  - [a]\n", 2, "a receiver is a mapping"),
    ("receivers: {\n", 2, "YAML syntax error"),
])
def test_each_mistake_is_said_at_its_line(text, line, said):
    with pytest.raises(AlertsFileError) as failed:
        config.parse(text, "alerts.yml", ENV)
    assert failed.value.where == f"alerts.yml:{line}" and failed.value.message.startswith(said), str(failed.value)
    assert failed.value.exit_code == 2


@pytest.mark.parametrize("pasted", [TOKEN, "https://discord.example/api/webhooks/1/discord-secret-token"])
def test_a_secret_pasted_where_its_variables_name_goes_is_refused_without_quoting_it(pasted):
    text = f"receivers:\n  - {{name: a, type: discord, url_env: '{pasted}'}}\n"
    with pytest.raises(AlertsFileError) as failed:
        config.parse(text, "alerts.yml", ENV)
    assert failed.value.where == "alerts.yml:2" and pasted not in str(failed.value)
    assert "the NAME of an environment variable" in str(failed.value)


def test_a_bad_url_in_a_variable_is_said_without_showing_it():
    with pytest.raises(AlertsFileError) as failed:
        config.parse("receivers:\n  - {name: a, type: discord, url_env: DISCORD}\n", "alerts.yml",
                     {"DISCORD": "http://discord.example/api/webhooks/1/secret-tok"})
    assert str(failed.value) == "alerts.yml:2: url_env: an https:// URL (http:// only to this machine)"


@pytest.fixture
def standins():
    bot, team, hook, mail = TelegramStandin(TOKEN), DiscordStandin(), WebhookStandin(), SmtpStandin(password=PASSWORD)
    down = WebhookStandin("status", status=503)
    yield bot, team, hook, mail, down
    for standin in (bot, team, hook, mail, down):
        standin.close()


def m2p(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "miner2provider", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_m2p_alerts_test_reaches_every_receiver_and_says_which_failed_without_a_secret(standins, tmp_path: Path):
    bot, team, hook, mail, down = standins
    path = tmp_path / "alerts.yml"
    path.write_text(f"""\
receivers:
  - {{name: hook, type: webhook, url: "{hook.url}/m2p"}}
  - {{name: phone, type: telegram, token_env: M2P_TG, chat_id: 42, api: "{bot.url}"}}
  - {{name: team, type: discord, url_env: M2P_DISCORD}}
  - {{name: mail, type: email, host: 127.0.0.1, port: {mail.port}, username: alerts@farm.example,
     password_env: M2P_SMTP, from: alerts@farm.example, to: [owner@farm.example]}}
  - {{name: down, type: webhook, url_env: M2P_DOWN, timeout: 3s}}
""")
    down_url = f"{down.url}/hook/down-secret-path"
    env = {"M2P_TG": TOKEN, "M2P_DISCORD": team.webhook_url, "M2P_SMTP": PASSWORD, "M2P_DOWN": down_url,
           "SSL_CERT_FILE": mail.ca_file}
    proc = m2p(["alerts", "test", str(path)], env)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == ["hook (webhook): ok", "phone (telegram): ok", "team (discord): ok",
                                        "mail (email): ok", "down (webhook): failed: HTTP 503"]
    assert proc.stderr.strip() == "m2p: error: 1 of 5 receivers failed"
    assert [m["text"] for m in bot.received] == ["m2p TEST: a test message from m2p: this receiver is reached"]
    assert len(team.received) == len(hook.received) == len(mail.received) == 1 and mail.received[0]["tls"]
    for secret in (TOKEN, PASSWORD, team.token, "down-secret-path"):
        assert secret not in proc.stdout + proc.stderr


def test_m2p_alerts_test_on_a_bad_file_is_one_line_with_file_and_line(tmp_path: Path):
    path = tmp_path / "alerts.yml"
    path.write_text("receivers:\n  - {name: phone, type: telegram, chat_id: 1, token_env: M2P_UNSET_TOKEN}\n")
    proc = m2p(["alerts", "test", str(path)], {})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == (f"m2p: error: {path}:2: token_env: the environment variable M2P_UNSET_TOKEN is "
                                   "not set")


def test_the_dashboard_refuses_a_bad_alert_file_before_it_serves(tmp_path: Path, capsys):
    from miner2provider.cli import main

    (tmp_path / "rigs.yml").write_text("all:\n  hosts:\n    rig01: {ansible_host: 10.0.0.1}\n")
    (tmp_path / "token").write_text("t" * 40 + "\n")
    (tmp_path / "token").chmod(0o600)
    (tmp_path / "alerts.yml").write_text("rules:\n  silent_after: soon\nreceivers: []\n")
    code = main(["dashboard", "-i", str(tmp_path / "rigs.yml"), "--db", str(tmp_path / "h.db"), "--token-file",
                 str(tmp_path / "token"), "--alerts", str(tmp_path / "alerts.yml")])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == (f"m2p: error: {tmp_path}/alerts.yml:2: silent_after 'soon': a duration from "
                                         "1m to 7d (90s, 10m, 1h)")
