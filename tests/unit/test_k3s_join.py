"""How a worker joins k3s (role k3s, tasks agent.yml and join_token.yml): with a one-time bootstrap token its server
makes for it, never a long-lived one.  The role's own expressions, rendered by Ansible's templar, and the token the
stand-in k3s makes as k3s does (its own test: test_standins.py); the run on rigs is test_convert.py's."""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from typing import Any

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from test_standins import k3s_server_dir, run, standin

TASKS = Path(__file__).resolve().parents[2] / "ansible_collections/m2p/rigs/roles/k3s/tasks"
DEFAULTS = TASKS.parent / "defaults/main.yml"
CA = "0f" * 32
BOOTSTRAP = f"K10{CA}::abc123.0123456789abcdef"
AGENT_TOKEN = f"K10{CA}::node:Zq7xwLongLivedAgentSecret"


def task(file: str, name_part: str) -> dict[str, Any]:
    tasks = yaml.safe_load((TASKS / file).read_text())
    return next(t for t in tasks if name_part in t["name"])


def render(expr: str, **variables: Any) -> Any:
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr))


def needs_token(joined: bool, env_file: str | None, given: str = "") -> bool:
    """What agent.yml decides: does this rig get a new one-time join token this run?"""
    expr = task("agent.yml", "needs a new one-time")["ansible.builtin.set_fact"]["k3s_agent_needs_token"]
    env = {"content": base64.b64encode(env_file.encode()).decode()} if env_file is not None else {"failed": True}
    return bool(render(expr, k3s_agent_token=given, k3s_agent_joined={"stat": {"exists": joined}}, k3s_agent_env=env))


def test_a_rig_holding_the_long_lived_agent_token_gets_a_one_time_token_in_its_place():
    """The attack: root on a rig converted before kept the server's agent token, with which it could register new
    nodes for ever.  The next convert replaces it (k3s-agent restarts and goes on with its kubelet certificate)."""
    assert needs_token(joined=True, env_file=f"K3S_TOKEN={AGENT_TOKEN}\n")


def test_a_joined_rig_holding_a_one_time_token_gets_no_new_one_and_a_rig_not_joined_does():
    """A joined rig authenticates with its kubelet's certificate: its expired bootstrap token stays (k3s wants a token
    to start) and no run makes another, so a second convert changes nothing; a rig whose join did not happen in time
    (no kubelet certificate) gets a new one; an owner's token for an outside server is theirs to give."""
    assert not needs_token(joined=True, env_file=f"K3S_TOKEN={BOOTSTRAP}\n")
    assert needs_token(joined=False, env_file=f"K3S_TOKEN={BOOTSTRAP}\n")
    assert needs_token(joined=False, env_file=None)
    assert not needs_token(joined=False, env_file=None, given=AGENT_TOKEN)


def test_the_join_token_is_made_on_the_server_for_authentication_only_and_expires_soon():
    """k3s token create on the rig's server (delegated), usage authentication only, its TTL the role's default of
    minutes, never logged; and the environment file is written only when a token is given or made."""
    made = task("join_token.yml", "Make a one-time join token")
    argv = made["ansible.builtin.command"]["argv"]
    assert argv[1:3] == ["token", "create"] and made["delegate_to"] == "{{ k3s_agent_server_host }}"
    assert argv[argv.index("--ttl") + 1] == "{{ k3s_agent_join_token_ttl }}"
    assert argv[argv.index("--usages") + 1] == "authentication" and argv.count("--usages") == 1
    assert made["no_log"] is True
    ttl = yaml.safe_load(DEFAULTS.read_text())["k3s_agent_join_token_ttl"]
    assert re.fullmatch(r"[1-5]?[0-9]m", ttl), ttl  # under an hour: long enough to start and join
    written = task("agent.yml", "Write the join token")
    assert written["no_log"] is True and written["ansible.builtin.copy"]["mode"] == "0600"
    assert written["when"] == "k3s_agent_token | length > 0 or k3s_agent_needs_token"


def test_the_role_takes_the_token_k3s_token_create_prints_and_nothing_else(tmp_path):
    """The stand-in's token create (as k3s's: K10<CA hash>::<id>.<secret>) passes the role's check and, once in the
    environment file, counts as a one-time token; the server token or the agent token does not pass."""
    server = k3s_server_dir(tmp_path, os.getpid())
    made = run(standin(tmp_path, "k3s", "v1.35.3+k3s1"), "token", "create", "--ttl", "15m", "--usages",
               "authentication", f"--data-dir={server.parent}", env_path="/usr/bin:/bin")
    token = made.stdout.strip()
    check = task("join_token.yml", "Refuse what is not")["ansible.builtin.assert"]["that"]
    for stdout, passes in ((made.stdout, True), (f"K10{CA}::server:abc\n", False), (AGENT_TOKEN, False), ("", False)):
        assert render("{{ " + check + " }}", k3s_agent_new_token={"stdout": stdout}) is passes, stdout
    assert not needs_token(joined=True, env_file=f"K3S_TOKEN={token}\n")


def test_a_rig_that_joined_has_its_one_time_token_deleted_by_id_at_once(tmp_path):
    """Once the agent runs and has its kubelet certificate, its token goes on the server in the same run (k3s token
    delete takes the ID, the part before the dot, never the secret), so a copy of it is dead in seconds, not 15
    minutes; a token the cleaner took already is no failure, any other refusal is."""
    tasks = yaml.safe_load((TASKS / "joined.yml").read_text())
    delete = next(t for t in tasks if t["name"].startswith("Delete its one-time join token"))
    argv = delete["ansible.builtin.command"]["argv"]
    assert argv[1:3] == ["token", "delete"] and delete["delegate_to"] == "{{ k3s_agent_server_host }}"
    assert delete["when"] == "k3s_agent_has_joined.stat.exists"
    assert render(argv[3], k3s_agent_new_token={"stdout": BOOTSTRAP + "\n"}) == "abc123"
    failed = delete["failed_when"]
    for rc, stderr, fails in ((0, "", False), (1, 'secrets "bootstrap-token-abc123" not found', False),
                              (1, "connection refused", True)):
        assert render("{{ " + failed + " }}", k3s_agent_token_deleted={"rc": rc, "stderr": stderr}) is fails
    main = yaml.safe_load((TASKS / "main.yml").read_text())
    include = next(t for t in main if t.get("ansible.builtin.include_tasks") == "joined.yml")
    assert "k3s_role == 'agent'" in include["when"] and "not ansible_check_mode" in include["when"]
    assert main.index(include) > next(i for i, t in enumerate(main) if t["name"].startswith("Check that k3s runs"))
