"""`m2p history --csv [FILE|-]` (issue 57): the sweep keeps the rigs' ledgers, then the CLI writes the books of the
--days window; read back, the file is the rigs' ledger.  The rigs are stand-ins: detect is replaced by reports
whose agents carry a ledger, as the probe reads it (the real probe's SSH is tested in tests/integration)."""

from __future__ import annotations

import csv
import dataclasses
import io
import time
from datetime import datetime

import pytest
import yaml
from test_readiness import facts  # tests/unit is on sys.path (no package)

from miner2provider.cli import main
from miner2provider.dashboard import collect, ledger_csv
from miner2provider.detect.readiness import assess
from miner2provider.detect.report import RigReport
from miner2provider.rigside.ledger import Entry
from miner2provider.rigside.status import AgentStatus

HOUR = 3600.0
ECON = "currency: EUR\nlease_price_per_gpu_hour: {default: 0.20}\nmining_revenue_per_gpu_day: {rtx3090: 2.40}\n"


@pytest.fixture
def farm(tmp_path, monkeypatch):
    """rig01 mined 3 h then was leased 2 h (``=HYPERLINK(...)``: a tenant's pod named to attack the books); rig02
    does not answer this sweep and has no history."""
    hosts = {"rig01": {"ansible_host": "127.0.0.1", "ansible_port": 1}, "rig02": {"ansible_host": "127.0.0.1",
                                                                               "ansible_port": 2}}
    (tmp_path / "rigs.yml").write_text(yaml.safe_dump({"all": {"children": {"farm": {"hosts": hosts}}}}))
    (tmp_path / "econ.yml").write_text(ECON)
    now = time.time()

    def detect(chosen, ssh):
        out = []
        for host in chosen:
            if host.name == "rig02":
                out.append(RigReport(host.name, host.address, None, None, "refused", "connection refused"))
                continue
            f = dataclasses.replace(facts(), agent_status=AgentStatus(True, "leasing"), agent_ledger=(
                Entry(now - 5 * HOUR, "mining", gpus=1),
                Entry(now - 2 * HOUR, "leasing", gpus=1, leases=('=HYPERLINK("http://evil.example")',), leased=1)))
            out.append(RigReport(host.name, host.address, f, assess(f)))
        return out

    monkeypatch.setattr(collect, "detect", detect)
    return ["history", "-i", str(tmp_path / "rigs.yml"), "--db", str(tmp_path / "h.sqlite3")], tmp_path, now


def rows_of(text):
    return list(csv.DictReader(io.StringIO(text, newline="")))


def test_history_csv_writes_the_ledger_of_the_window_to_a_file(farm, capsys):
    args, tmp_path, now = farm
    out = tmp_path / "books.csv"
    assert main([*args, "--days", "2", "--csv", str(out), "--economics", str(tmp_path / "econ.yml")]) == 11  # rig02 failed: 10 + 1
    said = capsys.readouterr()
    assert said.out == "" and f"wrote {out}: 2 rows" in said.err and "rig02: this sweep failed: connection refused" in said.err
    raw = out.read_bytes()
    assert raw.startswith(",".join(ledger_csv.COLUMNS).encode() + b"\r\n") and raw.count(b"\r\n") == 3
    rows = rows_of(raw.decode())
    assert [(r["rig"], r["mode"], r["leases"], r["currency"]) for r in rows] == [
        ("rig01", "mining", "", "EUR"), ("rig01", "leasing", '\'=HYPERLINK("http://evil.example")', "EUR")]
    assert [(datetime.fromisoformat(r["start"]).timestamp(), datetime.fromisoformat(r["end"]).timestamp())
            for r in rows] == [pytest.approx((now - 5 * HOUR, now - 2 * HOUR), abs=1e-3),
                               pytest.approx((now - 2 * HOUR, now), abs=2.0)]  # the last up to the sweep's read
    assert sum(float(r["hours"]) for r in rows) == pytest.approx(5.0, abs=1e-3)
    assert [r["amount"] for r in rows] == ["0.30", "0.40"]  # 3 h x 2.40 / 24; 2 h x 0.20


@pytest.mark.parametrize("flag", [["--csv"], ["--csv", "-"]])
def test_history_csv_without_a_file_prints_only_the_csv(farm, capsys, flag):
    args, _, _ = farm
    assert main([*args, *flag]) == 11
    said = capsys.readouterr()
    rows = rows_of(said.out)
    assert [r["mode"] for r in rows] == ["mining", "leasing"] and {(r["amount"], r["basis"]) for r in rows} == {("", ledger_csv.NO_FILE)}
    assert "hours per mode" not in said.out and "rig02: this sweep failed: connection refused" in said.err


def test_history_without_csv_keeps_its_table(farm, capsys):
    args, _, _ = farm
    assert main([*args]) == 11
    out = capsys.readouterr().out
    assert out.startswith("hours per mode over the last 7 day(s)") and "rig01  leasing 2 h, mining 3 h" in out


@pytest.mark.parametrize("extra, code, said", [
    (["--csv", "--json"], 2, "history takes one of --csv and --json, not both"),
    (["--economics", "ECON"], 2, "--economics values the CSV's hours: give --csv too"),
    (["--csv", "no/such/b.csv"], 2, "cannot write 'no/such/b.csv': No such file or directory"),
    (["--csv", "-", "--economics", "BAD"], 7, "bad.yml:1: currency 12: use a code such as USD"),
    # ATTACK on the owner's own files: `--csv rigs.yml` (meant for -i) wrote the books over the inventory
    (["--csv", "INVENTORY"], 2, "is a file this command reads: name another file (or -) for the CSV"),
    (["--csv", "ECON", "--economics", "ECON"], 2, "is a file this command reads"),
])
def test_history_csv_mistakes_are_one_line(farm, capsys, monkeypatch, extra, code, said):
    args, tmp_path, _ = farm
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.yml").write_text("currency: 12\n")
    swap = {"ECON": str(tmp_path / "econ.yml"), "BAD": str(tmp_path / "bad.yml"), "INVENTORY": "rigs.yml"}
    extra = [swap.get(a, a) for a in extra]
    kept = {name: (tmp_path / name).read_bytes() for name in ("rigs.yml", "econ.yml")}
    assert main([*args, *extra]) == code
    assert {name: (tmp_path / name).read_bytes() for name in kept} == kept  # nothing the command reads is written
    err = capsys.readouterr().err.replace(str(tmp_path), "TMP")
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and said.replace("bad.yml", "TMP/bad.yml") in lines[0], err


def test_history_csv_that_fails_midway_leaves_the_last_books_as_they_were(farm, capsys, monkeypatch):
    """The file is written as its rows come (one rig's ledger at a time) beside itself and put in place whole: a disk
    that fills midway leaves the owner's last books, and no part of the new ones."""
    args, tmp_path, _ = farm
    out = tmp_path / "books.csv"
    out.write_text("the books of last month\n")
    written, rows = [], ledger_csv.rows

    def rows_then_a_full_disk(*rows_args, **kwargs):
        for row in rows(*rows_args, **kwargs):
            written.append(row)
            if len(written) == 2:  # the header and a span written: then the disk is full
                raise OSError(28, "No space left on device")
            yield row

    monkeypatch.setattr("miner2provider.cli.rigs.ledger_csv.rows", rows_then_a_full_disk)
    assert main([*args, "--days", "2", "--csv", str(out)]) == 2
    said = capsys.readouterr().err.splitlines()[-1]
    assert said.startswith("m2p: error: cannot write ") and said.endswith(": No space left on device"), said
    assert out.read_text() == "the books of last month\n" and len(written) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["books.csv", "econ.yml", "h.sqlite3", "rigs.yml"]


def test_history_csv_gives_the_payments_the_dashboards_wallet_reads_kept(farm, capsys):
    """The dashboard's wallet reader keeps each lease's withdrawn amount as its reads see it change (the same history
    file): the CLI's books carry those payments after the spans, dated at the read that saw each, as the download."""
    from miner2provider.dashboard.history import History
    from miner2provider.market.wallet import LeaseRecord

    args, tmp_path, now = farm

    def lease(withdrawn: float) -> LeaseRecord:
        return LeaseRecord("akash1t/77/1/1/akash1p", "akash1t", "ns-elsewhere", "running", "active", "", 5.0,
                           withdrawn, 0.5, "open", None)

    with History(tmp_path / "h.sqlite3") as h:
        h.record_withdrawals(now - 4 * HOUR, [lease(1.0)])
        h.record_withdrawals(now - 1 * HOUR, [lease(2.5)])
    assert main([*args, "--days", "2", "--csv", "-"]) == 11  # rig02 failed
    payments = [r for r in rows_of(capsys.readouterr().out) if r["record"] == "payment"]
    assert [(r["rig"], r["leases"], r["amount"], r["currency"], r["hours"]) for r in payments] == [
        ("", "akash1t/77/1/1/akash1p", "1", "AKT", "2.000000"), ("", "akash1t/77/1/1/akash1p", "1.5", "AKT", "3.000000")]
    assert [datetime.fromisoformat(r["start"]).timestamp() for r in payments] == [
        pytest.approx(now - 4 * HOUR, abs=1e-3), pytest.approx(now - HOUR, abs=1e-3)]


def test_history_csv_writes_through_what_is_no_regular_file_and_keeps_a_files_mode(farm, capsys):
    """A symbolic link stays a link (its file gets the books), a FILE's mode stays, a new file gets the umask's; a
    directory is refused with nothing left beside it."""
    import os
    import stat

    args, tmp_path, _ = farm
    real = tmp_path / "books-2026.csv"
    real.write_text("old\n")
    real.chmod(0o640)
    (tmp_path / "books.csv").symlink_to(real.name)
    assert main([*args, "--days", "2", "--csv", str(tmp_path / "books.csv")]) == 11  # rig02 failed
    assert (tmp_path / "books.csv").is_symlink() and real.read_text().startswith("record,start,end,")
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    umask = os.umask(0o027)
    try:
        assert main([*args, "--days", "2", "--csv", str(tmp_path / "new.csv")]) == 11
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.csv").stat().st_mode) == 0o640
    (tmp_path / "adir").mkdir()
    capsys.readouterr()
    assert main([*args, "--days", "2", "--csv", str(tmp_path / "adir")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")]
