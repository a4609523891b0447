"""docs/: a page per command whose --help block is the command's own, the mining-OS table from the
records, and links that lead somewhere.  scripts/docs rewrites the generated parts."""

import re
from pathlib import Path

import pytest

from miner2provider.cli import docs

ROOT = Path(__file__).resolve().parents[2]
PAGES = ROOT / "docs" / "commands"


@pytest.mark.parametrize("path", sorted(docs.commands()))
def test_every_command_has_a_page_with_its_current_help(path):
    page = PAGES / docs.page_name(path)
    assert page.exists(), f"{page} is missing: run scripts/docs"
    text = page.read_text()
    assert docs.help_block(path) in text, f"{page}'s --help block is stale: run scripts/docs"
    assert f"Usage: {path} " in text


def test_no_page_for_a_command_that_is_gone():
    assert {p.name for p in PAGES.glob("*.md")} == {docs.page_name(p) for p in docs.commands()}


def test_a_stale_help_block_is_replaced_and_a_page_without_one_gets_it():
    stale = f"# `m2p init`\n\n{docs.BEGIN}\nold help\n{docs.END}\n\nProse stays.\n"
    fresh = docs.with_help(stale, "m2p init")
    assert "old help" not in fresh and docs.help_block("m2p init") in fresh and fresh.endswith("Prose stays.\n")
    assert docs.with_help("# `m2p init`\nProse.\n", "m2p init").startswith(f"# `m2p init`\n\n{docs.BEGIN}")


def test_the_mining_os_table_is_the_records():
    text = (ROOT / "docs" / "mining-os.md").read_text()
    assert docs.records_table() in text, "docs/mining-os.md's table is stale: run scripts/docs"
    assert "| HiveOS (`hiveos`) | `/hive/bin` + `/hive/etc/environment` |" in docs.records_table()


def markdown_files():
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file(page):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.relative_to(ROOT)}: link to {target} leads nowhere"


def test_the_readme_is_an_entrance_not_a_manual():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 220
    for page in ("docs/README.md", "docs/layout.md", "docs/commands/convert.md", "docs/errors.md"):
        assert f"({page})" in text, page


def test_the_layout_page_is_the_tree_as_it_is_now():
    from miner2provider.cli import docs_layout

    assert (ROOT / "docs" / "layout.md").read_text() == docs_layout.layout(ROOT), \
        "docs/layout.md is not the tree as it is now: run scripts/docs"


def test_the_layout_takes_each_files_first_sentence(tmp_path):
    from miner2provider.cli import docs_layout

    assert docs_layout.first_sentence("Stage 1, detect: SSH (ssh.py). Then more.\n\nNext.") == "Stage 1, detect: SSH (ssh.py)."
    assert docs_layout.first_sentence("Is a rig ready?  It says so.") == "Is a rig ready?"
    assert docs_layout.first_sentence("No full stop\nover two lines\n\nlater. Text.") == "No full stop over two lines"
    script = tmp_path / "tool"
    script.write_text("#!/usr/bin/env bash\n# Does one thing.  In detail.\n# More.\nset -e\n# not this\n")
    assert docs_layout.header_comment(script) == "Does one thing."


def test_every_role_has_a_readme_from_its_argument_specs():
    from miner2provider.core import collection

    for role in collection.role_names():
        readme = collection.root() / "roles" / role / "README.md"
        assert readme.exists() and readme.read_text() == docs.role_readme(role), f"{readme}: run scripts/docs"
        assert "meta/argument_specs.yml" in readme.read_text()
