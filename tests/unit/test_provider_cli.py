"""`m2p provider check|apply|status|remove`: the mistakes found before any rig is asked are one line each,
a non-zero exit, and nothing else happens (no SSH: the inventories point at a closed loopback port)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml
from test_readiness import facts  # tests/unit is on sys.path (no package)

from miner2provider.cli import main
from miner2provider.cli import provider as provider_cli
from miner2provider.cli import rigs as rigs_cli
from miner2provider.detect.readiness import assess
from miner2provider.detect.report import RigReport
from miner2provider.market.akash import outside
from miner2provider.market.akash.address import encode
from miner2provider.rigside.status import AgentStatus, Lease

PROVIDER = f"""domain: farm.example.com
wallet: {{address: {encode(bytes(20))}, key_file: k.key, passphrase_env: M2P_TEST_PASS}}
email: ops@example.com
ingress_rig: rig01
rpc_node: http://127.0.0.1:1
"""


def write(tmp_path, groups: dict[str, list[str]], provider: str = PROVIDER):
    names = [h for hosts in groups.values() for h in hosts]
    children = {g: {"hosts": {h: {"ansible_host": "127.0.0.1", "ansible_port": 1 + names.index(h)} for h in hosts}}
                for g, hosts in groups.items()}  # closed loopback ports: nothing is ever asked
    (tmp_path / "rigs.yml").write_text(yaml.safe_dump({"all": {"children": children}}))
    (tmp_path / "provider.yml").write_text(provider)
    (tmp_path / "econ.yml").write_text("mining_revenue_per_gpu_day: {default: 0.4}\npower_price_per_kwh: 0.1\n")
    return ["-i", str(tmp_path / "rigs.yml"), "-p", str(tmp_path / "provider.yml")]


NO_SERVER = ({"farm": ["rig01", "rig02"]}, "exactly one k3s server in the inventory (group k3s_server); found none")
TWO_SERVERS = ({"k3s_server": ["rig01", "rig02"]}, "found rig01, rig02")
NO_INGRESS = ({"k3s_server": ["rig02"], "k3s_agent": ["rig03"]}, "ingress_rig 'rig01' is not a rig of the inventory "
                                                                 "(rig02, rig03)")
APPLY = ["apply", "--economics", "ECON", "--charts", "CHARTS", "--yes"]


@pytest.mark.parametrize("command, groups, said", [
    (["check"], *NO_SERVER), (["check"], *TWO_SERVERS), (["check"], *NO_INGRESS),
    (APPLY, *NO_SERVER), (APPLY, *TWO_SERVERS), (APPLY, *NO_INGRESS),
    (["status"], *NO_INGRESS),  # status asks the ingress rig; it needs no k3s server
])
def test_an_inventory_that_cannot_carry_a_provider_is_refused_first(tmp_path, capsys, command, groups, said):
    args = write(tmp_path, groups)
    command = [str(tmp_path / "econ.yml") if a == "ECON" else str(tmp_path) if a == "CHARTS" else a for a in command]
    code = main(["provider", *command, *args])
    err = capsys.readouterr().err
    if "ingress_rig" in said:
        assert "provider.yml:4: ingress_rig" in err
    assert code in (2, 8) and said in err and err.count("\n") == 1, err


def test_a_bad_provider_file_is_named_at_its_line(tmp_path, capsys):
    args = write(tmp_path, {"k3s_server": ["rig01"]}, PROVIDER.replace("email: ops@example.com", "email: ops"))
    assert main(["provider", "check", *args]) == 2
    assert "provider.yml:3: email 'ops': an address such as" in capsys.readouterr().err


def test_remove_needs_the_server_too(tmp_path, capsys):
    args = write(tmp_path, {"farm": ["rig01"]})
    assert main(["provider", "remove", *args[:2], "--yes"]) == 8
    assert "exactly one k3s server" in capsys.readouterr().err


def leased_reports(hosts, opts):
    """What detect reports of a farm where rig02's agent lists a running lease (rig01: none)."""
    out = []
    for host in hosts:
        leases = (Lease("lease/web-7f9c", "2026-11-25T20:00:00+00:00"),) if host.name == "rig02" else ()
        status = AgentStatus(True, "leasing" if leases else "idle-mining", "2026-11-25T20:00:00+00:00", "", "s", "",
                             leases)
        f = dataclasses.replace(facts(), agent_status=status)
        out.append(RigReport(host.name, host.address, f, assess(f)))
    return out


def test_remove_is_refused_while_a_lease_runs_and_nothing_is_run(tmp_path, capsys, monkeypatch):
    args = write(tmp_path, {"k3s_server": ["rig01"], "k3s_agent": ["rig02"]})
    monkeypatch.setattr(rigs_cli, "detect", leased_reports)  # remove probes through cli/rigs.detect_said
    ran = []
    monkeypatch.setattr(provider_cli.provider_run, "remove", lambda *a, **k: ran.append(a))
    assert main(["provider", "remove", *args[:2], "--yes"]) == 8
    err = capsys.readouterr().err
    assert "rig02" in err and "lease/web-7f9c" in err and "--drain waits for them" in err, err
    assert ran == []


def test_check_says_a_rig_that_does_not_answer_and_goes_on(tmp_path, capsys, monkeypatch):
    args = write(tmp_path, {"k3s_server": ["rig01"], "k3s_agent": ["rig02"]})
    (tmp_path / "k.key").write_text("-----BEGIN TENDERMINT PRIVATE KEY-----\nkdf: bcrypt\n\nYQ==\n"
                                    "-----END TENDERMINT PRIVATE KEY-----\n")
    (tmp_path / "k.key").chmod(0o600)

    def one_dead(hosts, opts):
        reports = leased_reports(hosts, opts)
        return [r if r.name == "rig01" else RigReport(r.name, r.address, None, None, "refused",
                                                      "connection refused (is sshd running?)") for r in reports]

    monkeypatch.setattr(provider_cli, "detect", one_dead)
    monkeypatch.setattr(provider_cli, "ask", lambda host, fact, opts: "not asked in this test")
    monkeypatch.setattr(outside, "resolve", lambda name: ("81.2.69.160",))
    monkeypatch.setenv("M2P_TEST_PASS", "x")
    assert main(["provider", "check", *args, "--json"]) == 8
    found = {(v["topic"], v["level"]): v["text"] for v in json.loads(capsys.readouterr().out)}
    assert found[("rigs", "fail")].startswith("rig02 did not answer (connection refused (is sshd running?))")
    assert "1 rigs:" in found[("audit floor", "warn")] and ("wallet", "ok") in found, found


def test_status_shows_each_rigs_reclaimed_leases_and_the_servers_reclaimer_escaped(capsys):
    """The server's reclaimer fact lists leases by node; each rig's row shows its own, the server's row the
    reclaimer's last sweep.  Lease ids and node names come from the cluster (a rig's root can write anything):
    printed, never interpreted, and never a line of their own."""
    import dataclasses

    from test_readiness import facts

    from miner2provider.cli import render
    from miner2provider.detect.facts.base import Output
    from miner2provider.detect.facts.reclaimer import ReclaimerFact
    from miner2provider.detect.readiness import assess
    from miner2provider.detect.report import RigReport, status_rows

    said = ReclaimerFact.parse(Output(json.dumps({"at": "2026-11-26T01:00:00+00:00", "last_error": "", "leases": [
        {"lease": "akash1x/7/1/1/akash1y", "nodes": ["node-b"], "state": "reclaiming", "window_s": 3600,
         "deadline": "2026-11-26T02:00:00+00:00", "action": "wait", "why": "its deadline comes before mining starts",
         "error": ""},
        {"lease": "evil\x1b[2J\nrig01 converged", "nodes": ["node-b"], "state": "", "action": "", "why": "",
         "error": "query: x"}]}), 0))
    base = facts()
    running = dataclasses.replace(base.installed, k3s="v1.31.4+k3s1", k3s_service="k3s")
    server = dataclasses.replace(base, reclaimer=said, installed=running)
    rig = dataclasses.replace(base, installed=running)
    reports = [RigReport("server", "10.0.0.1", server, assess(server)), RigReport("rig-b", "10.0.0.2", rig, assess(rig))]
    rows = status_rows(reports, {"server": "server", "rig-b": "node-b"})  # rig-b runs as node-b (k3s_node_name)
    assert [r["node"] for r in rows] == ["server", "node-b"] and rows[0]["reclaims"] == []
    assert rows[0]["reclaimer"] == {"at": "2026-11-26T01:00:00+00:00", "last_error": "", "leases": 2}
    render.status_table(rows)
    out = capsys.readouterr().out
    assert "reclaimer: last sweep 2026-11-26T01:00:00+00:00, 2 leases on rigs that must mine" in out
    assert ("lease akash1x/7/1/1/akash1y: reclaiming until 2026-11-26T02:00:00+00:00, window 1 h; next wait (its "
            "deadline comes before mining starts)") in out
    assert "\x1b[2J" not in out and "\nrig01 converged" not in out and "error: query: x" in out


@pytest.mark.parametrize("econ, said", [
    ("gpu_power_watts: {rtx3900: 350}\n", "econ.yml:3: rtx3900 is not a GPU model m2p knows, so its figure would "
                                          "price nothing: did you mean rtx3090?"),
    ("gpu_power_watts: {rtx3070: 130}\n", "econ.yml:3: gpu_power_watts has no figure for rtx3090 (cards this farm has)"),
])
def test_apply_bids_nothing_on_a_misspelt_or_unpowered_model(tmp_path, capsys, monkeypatch, econ, said):
    """A misspelt model would make its card's power free and bid under the electricity bill: exit 7, no install."""
    args = write(tmp_path, {"k3s_server": ["rig01"], "k3s_agent": ["rig02"]})
    (tmp_path / "econ.yml").write_text("mining_revenue_per_gpu_day: {default: 0.4}\npower_price_per_kwh: 0.1\n" + econ)
    monkeypatch.setattr(rigs_cli, "detect", leased_reports)  # each rig an RTX 3090
    ran = []
    monkeypatch.setattr(provider_cli.provider_run, "apply", lambda *a, **k: ran.append(a))
    command = [str(tmp_path / "econ.yml") if a == "ECON" else str(tmp_path) if a == "CHARTS" else a for a in APPLY]
    assert main(["provider", *command, *args]) == 7
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
    assert ran == []
