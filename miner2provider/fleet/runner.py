"""Run playbooks on rigs with ansible-runner: private 0700 data dir, no secrets on disk or argv.

- A fresh ``private_data_dir`` (mkdtemp: 0700) per run, removed afterwards.
- Secrets (SSH and sudo passwords, k3s join tokens) are never in extravars (with
  ``suppress_env_files`` ansible-runner puts those in argv, visible in ``ps``) nor in the
  environment (ansible-runner writes the whole environment to ``artifacts/<id>/command``).
  Each run makes a one-time vault key, writes every secret vault-encrypted into the
  generated inventory, and has ansible-runner type the key at ansible's
  ``--ask-vault-pass`` prompt: with ``suppress_env_files`` its ``passwords`` stay in memory.
  So no secret is on disk, in argv, in the environment, or in events.
- Default-deny environment: of this process's environment a run gets only what ansible and ssh need
  (``PASSED``: home, locale, temp folder, ssh-agent ...), m2p's own ANSIBLE_* settings and what
  ansible-runner adds.  Any variable that holds a secret (a provider's wallet passphrase, the one its
  provider file's ``passphrase_env`` names; ``m2p_ssh_password_env``'s ...) is left out whoever runs the playbook
  (``provider apply|remove``, convert, revert, schedule apply, join, remove), whether or not the
  caller knows its name.  The environment is filtered in the run's own configuration, never by
  changing this process's.
- Mitogen for Ansible's strategy (``strategy_settings``) by default: one Python interpreter per rig for the run.
- Progress comes from runner events (``on_event``), the report from the run's recap event, never
  from scraping stdout.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ansible_runner.interface
import yaml

from miner2provider.core import collection
from miner2provider.core.errors import UsageError
from miner2provider.core.inventory import PROXY_JUMP, SYSTEM_PYTHON, Host, python_of, vault_lib


@dataclass(frozen=True)
class Event:
    """One step of progress, as the CLI shows it."""

    kind: str  # task | ok | changed | failed | unreachable | skipped
    host: str
    task: str
    message: str = ""


@dataclass(frozen=True)
class HostStats:
    ok: int = 0
    changed: int = 0
    failures: int = 0
    unreachable: int = 0
    skipped: int = 0


@dataclass(frozen=True)
class RunReport:
    status: str  # successful | failed | timeout | canceled
    rc: int
    hosts: dict[str, HostStats]
    failures: dict[str, str] = field(default_factory=dict)  # host -> first failure message
    changed_tasks: dict[str, list[str]] = field(default_factory=dict)  # host -> tasks that changed (or would)
    error: str = ""  # the end of ansible's output when the run failed before reaching rigs
    # host -> what the playbook asks to be said beside its outcome: each fact a task sets named <role>_outcome_warning
    # (ansible-lint wants a role's prefix), such as role k3s's "lease pods on rig1 can reach 169.254.0.0/16"
    warnings: dict[str, list[str]] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(s.changed for s in self.hosts.values())


_KINDS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


OUTCOME_WARNING = "_outcome_warning"  # a fact <role>_outcome_warning: said beside the outcome (RunReport)
CONTROL_NODES = "m2p_control_nodes"  # hosts with m2p_control_node: true (k3s servers without GPUs)

# ServerAlive: a connection that drops mid-play (flaky farm networks) fails its rig within 30 s instead of stalling the
# run until TCP gives up (many minutes).
SSH_ALIVE_INTERVAL_S = 10
SSH_ALIVE_COUNT = 3


def build_inventory(hosts: list[Host], vault_key: str,
                    role_vars: Mapping[str, Mapping[str, Any]] | None = None, known_hosts: Path | None = None,
                    secret_vars: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """The inventory as YAML text: each host's inventory variables, then the role variables m2p
    derived for it (role_vars.py), then ``secret_vars`` (host -> variable -> secret text, such as a
    provider's wallet Secret); every secret in it is a ``!vault`` value under ``vault_key``."""
    vault = vault_lib(vault_key.encode())
    hostvars: dict[str, dict[str, Any]] = {}
    # Always there (empty when no rig is one), so `all:!m2p_control_nodes` never names an unknown group.
    children: dict[str, dict[str, Any]] = {CONTROL_NODES: {}}
    for index, host in enumerate(hosts):
        hv: dict[str, Any] = dict(host.vars)
        hv.update((role_vars or {}).get(host.name, {}))
        hv.update({"ansible_host": host.address, "ansible_port": host.port})
        # Named for every rig, never discovered: Mitogen's strategy gives a task delegated to another rig (an
        # agent's join token, made on its server) the discovered interpreter of the rig the task is for
        # (ansible_mitogen/transport_config.py, run_interpreter_discovery_if_necessary: the task's own facts), so
        # a python3.11 agent ran /usr/bin/python3.11 on a python3.8 HiveOS server, which has none.
        # An inventory's own ansible_python_interpreter stands.
        hv.setdefault("ansible_python_interpreter", python_of(hv) or SYSTEM_PYTHON)
        # A connection of its own per rig: Ansible names its SSH master by address, port and user only, so two
        # rigs with one private address behind different jump hosts (or sites) would share the first one's
        # connection, and the second rig's play would run on the first rig.
        hv["ansible_control_path"] = f"%(directory)s/{index}"
        if host.user:
            hv["ansible_user"] = host.user
        if host.key_file:
            hv["ansible_ssh_private_key_file"] = host.key_file
        if host.jump is not None:
            hv["ansible_ssh_common_args"] = _through_jump(host, known_hosts)
        for var, secret in host.secrets().items():
            hv[var] = _Vaulted(vault.encrypt(secret.reveal()).decode())
        for var, text in (secret_vars or {}).get(host.name, {}).items():
            hv[var] = _Vaulted(vault.encrypt(text).decode())
        hostvars[host.name] = hv
        for group in host.groups:
            if group != "all":
                children.setdefault(group, {"hosts": {}})["hosts"][host.name] = None
        if host.control_node:  # the plays that install the GPU stack leave this group out
            children[CONTROL_NODES].setdefault("hosts", {})[host.name] = None
    # Mitogen's ssh puts its own keepalive (30 s x 10) before ANSIBLE_SSH_ARGS, and ssh keeps an option's first value:
    # the same bound as Ansible's own ssh gets (run_playbook's ssh_args), as Mitogen's variables.
    keepalive = {"mitogen_ssh_keepalive_interval": SSH_ALIVE_INTERVAL_S, "mitogen_ssh_keepalive_count": SSH_ALIVE_COUNT}
    return yaml.dump({"all": {"vars": keepalive, "hosts": hostvars, "children": children}}, Dumper=_Dumper,
                     sort_keys=False)


def _through_jump(host: Host, known_hosts: Path | None) -> str:
    """The rig's ssh arguments with a ProxyCommand through its jump host, the jump host's key
    checked against m2p's known_hosts as the rig's is (ProxyJump's inner ssh would not get
    UserKnownHostsFile from the command line, only from a config file)."""
    jump = host.jump
    assert jump is not None
    inner = ["ssh", "-W", "%h:%p", "-p", str(jump.port), "-o", "BatchMode=yes"]
    if known_hosts is not None:
        inner += ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes"]
    if jump.key_file:
        inner += ["-i", jump.key_file]
    if jump.user:
        inner += ["-l", jump.user]
    inner.append(jump.address)
    own = PROXY_JUMP.sub("", str(host.var("ansible_ssh_common_args") or "")).strip()
    return " ".join(part for part in (own, f'-o ProxyCommand="{shlex.join(inner)}"') if part)


class _Vaulted(str):
    pass


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Vaulted, lambda d, v: d.represent_scalar("!vault", str(v), style="|"))


# Mitogen for Ansible (mitogen-hq/mitogen, BSD-3-Clause; its strategy plugin, ansible_mitogen/plugins/strategy):
# one Python interpreter per rig for the whole run, which keeps the modules' code it was sent, instead of a new
# interpreter per task that unpacks the module and compiles Ansible's module_utils again (~0.2 CPU-s of a rig per
# task, two fifths of the test suite's CPU: a rig's weak CPU pays it on every task).  The same farm converted both
# ways (benchmarks/convert_tasks.py; docs/benchmarks.md): half the machine's CPU, 1.7x faster.  Ansible's own
# linear strategy stays one setting away (STRATEGY_ENV=linear) for a rig Mitogen cannot drive.
STRATEGY_ENV = "M2P_ANSIBLE_STRATEGY"
STRATEGIES = ("mitogen_linear", "linear")


def strategy_settings(choice: str) -> dict[str, str]:
    """The ANSIBLE_* settings of ``choice`` (STRATEGY_ENV's value; "" is the default, mitogen_linear)."""
    choice = choice.strip() or STRATEGIES[0]
    if choice not in STRATEGIES:
        raise UsageError(f"{STRATEGY_ENV}={choice!r}: say one of {', '.join(STRATEGIES)}")
    if choice == "linear":
        return {"ANSIBLE_STRATEGY": "linear"}
    found = importlib.util.find_spec("ansible_mitogen")
    if found is None or found.origin is None:
        raise UsageError(f"Mitogen for Ansible is not installed beside m2p (pip install mitogen), or set "
                         f"{STRATEGY_ENV}=linear")
    plugins = Path(found.origin).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": choice}


def run_playbook(
    playbook: Path,
    hosts: list[Host],
    extravars: dict[str, Any] | None = None,
    *,
    role_vars: Mapping[str, Mapping[str, Any]] | None = None,
    check: bool = False,
    diff: bool = False,
    forks: int = 32,
    known_hosts: Path | None = None,
    on_event: Callable[[Event], None] | None = None,
    keep_artifacts: Path | None = None,
    limit: list[str] | None = None,
    secret_vars: Mapping[str, Mapping[str, str]] | None = None,
    secret_env: Iterable[str] = (),
) -> RunReport:
    """Run ``playbook`` on ``limit`` (default: every host) of ``hosts``, the whole inventory (a rig's
    play may read another's variables or delegate to it, e.g. an agent reads its server's token);
    ``keep_artifacts`` copies runner's artifacts there (for audits); ``secret_env``: environment
    variables known to hold a secret (a provider's passphrase variable), never passed even if named in
    ``PASSED`` (the run passes none of this process's variables but those anyway)."""
    vault_key = secrets.token_urlsafe(32)
    inventory = build_inventory(hosts, vault_key, role_vars, known_hosts, secret_vars)
    ssh_args = ["-o ControlMaster=auto", "-o ControlPersist=60s", f"-o ServerAliveInterval={SSH_ALIVE_INTERVAL_S}",
                f"-o ServerAliveCountMax={SSH_ALIVE_COUNT}"]
    private = Path(tempfile.mkdtemp(prefix="m2p-run-"))  # 0700
    if known_hosts is not None:
        ssh_args += [f"-o UserKnownHostsFile={known_hosts}", "-o StrictHostKeyChecking=yes"]
    env = {
        # m2p's collection first: the one installed with this m2p, not another copy on the machine.
        "ANSIBLE_COLLECTIONS_PATH": str(collection.collections_path()),
        "ANSIBLE_PIPELINING": "True",  # one SSH exec per task instead of five (Ansible's own strategy)
        **strategy_settings(os.environ.get(STRATEGY_ENV, "")),
        "ANSIBLE_INJECT_FACT_VARS": "False",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_FORCE_COLOR": "False",
        "ANSIBLE_SSH_ARGS": " ".join(ssh_args),
        # This run's SSH masters, in this run's own folder: another run's (an `m2p join` at another site a
        # minute ago, to the same 192.168.1.2) is never reused.
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(private / "cp"),
        # ansible-playbook beside this Python first (m2p run as .venv/bin/python without the venv on PATH).
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)]),
    }
    cmdline = " ".join(["--ask-vault-pass", *(part for part, on in (("--check", check), ("--diff", diff)) if on)])
    failures: dict[str, str] = {}
    changed_tasks: dict[str, list[str]] = {}
    warnings: dict[str, list[str]] = {}
    # The run's recap (playbook_on_stats), kept as it passes: ansible-runner's own `Runner.stats` reads every job
    # event of the run back from the artifacts folder to find it, ~2,000 JSON files after a convert.
    stats: dict[str, Any] = {}

    def handle(event: dict[str, Any]) -> bool:
        data = event.get("event_data", {})
        host, task = data.get("host", ""), data.get("task", "")
        name = event.get("event", "")
        if name == "playbook_on_stats":
            stats.update(data)
        elif name == "playbook_on_task_start":
            _emit(on_event, Event("task", "", task))
        elif name in _KINDS:
            kind = _KINDS[name]
            res = data.get("res", {}) if isinstance(data.get("res"), dict) else {}
            if kind == "ok" and res.get("changed"):
                kind = "changed"
                changed_tasks.setdefault(host, []).append(task)
            facts = res.get("ansible_facts") if kind == "ok" else None
            for key, said in sorted(facts.items() if isinstance(facts, dict) else ()):
                if key.endswith(OUTCOME_WARNING) and said:
                    warnings.setdefault(host, []).append(" ".join(str(said).split()))
            message = str(res.get("msg", "")) if kind in {"failed", "unreachable"} else ""
            if kind in {"failed", "unreachable"} and not data.get("ignore_errors"):
                # The last one: a rescue block's own failure sums up the step that failed before it.
                failures[host] = f"{task}: {message}".strip(": ")
            _emit(on_event, Event(kind, host, task, message))
        return True

    hidden = {str(h.var(key)) for h in hosts for key in SECRET_ENV_SETTINGS if h.var(key)} | set(secret_env)
    try:
        parent = dict(os.environ)
        runner = ansible_runner.interface.init_runner(
            private_data_dir=str(private),
            playbook=str(playbook),
            inventory=inventory,
            extravars=extravars or {},
            envvars=env,
            suppress_env_files=True,
            passwords={r"^Vault password:\s*?$": vault_key},  # typed at the prompt, kept in memory
            cmdline=cmdline,
            forks=forks,
            limit=",".join(limit) if limit else None,
            quiet=True,
            event_handler=handle,
        )
        # Before it starts: the run's environment is what the command artifact records and ansible-playbook gets.
        runner.config.env = run_environment(runner.config.env, parent, env, hidden)
        runner.run()
        hosts_stats = {
            h.name: HostStats(
                ok=stats.get("ok", {}).get(h.name, 0),
                changed=stats.get("changed", {}).get(h.name, 0),
                failures=stats.get("failures", {}).get(h.name, 0),
                unreachable=stats.get("dark", {}).get(h.name, 0),
                skipped=stats.get("skipped", {}).get(h.name, 0),
            )
            for h in hosts if not limit or h.name in limit
        }
        error = ""
        if runner.rc != 0 and not any(s.ok for s in hosts_stats.values()):
            error = ansible_error(runner.stdout.read())
        report = RunReport(runner.status, runner.rc, hosts_stats, failures, changed_tasks, error, warnings)
        if keep_artifacts is not None:
            # Not the SSH masters' sockets (cp/): they are no artifact, and a socket cannot be copied.
            shutil.copytree(private, keep_artifacts, dirs_exist_ok=True, ignore=shutil.ignore_patterns("cp"))
        return report
    finally:
        shutil.rmtree(private, ignore_errors=True)


# The inventory settings that name an environment variable holding a secret.
SECRET_ENV_SETTINGS = ("m2p_ssh_password_env", "m2p_become_password_env", "m2p_k3s_token_env", "m2p_agent_token_env")
# The variables of m2p's own environment a run may see: what ansible and ssh need (HOME for ~/.ansible and
# ~/.ssh, the locale ansible insists be UTF-8, the temp folder, the ssh-agent's socket), the time zone, Python's
# paths (m2p's plugins import m2p), and nothing else.  A variable not named here is no run's business: a wallet
# passphrase (the provider file's passphrase_env), a cloud token, the user's own ANSIBLE_* settings
# (ANSIBLE_BECOME_PASS among them).
PASSED = frozenset({"HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP",
                    "SSH_AUTH_SOCK", "SSH_AGENT_PID", "PYTHONPATH", "PYTHONTZPATH", "VIRTUAL_ENV", "NO_COLOR"})
PASSED_PREFIXES = ("LC_", "XDG_")  # the locale's parts; the user's folders (m2p's cache lies in XDG_CACHE_HOME)


def run_environment(built: Mapping[str, str], parent: Mapping[str, str], ours: Mapping[str, str],
                    hidden: Iterable[str] = ()) -> dict[str, str]:
    """The environment a run gets, from the one ansible-runner ``built`` (a copy of ``parent``, this process's
    environment, with ``ours`` and its own settings over it): of ``parent``'s variables only the ``PASSED`` ones,
    then everything m2p and ansible-runner set; never one of ``hidden`` (named as holding a secret), even a
    passed one."""
    never = set(hidden)

    def kept(name: str, value: str) -> bool:
        if name in never:
            return False
        if name in ours or parent.get(name) != value:  # set by m2p, or by ansible-runner
            return True
        return name in PASSED or name.startswith(PASSED_PREFIXES)

    return {name: value for name, value in built.items() if kept(name, value)}


def _emit(on_event: Callable[[Event], None] | None, event: Event) -> None:
    if on_event is not None:
        on_event(event)


def ansible_error(output: str) -> str:
    """Ansible's own error line and where it points (``Origin: file:line:col``), e.g. a YAML mistake."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    first = next((line for line in lines if line.startswith(("[ERROR]", "ERROR!"))), "")
    origin = next((line for line in lines if line.startswith("Origin:")), "")
    if first:
        return (first + (f" ({origin})" if origin else ""))[:500]
    return " / ".join(lines[-3:])[-500:]
