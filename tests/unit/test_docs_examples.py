"""Every example on the user pages (README.md, docs/, docs/commands/) is one m2p takes: each `m2p ...` command
line names a command that exists with options it has, and each YAML block parses and passes the checker of the
file it is part of (an inventory, a schedule, an economics file, a provider file, a playbook), or fails with the
message the page shows next to it.  A page that drifts from the code fails here, at its file:line."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml

from miner2provider.alerts import config as alert_file
from miner2provider.cli import cli, main
from miner2provider.core import collection
from miner2provider.dashboard import api
from miner2provider.dashboard.metrics import metric_names
from miner2provider.market import marketplace

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "commands").glob("*.md"))]
CODE = re.compile(r"```(\w*)\n(.*?)```|`([^`\n]+)`", re.S)
M2P = re.compile(r"^\s*(?:\$ )?(?:sudo )?(?:\.venv/bin/)?m2p(?= |$)")
HELP = "<!-- help:begin"
# What a YAML block is part of: the name the text before it says (the nearest wins), else what its keys say.
FILE_NAMES = {"provider.yml": "provider", "schedule": "schedule", "economics": "economics", "rigs.yml": "inventory",
              "inventory": "inventory", "playbook": "playbook", "alert file": "alerts",
              # Prometheus's own files, for m2p's GET /metrics (docs/metrics.md)
              "prometheus.yml": "prometheus", "rule file": "prometheus rules"}
# The variables the alert file examples name (docs/alerts.md), as the owner would set them.
ALERT_SECRETS = {"M2P_TELEGRAM_TOKEN": "123:example-token", "M2P_SMTP_PASSWORD": "example-password",
                 "M2P_DISCORD_WEBHOOK": "https://discord.example/api/webhooks/1/example-token"}


def shown(page: Path, text: str, at: int) -> str:
    return f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, at) + 1}"


def command_lines() -> Iterator[tuple[str, str]]:
    """(where, line) for every m2p command in a page's code, blocks and inline, but the generated --help."""
    for page in PAGES:
        text = page.read_text()
        for match in CODE.finditer(text):
            if HELP in text[max(0, match.start() - 60):match.start()]:
                continue
            body = match.group(2) if match.group(3) is None else match.group(3)
            for offset, line in enumerate(body.splitlines()):
                if M2P.match(line):
                    where = shown(page, text, match.start())
                    yield f"{where.rsplit(':', 1)[0]}:{int(where.rsplit(':', 1)[1]) + offset + (match.group(3) is None)}", line


def yaml_blocks() -> Iterator[tuple[str, str, str, dict | list]]:
    """(where, kind, the text before it, the parsed block) for every ```yaml block."""
    for page in PAGES:
        text = page.read_text()
        for match in re.finditer(r"```ya?ml\n(.*?)```", text, re.S):
            where = shown(page, text, match.start())
            try:
                doc = yaml.safe_load(match.group(1))
            except yaml.YAMLError as exc:
                raise AssertionError(f"{where}: the example is not YAML: {exc}") from None
            before = text[max(0, match.start() - 400):match.start()]
            yield where, kind_of(before, doc), before, doc


def kind_of(before: str, doc: object) -> str:
    said = max(((before.rfind(name), kind) for name, kind in FILE_NAMES.items() if name in before), default=(-1, ""))
    if isinstance(doc, list):
        return "playbook"
    if isinstance(doc, dict) and "all" in doc:
        return "inventory"
    if isinstance(doc, dict) and all(isinstance(v, dict) and "ansible_host" in v for v in doc.values()):
        return "inventory hosts"
    if isinstance(doc, dict) and {"lease_price_per_gpu_hour", "mining_revenue_per_gpu_day", "gpu_power_watts"} & set(doc):
        return "economics"
    if isinstance(doc, dict) and {"domain", "wallet"} <= set(doc):
        return "provider"
    if isinstance(doc, dict) and "receivers" in doc:
        return "alerts"
    return said[1]


def options_of(command: click.Command, parents: list[click.Command]) -> set[str]:
    return {o for c in (*parents, command) for p in c.params for o in (*p.opts, *p.secondary_opts)}


def check_command(where: str, line: str) -> None:
    words = shlex.split(M2P.sub("m2p", line.split(" #")[0]).replace("...", "X"), posix=True)
    words = words[:next((i for i, w in enumerate(words) if w in {"|", ">", "&&", ";", "2>&1"}), len(words))]
    command: click.Command = cli
    parents: list[click.Command] = []
    rest = words[1:]
    # The groups' own look-up: the root loads each command's module the first time it is asked for (LazyCommands), so
    # its ``commands`` holds only what an earlier test happened to load (this file alone failed on every example).
    while isinstance(command, click.Group) and rest and (found := command.get_command(click.Context(command), rest[0])):
        parents.append(command)
        rest.pop(0)
        command = found
    if isinstance(command, click.Group) and rest and rest[0].isupper():
        return  # a placeholder: `m2p COMMAND ...`
    if isinstance(command, click.Group):
        assert not rest or rest[0].startswith("-"), f"{where}: `{line}`: {rest[0]!r} is not a command of " \
                                                    f"`{' '.join(words[:len(parents) + 1])}`"
    known = options_of(command, parents) | {"--help", "-h"}
    for word in rest:
        if word.startswith("-") and word != "-":
            assert word.split("=", 1)[0] in known, f"{where}: `{line}`: {command.name} has no option {word}"


@pytest.mark.parametrize("where,line", list(command_lines()))
def test_every_command_example_names_a_command_and_its_options(where, line):
    check_command(where, line)


def test_the_command_check_refuses_what_does_not_exist():
    with pytest.raises(AssertionError, match="has no option --colour"):
        check_command("x:1", "m2p detect --colour")
    with pytest.raises(AssertionError, match="'frobnicate' is not a command of `m2p provider`"):
        check_command("x:1", "m2p provider frobnicate")
    check_command("x:1", "m2p provider check -i rigs.yml  # comment --not-an-option")


def starter(*command: str, tmp: Path) -> str:
    target = tmp / f"starter-{command[0]}.yml"
    assert main([*command, str(target)]) == 0
    return target.read_text()


def check_yaml(where: str, kind: str, doc: dict | list, tmp: Path, capsys, inventory: dict | None = None) -> None:
    """``inventory``: the page's last whole inventory before this block, which a fragment of rigs adds to."""
    path = tmp / "example.yml"
    if kind == "playbook":
        assert isinstance(doc, list)
        roles = set(collection.role_names())
        for play in doc:
            for role in play.get("roles", []):
                name = role if isinstance(role, str) else role["role"]
                assert name.removeprefix("m2p.rigs.") in roles, f"{where}: no role {name}"
        return
    if kind == "inventory hosts":  # a fragment: the rigs it adds to the page's inventory
        assert isinstance(doc, dict) and inventory is not None, f"{where}: rigs, but no inventory before them"
        whole = yaml.safe_load(yaml.safe_dump(inventory))
        whole["all"].setdefault("hosts", {}).update(doc)
        doc, kind = whole, "inventory"
    if kind == "inventory":
        path.write_text(yaml.safe_dump(doc))
        code = main(["inventory", "check", str(path)])
    elif kind == "schedule":
        assert isinstance(doc, dict)
        path.write_text(yaml.safe_dump({"timezone": "UTC", "policy": "lease-first", **doc}))
        code = main(["schedule", "check", str(path)])
    elif kind == "economics":
        path.write_text(yaml.safe_dump(doc))
        code = main(["economics", "check", str(path)])
    elif kind == "provider":
        assert isinstance(doc, dict)
        market = marketplace()
        full = {**yaml.safe_load(market.provider_starter()), **doc}
        market.read_provider_file(yaml.safe_dump(full), where)
        return
    elif kind == "alerts":
        alert_file.parse(yaml.safe_dump(doc), where, ALERT_SECRETS)
        return
    elif kind == "prometheus":  # scrapes the dashboard's own route, with a bearer token from a file
        assert isinstance(doc, dict)
        for job in doc["scrape_configs"]:
            assert job["metrics_path"] == "/metrics" and "/metrics" in {route.path for route, _ in api.ROUTES}, where
            assert job["authorization"]["type"] == "Bearer" and job["authorization"]["credentials_file"], where
        return
    elif kind == "prometheus rules":  # its queries name only metrics the dashboard exports
        assert isinstance(doc, dict)
        named = {n for group in doc["groups"] for rule in group["rules"] for n in re.findall(r"\bm2p_[a-z_]+", rule["expr"])}
        assert named and named <= metric_names(), f"{where}: no such metric: {sorted(named - metric_names())}"
        return
    else:
        raise AssertionError(f"{where}: a YAML example of no file m2p reads (say before it which file it is part of)")
    out, err = capsys.readouterr()
    assert code == 0, f"{where}: the {kind} example fails its check:\n{err[-2000:]}"


def test_every_yaml_example_passes_its_checker(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("a key file that is there\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RIG_PW", "not-a-real-password")
    monkeypatch.chdir(tmp_path)
    blocks = list(yaml_blocks())
    assert len(blocks) >= 8, blocks
    last: dict[str, dict] = {}
    for where, kind, _before, doc in blocks:
        page = where.rsplit(":", 1)[0]
        check_yaml(where, kind, doc, tmp_path, capsys, last.get(page))
        if kind == "inventory":
            assert isinstance(doc, dict)
            last[page] = doc


def test_the_yaml_check_fails_a_wrong_example(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AssertionError, match="the schedule example fails its check"):
        check_yaml("x:1", "schedule", {"policy": "lease-first", "hysteresis": 0.05}, tmp_path, capsys)
    with pytest.raises(AssertionError, match="the inventory example fails its check"):
        check_yaml("x:1", "inventory", {"all": {"hosts": {"r1": {"ansible_hots": "10.0.0.1"}}}}, tmp_path, capsys)
    with pytest.raises(AssertionError, match=r"no such metric: \['m2p_gpu_temp'\]"):
        check_yaml("x:1", "prometheus rules", {"groups": [{"rules": [{"expr": "m2p_gpu_temp > 85"}]}]}, tmp_path, capsys)
