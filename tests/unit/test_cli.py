"""The CLI: exit codes, one-line errors, debug log for bugs, init and inventory check."""

import json
from pathlib import Path

import click
import yaml

from miner2provider import cli
from miner2provider.core import errors, inventory

INVENTORIES = Path(__file__).parent / "inventories"


def run(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_init_writes_a_valid_starter_inventory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "init")
    assert code == 0 and "wrote rigs.yml" in out
    code, out, _ = run(capsys, "inventory", "check", "rigs.yml")
    assert code == 0 and out.startswith("rigs.yml: OK, 2 rigs in 3 groups (all, k3s_agent, k3s_server)")
    # Pooled: the agent joins the server rig (issue 21: the starter inventory shows pooling).
    code, out, _ = run(capsys, "inventory", "vars", "rigs.yml")
    derived = yaml.safe_load(out)["all"]["hosts"]
    assert code == 0 and derived["rig02"]["k3s_agent_server_host"] == "rig01"
    assert derived["rig02"]["k3s_agent_server_url"] == "https://192.168.1.101:6443"
    code, _, err = run(capsys, "init")
    assert code == 2 and "rigs.yml exists; use --force" in err


def test_the_starter_inventory_gives_the_default_marketplaces_reason_to_pool_in_its_own_comment(tmp_path, capsys,
                                                                                              monkeypatch):
    """The marketplace's sentence comes through the seam (Marketplace.pooled_farm), wrapped as the comment around
    it; the template names no marketplace, and a marketplace with no reason leaves no line."""
    import dataclasses
    import textwrap

    from miner2provider import market
    from miner2provider.cli import rigs
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "init")[0] == 0
    written = (tmp_path / "rigs.yml").read_text()
    reason = market.marketplace().pooled_farm
    assert reason and "{pooled_farm}" not in written
    comment = " ".join(line.strip().removeprefix("# ") for line in written.splitlines() if line.startswith("    # "))
    assert reason in comment
    wrapped = textwrap.wrap(reason, width=108, initial_indent=rigs.POOLED_INDENT, subsequent_indent=rigs.POOLED_INDENT)
    assert "\n".join(wrapped) in written and all(len(line) <= 108 for line in wrapped)
    quiet = rigs.starter_inventory(dataclasses.replace(market.marketplace(), pooled_farm=""))
    assert quiet == written.replace("\n".join(wrapped) + "\n", "") and yaml.safe_load(quiet) == yaml.safe_load(written)


def test_inventory_errors_are_one_line_with_file_and_line(capsys):
    path = INVENTORIES / "wrong_type.yml"
    code, out, err = run(capsys, "inventory", "check", str(path))
    assert code == 3
    assert err.strip().splitlines() == [f"m2p: error: {path}:5: ansible_port must be a whole number, "
                                         "found text 'twenty-two'"]


def test_inventory_check_json_never_shows_passwords(capsys, monkeypatch):
    monkeypatch.setenv("RIG_PASS", "pa55word")
    code, out, _ = run(capsys, "inventory", "check", str(INVENTORIES / "good.yml"), "--json")
    assert code == 0
    data = json.loads(out)
    assert [h["name"] for h in data["hosts"]] == ["rig01", "rig02", "gpu-box.example.org"]
    assert data["hosts"][2]["password"] == "set"
    assert "pa55word" not in out
    monkeypatch.delenv("RIG_PASS")
    code, _, err = run(capsys, "inventory", "check", str(INVENTORIES / "good.yml"))
    assert code == 3 and "names $RIG_PASS, which is not set" in err


def test_detect_needs_an_inventory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no rigs.yml here
    monkeypatch.delenv("M2P_INVENTORY", raising=False)
    code, _, err = run(capsys, "detect")
    assert code == 2 and "no inventory: pass -i FILE, set M2P_INVENTORY, or run m2p where rigs.yml is" in err


def test_unexpected_errors_go_to_the_debug_log(tmp_path, capsys, monkeypatch):
    log = tmp_path / "debug.log"
    monkeypatch.setenv("M2P_DEBUG_LOG", str(log))

    def boom(*a, **k):
        raise KeyError("surprise")

    monkeypatch.setattr(inventory, "load", boom)
    code, _, err = run(capsys, "inventory", "check", "x.yml")
    assert code == errors.INTERNAL_ERROR
    assert f"traceback saved to {log}" in err
    assert "Traceback" in log.read_text() and "surprise" in log.read_text()


def test_detect_local_reports_json(capsys):
    code, out, _ = run(capsys, "detect", "--local", "--json")
    assert code == 0
    (report,) = json.loads(out)
    assert report["address"] == "localhost"
    assert report["status"] in {"ready", "ready with warnings", "not ready"}
    assert report["facts"]["python"]["version"]


def test_status_line_of_the_agent():
    from miner2provider.cli.render import agent_line as _agent_line

    agent = {"service": "active", "mode": "leasing", "since": "2026-11-22T21:14:03+00:00",
             "next_change": "2026-11-23T06:00:00+01:00", "schedule": "night-lease", "last_error": ""}
    assert _agent_line(agent) == ("leasing since 2026-11-22T21:14, next change 2026-11-23T06:00:00+01:00 "
                                  "(schedule night-lease)")
    blind = {**agent, "service": "failed", "next_change": "", "last_error": "API: refused"}
    assert click.unstyle(_agent_line(blind)) == ("leasing since 2026-11-22T21:14, no change ahead (schedule night-lease)"
                                                 "; service failed; last error: API: refused")
    assert _agent_line({**agent, "mode": ""}) == "service active, no status yet"
    draining = {**agent, "mode": "draining", "mine_at": "2026-11-23T06:00:00+00:00"}
    assert _agent_line(draining).endswith("(schedule night-lease); mines from 2026-11-23T06:00:00+00:00")
    from miner2provider.rigside.status import agent_status_from

    assert agent_status_from({"schema": 1, "mode": "draining", "mine_at": "2026-11-23T06:00:00+00:00"}).mine_at \
        == "2026-11-23T06:00:00+00:00"
    profit = {**agent, "mode": "idle-mining", "lease_pays": True, "floor_per_hour": 0.187,
              "quote_source": "measured kawpow hashrate of 2 GPUs",
              "measured": {"algo": "kawpow", "mhs": [58.0, 56.5], "watts": [240.0, 240.0]}}
    assert _agent_line(profit) == ("idle-mining since 2026-11-22T21:14, next change 2026-11-23T06:00:00+01:00 "
                                   "(schedule night-lease); profit: offered, floor 0.187/h (measured kawpow hashrate "
                                   "of 2 GPUs); miner kawpow 58 + 56.5 MH/s")
    windowed = {**profit, "reclaim_per_hour": 0.0187}
    assert "floor 0.187/h + 0.0187/h for the reclamation window (measured" in _agent_line(windowed)


def test_docs_exit_code_table_is_the_code_s():
    page = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    table = page.split("## Exit codes\n", 1)[1].strip("\n").split("\n\n", 1)[0]
    rows = [line.split(" | ", 1) for line in table.splitlines() if line.startswith("| `")]
    assert [(code.strip("| `"), meaning.rstrip(" |")) for code, meaning in rows] == errors.exit_codes()


def test_every_exit_code_in_the_table_is_one_a_command_can_return(capsys):
    codes = {c for c, _ in errors.exit_codes()}
    for cls in (errors.UsageError, errors.InventoryError, errors.BundleError,
                errors.ScheduleError, errors.ChangesPending):
        assert str(cls("x").exit_code) in codes
    assert str(errors.HARNESS_EXIT_CODE) in codes  # the sandbox harness's SandboxError (m2p demo)
    assert errors.RigFailures(3, 5).exit_code == 13 and errors.RigFailures(500, 500).exit_code == 99
    # The usage error a command raises on a bad flag value ends as exit 2.
    code, _, err = run(capsys, "convert", "-i", "x.yml", "--batch", "ten")
    assert code == 2 and "--batch 'ten'" in err


def test_pending_changes_are_a_result_not_an_error(tmp_path, capsys, monkeypatch):
    """`m2p plan` with changes to make exits 1 (as diff does) and says so without calling it an error."""
    from miner2provider.cli import fleet as fleet_cli
    from miner2provider.fleet.pipeline import RigOutcome

    inv = tmp_path / "rigs.yml"
    inv.write_text("all:\n  hosts:\n    rig01: {ansible_host: 10.0.0.1}\n")
    monkeypatch.setattr(fleet_cli, "run", lambda *a, **k: [RigOutcome("rig01", "pending", 2, "", ("Install k3s",))])
    code, out, err = run(capsys, "plan", "-i", str(inv))
    assert code == 1 and "~ Install k3s" in out and out.rstrip().endswith("1 rig: 1 pending"), out
    assert err.strip() == "m2p: changes pending on 1 of 1 rig: run `m2p convert`"
