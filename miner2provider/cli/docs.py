"""docs/commands/: each command's ``--help`` as its page shows it (scripts/docs writes them; a unit test
keeps them current).  Pure: returns text, writes nothing."""

from __future__ import annotations

import re

import click
import yaml

from miner2provider.core import collection
from miner2provider.detect import os_records

from .app import cli

WIDTH = 100
BEGIN, END = "<!-- help:begin (scripts/docs) -->", "<!-- help:end -->"


def commands(group: click.Group = cli, prefix: str = "m2p") -> dict[str, click.Command]:
    """``m2p schedule apply`` -> its command, for every command and sub-command."""
    found: dict[str, click.Command] = {}
    ctx = click.Context(group, info_name=prefix)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        path = f"{prefix} {name}"
        if isinstance(command, click.Group):
            found.update(commands(command, path))
        else:
            found[path] = command
    return found


def help_text(path: str, command: click.Command) -> str:
    """What ``path --help`` prints at WIDTH columns, through the same chain of contexts as the CLI."""
    ctx = click.Context(cli, info_name="m2p", terminal_width=WIDTH, max_content_width=WIDTH, **cli.context_settings)
    group: click.Command = cli
    for name in path.split()[1:]:
        assert isinstance(group, click.Group)
        found = group.get_command(ctx, name)
        assert found is not None, path
        group = found
        ctx = click.Context(found, info_name=name, parent=ctx, **found.context_settings)
    assert group is command, path
    return command.get_help(ctx)


def page_name(path: str) -> str:
    """``m2p schedule apply`` -> ``schedule-apply.md``."""
    return path.removeprefix("m2p ").replace(" ", "-") + ".md"


def help_block(path: str) -> str:
    return f"{BEGIN}\n```\n$ {path} --help\n{help_text(path, commands()[path])}\n```\n{END}"


def with_help(page: str, path: str) -> str:
    """``page`` with its help block replaced by the current one (added after the title if it has none)."""
    block = help_block(path)
    if BEGIN in page:
        return re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, page, count=1, flags=re.S)
    title, _, rest = page.partition("\n")
    return f"{title}\n\n{block}\n{rest}"


RECORDS_BEGIN, RECORDS_END = "<!-- records:begin (scripts/docs) -->", "<!-- records:end -->"


def records_table() -> str:
    """docs/mining-os.md's table, from the mining-OS records (detect/os_records.py)."""
    rows = ["| OS (kind) | recognised by | version from | miner control | driver upgrade | m2p does |",
            "|---|---|---|---|---|---|"]
    for r in os_records.records():
        seen = [" + ".join(f"`{m}`" for m in r.markers_all)] if r.markers_all else []
        seen += [f"`{m}`" for m in r.markers_any]
        seen += [f"a partition labelled `{r.disk_label}`"] if r.disk_label else []
        seen += [f"its `{r.python_module_globs[0].rsplit('/', 1)[1]}` Python module"] if r.python_module_globs else []
        version = ", ".join(f"the `{s.line}` probe line" for s in r.version_from) or "unknown (gap)"
        does = (f"refused (`{r.refusal.code}`)" if r.refusal else "convert, revert, time-share" if r.has_adapter
                else "convert (k3s without time-share)")
        control = os_records.CONTROLS_SHOWN[r.miner_control]
        rows.append(f"| {r.label} (`{r.kind}`) | {' or '.join(seen)} | {version} | {control} "
                    f"| {r.driver_upgrade} | {does} |")
    rows.append("| plain Ubuntu/Debian | `/etc/os-release` | - | the owner's systemd unit, if any | apt on Ubuntu, "
                "else none | convert, revert, time-share |")
    return f"{RECORDS_BEGIN}\n" + "\n".join(rows) + f"\n{RECORDS_END}"


def with_records(page: str) -> str:
    return re.sub(re.escape(RECORDS_BEGIN) + ".*?" + re.escape(RECORDS_END), lambda _: records_table(), page,
                  count=1, flags=re.S)


def role_readme(role: str) -> str:
    """roles/<role>/README.md: what the role does and its variables, from meta/argument_specs.yml (the
    source of truth: ansible-core validates them there)."""
    specs = yaml.safe_load((collection.root() / "roles" / role / "meta" / "argument_specs.yml").read_text())
    main = specs["argument_specs"]["main"]
    said = [main.get("short_description", "").strip(), *(" ".join(d.split()) for d in main.get("description", []))]
    lines = [f"# m2p.rigs.{role}", "", "<!-- generated from meta/argument_specs.yml by scripts/docs -->", "",
             *[s for s in said if s], "",
             "Variables (types, defaults and the full text: [meta/argument_specs.yml](meta/argument_specs.yml)):", "",
             "| variable | type | default | what it is |", "|---|---|---|---|"]
    for name, option in (main.get("options") or {}).items():
        default = option.get("default", "")
        shown = "" if default in ("", None) else f"`{default}`" if not isinstance(default, (list, dict)) else \
            f"`{yaml.safe_dump(default, default_flow_style=True).strip()}`"
        text = " ".join(str(option.get("description", "")).split()) if isinstance(option.get("description"), str) \
            else " ".join(" ".join(d.split()) for d in option.get("description", []))
        lines.append(f"| `{name}` | {option.get('type', 'str')} | {shown.replace('|', '&#124;')} "
                     f"| {text.replace('|', '&#124;')} |")
    return "\n".join(lines) + "\n"
