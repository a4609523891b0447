"""Hostile and odd input (issue 18): a fuzz suite of our own, seeded and fast.

Every run goes through ``m2p``'s real entry point (``main``) with real files on disk; what is
checked is m2p's promise for bad input: never an internal error (exit 70), never a hang (each
example has a deadline; every file read is bounded), never a secret in any output, and an error
is one line of at most 300 characters.  The strategies mutate real inventories, schedules, saved
reports, known_hosts files, probe outputs and command lines.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import click.testing
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from miner2provider.cli import main
from miner2provider.core.errors import INTERNAL_ERROR
from miner2provider.detect.facts import ALL_FACTS, FACTS_BY_NAME
from miner2provider.detect.facts.base import Output

HERE = Path(__file__).parent
GOOD_INVENTORY = (HERE / "inventories" / "good.yml").read_text()
SCHEDULE = """\
timezone: Europe/Berlin
policy: lease-first
windows:
  - days: mon-fri
    from: "08:00"
    to: "18:00"
    mode: mine
lease_grace: 2h
min_switch_interval: 10m
"""
# A saved `m2p detect --json` report: rigs whose GPUs are golden nvidia-smi cases, and one failed rig.
REPORT = [{"name": f"rig{i}", "address": f"10.0.0.{i}", "failure": None,
           "facts": {"gpus": json.loads((HERE / "facts" / "gpus" / f"{case}.json").read_text())["expected"],
                     "cuda": "12.4"}}
          for i, case in enumerate(("mixed", "multi-3090", "a5000"), start=1)]
REPORT.append({"name": "dead1", "address": "10.0.0.9", "failure": "timeout", "facts": None})
SECRET = "8675309123"  # the password every secret variable gets; no output may show it
SECRET_VARS = ("ansible_password", "ansible_ssh_pass", "ansible_become_password", "ansible_become_pass")
FUZZ = settings(max_examples=60, derandomize=True, deadline=2000, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def m2p(*argv: str) -> tuple[int, str, str]:
    """``m2p ARGV`` in this process, with its stdout and stderr; the debug log goes to a temp path."""
    runner = click.testing.CliRunner()
    with runner.isolation(env={"M2P_DEBUG_LOG": os.devnull, "M2P_INVENTORY": None}) as streams:
        code = main(list(argv))
        return code, streams[0].getvalue().decode(), streams[1].getvalue().decode()


def keeps_the_promise(code: int, out: str, err: str) -> None:
    assert code != INTERNAL_ERROR, err
    assert SECRET not in out + err
    lines = err.splitlines()
    assert all(len(line) <= 300 for line in lines), max(lines, key=len)
    errors = [line for line in lines if line.startswith("m2p: error")]
    if code not in (0, 1) and not errors:
        # Failed rigs (10 + N) are reported in the command's own output; every other failure says why.
        assert code >= 10, (code, err)
    if len(errors) > 1:  # inventory check says every mistake on its own line, then how many
        assert re.fullmatch(r"m2p: error: \d+ mistakes in .*, each above", errors[-1]), err


# -- mutations of real files --------------------------------------------------------------

NUMBER = "4242424242"  # odd values for variables that are no secret (messages may quote those)
ODD_SCALARS = st.sampled_from([
    NUMBER, f"{NUMBER}.5", f"[{NUMBER}]", f"{{a: {NUMBER}}}", f"!!int {NUMBER}x", f"!!float {NUMBER}x",
    "!!int abc", "!!python/object:os.system echo", "!unknown x", "!!binary '@@'", "!!timestamp x", "~", "''",
    "'127.0.0.1; reboot'", "'$(reboot)'", "'a b'", '"a\\nb"', '"\\u202eevil"', "'\\x00'", "9" * 5000,
    "&a x", "*a", "*undefined", "<<: *a", "[[[[[[[[[[", "{", "'", ".nan", "-.inf", "0x1F", "1e999", "'²'",
    "!vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162", "yes", "-1", "65536", "127.0.0.01",
])


def _mutate(text: str, data: st.DataObject) -> str:
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        kind = data.draw(st.integers(0, 5))
        line = lines[i]
        if kind == 0 and ":" in line:  # an odd value
            lines[i] = line.split(":", 1)[0] + ": " + data.draw(ODD_SCALARS)
        elif kind == 1:  # random bytes spliced in
            at = data.draw(st.integers(0, len(line)))
            lines[i] = line[:at] + data.draw(st.text(max_size=8)) + line[at:]
        elif kind == 2:
            del lines[i]
            lines = lines or [""]
        elif kind == 3:  # a line repeated (duplicate keys, duplicate hosts)
            lines.insert(i, line)
        elif kind == 4:  # indentation broken
            lines[i] = " " * data.draw(st.integers(0, 9)) + line.lstrip()
        else:  # a secret variable, of any shape, where the line is
            indent = len(line) - len(line.lstrip())
            lines.insert(i, " " * indent + data.draw(st.sampled_from(SECRET_VARS)) + ": "
                         + data.draw(st.sampled_from([SECRET, f"{SECRET}.0", f"[{SECRET}]", f"{{p: {SECRET}}}",
                                                      f"!!int {SECRET}x", f"'{SECRET}'"])))
    return "\n".join(lines) + "\n"


@FUZZ
@given(st.data())
def test_fuzzed_inventories(tmp_path, data):
    path = tmp_path / "rigs.yml"
    path.write_text(_mutate(GOOD_INVENTORY, data))
    for argv in (("inventory", "check", str(path)), ("inventory", "check", "--json", str(path)),
                 ("inventory", "vars", str(path))):
        code, out, err = m2p(*argv)
        keeps_the_promise(code, out, err)
        if "--json" in argv and code:
            said = json.loads(out)
            assert set(said) - {"problems"} == {"error", "file", "line", "exit_code"}
            assert all(set(p) == {"error", "file", "line"} for p in said.get("problems", [])), said


@FUZZ
@given(st.data())
def test_fuzzed_schedules(tmp_path, data):
    path = tmp_path / "sched.yml"
    path.write_text(_mutate(SCHEDULE, data))
    for argv in (("schedule", "check", str(path)),
                 ("schedule", "show", str(path), "--days", "2", "--from", "2026-03-28T00:00+01:00")):
        keeps_the_promise(*m2p(*argv))


ODD_JSON = st.sampled_from([None, True, -1, 2**70, 1.5, "abc", "", "\u202e", "x" * 500, [], {}, [1], {"a": 1},
                            float("nan")])
ADVERTISED = re.compile(r"[A-Za-z0-9/._+ -]{1,100}")  # what a provider attribute or label may hold


@FUZZ
@given(st.data())
def test_fuzzed_reports(tmp_path, data):
    report = json.loads(json.dumps(REPORT))
    for _ in range(data.draw(st.integers(1, 3))):
        entry = data.draw(st.sampled_from(report)) if report else {}
        target = entry
        path = data.draw(st.sampled_from([(), ("facts",), ("facts", "gpus"), ("facts", "gpus", "gpus", 0)]))
        try:
            for step in path:
                target = target[step]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(target, dict) and target:
            target[data.draw(st.sampled_from(sorted(target)))] = data.draw(ODD_JSON)
    file = tmp_path / "report.json"
    file.write_text(json.dumps(report))
    code, out, err = m2p("attributes", "--from", str(file), "--json")
    keeps_the_promise(code, out, err)
    if code in (0, 11, 12, 13):
        shown = json.loads(out)
        for attribute in shown["attributes"]:
            assert ADVERTISED.fullmatch(str(attribute["value"])), attribute
        for rig in shown["rigs"].values():
            assert all(ADVERTISED.fullmatch(str(v)) for v in rig["labels"].values()), rig


GOLDEN_OUTPUTS = sorted((HERE / "facts").glob("*/*.json"))


@settings(max_examples=200, derandomize=True, deadline=1000, database=None)
@given(st.sampled_from(GOLDEN_OUTPUTS), st.data())
def test_fuzzed_probe_outputs_never_break_a_parser(case, data):
    """Every fact parses whatever a rig prints: golden outputs with odd words put in their place."""
    golden = json.loads(case.read_text())
    words = golden["output"].split(" ")
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(words) - 1))
        words[i] = data.draw(st.sampled_from(["N/A", "-", "²", "9" * 5000, "[Not Supported]", "", "\x00", "\n",
                                              "{" * 1000, '{"state": null}', "nan", "-1", "0x", "٣"]))
    fact = FACTS_BY_NAME[case.parent.name]  # the probe's facts and those asked on demand
    fact.parse(Output(" ".join(words), data.draw(st.sampled_from([golden["rc"], 0, 1, 127, -1]))))


@FUZZ
@given(st.lists(st.one_of(st.text(max_size=40), st.binary(max_size=40).map(lambda b: b.decode("latin-1"))),
                max_size=8))
def test_fuzzed_known_hosts_files(tmp_path, lines):
    from miner2provider.detect.ssh import KnownHosts

    path = tmp_path / "known_hosts"
    path.write_bytes("\n".join(["@revoked * ssh-ed25519", "@cert-authority", *lines]).encode("utf-8", "replace"))
    known = KnownHosts()
    known.read(path)  # never raises for what a file can hold
    assert all(len(s) <= 300 for s in known.skipped)


ARGUMENTS = st.sampled_from([
    ["plan", "--batch", "²"], ["plan", "--batch", "9" * 5000], ["plan", "--batch", "0"], ["plan", "--batch", "-1"],
    ["status", "--connect-timeout", "nan"], ["status", "--connect-timeout", "inf"], ["status", "--limit", ","],
    ["status", "--limit", "nope"], ["convert", "--yes", "--limit", ","], ["convert", "--drain", "--drain-timeout", "²"],
    ["convert", "--drain", "--drain-timeout", "99999999999999d"], ["attributes", "--region", "eu\nwest"],
    ["schedule", "apply", "--api-server", "https://a\nb:6443"], ["schedule", "apply", "--api-server", "ftp://x:1"], ["schedule", "apply", "--api-server", "https://x:1/a?b"],
    ["detect", "--forks", "0"], ["detect", "--command-timeout", "-1"],
])


@FUZZ
@given(ARGUMENTS, st.booleans())
def test_fuzzed_arguments(tmp_path, argv, as_json):
    inv = tmp_path / "rigs.yml"
    inv.write_text(GOOD_INVENTORY.replace("keys/farm", str(tmp_path)).replace("m2p_ssh_password_env: RIG_PASS",
                                                                               "ansible_user: x"))
    extra = ["-i", str(inv)] if argv[0] != "attributes" else ["--from", str(tmp_path / "r.json")]
    (tmp_path / "r.json").write_text("[]")
    code, out, err = m2p(*argv, *extra, *(["--json"] if as_json else []))
    keeps_the_promise(code, out, err)
    assert code not in (0,), (argv, out, err)  # every one of these is refused, before any rig is touched
    assert "m2p: error" in err


# -- the classes the issue names, one by one ------------------------------------------------


@pytest.mark.parametrize("var", [*SECRET_VARS, "k3s_agent_token", "timeshare_agent_api_token"])
@pytest.mark.parametrize("shape", [SECRET, f"{SECRET}.5", f"[{SECRET}]", f"{{p: {SECRET}}}", f"!!int {SECRET}x",
                                   f"!!float {SECRET}x", "!vault |\n            $ANSIBLE_VAULT;1.1;AES256\n"
                                   f"            {SECRET}"])
@pytest.mark.parametrize("level", ["host", "group"])
def test_no_secret_value_in_any_message(tmp_path, var, shape, level):
    body = {"host": f"      hosts:\n        rig1:\n          ansible_host: 10.0.0.1\n          {var}: {shape}\n",
            "group": f"      vars:\n        {var}: {shape}\n      hosts:\n        rig1:\n          ansible_host: 10.0.0.1\n"}
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  children:\n    farm:\n" + body[level].replace("      ", "      ", 1))
    code, out, err = m2p("inventory", "check", str(path))
    keeps_the_promise(code, out, err)


def test_alias_bomb_is_refused_quickly(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
              for i in range(1, 10)]
    for name, argv in (("rigs.yml", ("inventory", "check")), ("sched.yml", ("schedule", "check"))):
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n")
        code, out, err = m2p(*argv, str(path))
        assert code in (3, 7) and "aliases expand to over" in err, err


def test_merge_keys_apply_as_in_ansible(tmp_path):
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  children:\n    farm:\n      vars:\n        <<: {ansible_port: 2200, ansible_user: u}\n"
                    "        ansible_user: miner\n      hosts:\n        rig1:\n          <<: &common\n"
                    "            ansible_host: 10.0.0.1\n            ansible_port: 2222\n"
                    "        rig2:\n          <<: *common\n          ansible_host: 10.0.0.2\n")
    code, out, err = m2p("inventory", "check", "--json", str(path))
    assert code == 0, err
    hosts = {h["name"]: h for h in json.loads(out)["hosts"]}
    assert (hosts["rig1"]["port"], hosts["rig1"]["address"], hosts["rig1"]["user"]) == (2222, "10.0.0.1", "miner")
    assert (hosts["rig2"]["port"], hosts["rig2"]["address"]) == (2222, "10.0.0.2")


@pytest.mark.parametrize("content, expected", [
    (b"\xff\xfea\x00l\x00l\x00", "is UTF-16"), (b"all:\n  \xff\n", "not UTF-8 text (byte 0xff)"),
    (b"all:\n  hosts: \x00\n", "NUL byte"), (b"all: " + b"[" * 200 + b"\n", "nested more"),
    ((b"all:\n  vars:\n    ansible_port: !!int abc\n", b"timezone: !!int abc\n"), "does not fit its tag !!int"),
    ((b"all:\n  vars:\n    ansible_port: !!python/object:os.system x\n", b"policy: !!python/name:os.system x\n"),
     "is no tag m2p reads"),
    ((b"all:\n  vars:\n    ansible_port: !custom 22\n", b"policy: !custom fixed\n"), "!custom is no tag m2p reads"),
])
def test_files_that_are_not_what_they_claim(tmp_path, content, expected):
    inventory, schedule = content if isinstance(content, tuple) else (content, content)
    for name, data, argv, code_expected in (("rigs.yml", inventory, ("inventory", "check"), 3),
                                            ("s.yml", schedule, ("schedule", "check"), 7)):
        path = tmp_path / name
        path.write_bytes(data)
        code, out, err = m2p(*argv, str(path))
        keeps_the_promise(code, out, err)
        assert code == code_expected and str(path) in err and expected in err, err


def test_a_fifo_and_a_device_are_refused_not_read(tmp_path):
    fifo = tmp_path / "fifo.yml"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        for argv, code_expected in ((("inventory", "check"), 3), (("schedule", "check"), 7),
                                    (("attributes", "--from"), 2)):
            code, out, err = m2p(*argv, path)
            assert code == code_expected and "not a regular file" in err, err


@pytest.mark.parametrize("entry, expected", [
    ([1], "an entry is an object"), ({"name": None}, "name must be"),
    ({"name": "r", "facts": {"gpus": {"state": "ok", "gpus": [dict(REPORT[0]["facts"]["gpus"]["gpus"][0],
                                                                    memory_mib="24 GB")]}}}, "memory_mib must be"),
    ({"name": "r", "facts": {"gpus": {"state": "ok", "gpus": [dict(REPORT[0]["facts"]["gpus"]["gpus"][0],
                                                                    memory_mib=-1)]}}}, "memory_mib must be"),
    ({"name": "r", "facts": {"cuda": "abc", "gpus": {"state": "ok", "gpus": []}}}, "cuda must be"),
    ({"name": "r", "facts": {"cuda": 12.4, "gpus": {"state": "ok", "gpus": []}}}, "cuda must be"),
])
def test_report_entries_are_checked_and_named_with_their_line(tmp_path, entry, expected):
    path = tmp_path / "report.json"
    path.write_text(json.dumps([REPORT[0], entry], indent=2))
    code, out, err = m2p("attributes", "--from", str(path))
    line = 2 + len(json.dumps(REPORT[0], indent=2).splitlines())  # "[", then the first entry's lines
    assert code == 2 and f"{path}:{line}: rig #2 of the report" in err and expected in err, err


def test_nan_in_a_report_is_refused(tmp_path):
    path = tmp_path / "report.json"
    path.write_text('[{"name": "r", "facts": {"cuda": "12.4", "gpus": {"state": "ok", "gpus": [{"memory_mib": NaN}]}}}]')
    code, out, err = m2p("attributes", "--from", str(path))
    assert code == 2 and "NaN is no number" in err, err


@pytest.mark.parametrize("address", ["10.0.0.1; reboot", "$(reboot)", "a b", "a\nb", "-oProxyCommand=x", "ä.example"])
def test_addresses_must_be_ip_or_dns_names(tmp_path, address):
    path = tmp_path / "rigs.yml"
    path.write_text(f"all:\n  hosts:\n    rig1:\n      ansible_host: {json.dumps(address)}\n")
    code, out, err = m2p("inventory", "check", str(path))
    assert code == 3 and "is not an IP address or a DNS name" in err and f"{path}:4" in err, err
    assert "\n" not in err.rstrip("\n")


def test_spellings_of_one_address_are_one_rig(tmp_path):
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  hosts:\n    a:\n      ansible_host: 127.0.0.1\n    b:\n      ansible_host: 127.0.0.01\n")
    code, out, err = m2p("inventory", "check", str(path))
    assert code == 3 and "one rig listed twice" in err, err


def test_two_rigs_of_one_pooled_farm_cannot_share_a_node_name(tmp_path):
    """One cluster, one node per name: k3s would refuse the second rig, and the dashboard would read one rig's node
    as the other's (its card charts, its mode).  Rigs that are clusters of their own may share one."""
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  children:\n    k3s_server:\n      hosts:\n        a:\n          ansible_host: 10.0.0.1\n"
                    "          k3s_node_name: Worker\n    k3s_agent:\n      hosts:\n        b:\n"
                    "          ansible_host: 10.0.0.2\n          k3s_node_name: worker\n")
    code, out, err = m2p("inventory", "check", str(path))
    assert code == 3 and "same Kubernetes node name 'worker' as 'a'" in err and f"{path}:" in err, err
    alone = tmp_path / "alone.yml"
    alone.write_text("all:\n  hosts:\n    a:\n      ansible_host: 10.0.0.1\n      k3s_node_name: worker\n"
                     "    b:\n      ansible_host: 10.0.0.2\n      k3s_node_name: worker\n")
    code, out, err = m2p("inventory", "check", str(alone))
    assert code == 0, err


@pytest.mark.parametrize("name", ["rig\nnext", "rig\u202e1", "rig 1", "rig\x1b[2J"])
def test_host_names_are_printable(tmp_path, name):
    path = tmp_path / "rigs.yml"
    path.write_text(f"all:\n  hosts:\n    {json.dumps(name)}:\n      ansible_host: 10.0.0.1\n")
    code, out, err = m2p("inventory", "check", str(path))
    assert code == 3 and "spaces, control or invisible characters" in err, err
    assert "\u202e" not in err and "\x1b[2J" not in err and len(err.strip().splitlines()) == 1


def test_plain_text_password_is_warned_and_key_directory_refused(tmp_path):
    path = tmp_path / "rigs.yml"
    path.write_text(f"all:\n  hosts:\n    rig1:\n      ansible_host: 10.0.0.1\n      ansible_password: {SECRET}x\n")
    code, out, err = m2p("inventory", "check", str(path))
    assert code == 0 and f"{path}:5: ansible_password is plain text" in err and "m2p_ssh_password_env" in err
    assert SECRET not in out + err
    path.write_text(f"all:\n  hosts:\n    rig1:\n      ansible_host: 10.0.0.1\n"
                    f"      ansible_ssh_private_key_file: {tmp_path}\n")
    code, out, err = m2p("inventory", "check", str(path))
    assert code == 3 and "is a directory, not a key file" in err


def test_init_into_a_missing_directory(tmp_path):
    code, out, err = m2p("init", str(tmp_path / "missing" / "dir" / "rigs.yml"))
    assert code == 2 and "cannot write" in err and "No such file or directory" in err


def test_json_errors_are_an_object_on_stdout(tmp_path):
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  hosts:\n    rig1:\n      ansible_port: many\n      ansible_host: 10.0.0.1\n")
    code, out, err = m2p("inventory", "check", "--json", str(path))
    assert code == 3 and json.loads(out) == {"error": "ansible_port must be a whole number, found text 'many'",
                                             "file": str(path), "line": 4, "exit_code": 3}


def test_schedule_bounds_and_far_dates(tmp_path):
    path = tmp_path / "s.yml"
    path.write_text(SCHEDULE.replace("min_switch_interval: 10m", "min_switch_interval: 99999999999999d"))
    code, out, err = m2p("schedule", "check", str(path))
    assert code == 7 and f"{path}:9" in err, err
    path.write_text(SCHEDULE.replace("min_switch_interval: 10m", "min_switch_interval: 2d"))
    code, out, err = m2p("schedule", "check", str(path))
    assert code == 7 and "longer than 1d" in err, err
    path.write_text(SCHEDULE)
    code, out, err = m2p("schedule", "show", str(path), "--from", "9999-12-31T23:00+00:00")
    assert code == 2 and "between 1971 and 9000" in err, err


def test_a_window_inside_the_spring_forward_gap_is_warned(tmp_path):
    path = tmp_path / "s.yml"
    path.write_text("timezone: Europe/Berlin\npolicy: lease-first\nwindows:\n  - days: sun\n    from: \"02:10\"\n"
                    "    to: \"02:50\"\n    mode: mine\n")
    code, out, err = m2p("schedule", "check", str(path))
    assert code == 0 and f"{path}:4: this window" in err and "skips when clocks go forward" in err, err
    path.write_text("timezone: Europe/Berlin\npolicy: lease-first\nwindows:\n  - days: sun\n    from: \"01:10\"\n"
                    "    to: \"02:50\"\n    mode: mine\n")
    code, out, err = m2p("schedule", "check", str(path))
    assert code == 0 and "warning" not in err, err


def test_five_thousand_windows_check_and_show_in_linear_time(tmp_path):
    """Not a timing test: the work is counted.  5,000 windows are painted once, not 5,000 x 10,080 times."""
    from miner2provider.timeshare import model

    windows = "".join(f"  - days: mon\n    from: \"{h:02d}:{m:02d}\"\n    to: \"{h:02d}:{m + 1:02d}\"\n    mode: mine\n"
                      for h in range(24) for m in range(0, 58, 2))[: 5000 * 70]
    sched = model.parse(f"timezone: UTC\npolicy: lease-first\nwindows:\n{windows}", "s.yml")
    calls = 0
    original = model.Window.covers

    def counted(self, weekday, minute):
        nonlocal calls
        calls += 1
        return original(self, weekday, minute)

    model.Window.covers = counted
    try:
        path = tmp_path / "s.yml"
        path.write_text(f"timezone: UTC\npolicy: lease-first\nwindows:\n{windows}")
        code, out, err = m2p("schedule", "show", str(path), "--days", "7", "--from", "2026-03-02T00:00+00:00")
    finally:
        model.Window.covers = original
    assert code == 0 and len(sched.windows) > 600
    assert calls < 10, calls  # lookups go through the painted week, not through every window


def test_a_parser_that_raises_fails_only_its_rig(monkeypatch):
    """The fan-out isolates every exception per rig: a fact parser raising on one rig's output (a bug
    m2p does not know yet) turns into that rig's failure with a sentence; the other rigs report."""
    from miner2provider.core.inventory import Host
    from miner2provider.detect import survey as detect_module
    from miner2provider.detect.facts import FACTS_BY_NAME, probe
    from miner2provider.detect.ssh import Result

    def golden(fact):
        case = json.loads(sorted((HERE / "facts" / fact).glob("*.json"))[0].read_text())
        return case["output"], case["rc"]

    def probe_text(gpu_output):
        blocks = []
        for fact in ALL_FACTS:
            output, rc = (gpu_output, 0) if fact.name == "gpus" else golden(fact.name)
            blocks.append(f"{probe.FACT_MARK}{fact.name}\n{output.rstrip(chr(10))}\n{probe.RC_MARK}{rc}")
        return "\n".join(blocks) + "\n"

    real = FACTS_BY_NAME["gpus"].parse

    def fragile(out):
        if "GARBAGE" in out.text:
            raise KeyError("a bug")
        return real(out)

    monkeypatch.setattr(FACTS_BY_NAME["gpus"], "parse", staticmethod(fragile))
    good_row = json.loads((HERE / "facts/gpus/a5000.json").read_text())["output"]
    hosts = [Host(f"rig{i}", f"10.0.0.{i}", 22, "u", None, None, None, ("all",), {}) for i in range(3)]
    reports = [detect_module.report_from(Result(h, probe_text("GARBAGE" if i == 1 else good_row), 0))
               for i, h in enumerate(hosts)]
    assert [r.ok for r in reports] == [True, False, True]
    assert reports[1].error == "m2p cannot read the rig's gpus output (KeyError) on 10.0.0.1"
    assert reports[0].facts is not None and reports[0].facts.gpus.gpus[0].name == "NVIDIA RTX A5000"


def test_a_fifo_as_vault_password_file_is_refused_not_read(tmp_path):
    fifo = tmp_path / "vault-pass"
    os.mkfifo(fifo)
    path = tmp_path / "rigs.yml"
    path.write_text("all:\n  hosts:\n    rig1:\n      ansible_host: 10.0.0.1\n      ansible_password: !vault |\n"
                    "        $ANSIBLE_VAULT;1.1;AES256\n        6162\n")
    code, out, err = m2p("inventory", "check", "--vault-password-file", str(fifo), str(path))
    assert code == 3 and f"{fifo}: the vault password file is not a regular file" in err, err
