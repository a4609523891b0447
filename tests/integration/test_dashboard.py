"""`m2p dashboard` in a real browser (Debian's chromium, driven by Playwright) over three sandbox rigs:
a HiveOS rig whose time-share agent hands its GPUs to a lease (the STAND-IN Kubernetes API of
sandbox/m2p_sandbox/kube_api.py), an msOS rig whose card has a hostile name, and a plain Ubuntu rig
whose (planted) agent status and Kubernetes node are hostile in every field.  The dashboard is its own
process, as a user starts it, signed in with its token; the history is a real SQLite file; the sweeps
are real SSH."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
import sqlite3
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Page, expect, sync_playwright

from m2p_sandbox import network
from m2p_sandbox import rig as sandbox
from m2p_sandbox.kube_api import KubeApiStandin

from .conftest import M2P, run, ssh
from .test_agent import through_the_gate, wait_for

pytestmark = pytest.mark.integration
CHROMIUM = "/usr/bin/chromium"  # Debian's (scripts/install); Playwright never downloads its own


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DASHBOARD_TOKEN = secrets.token_urlsafe(32)
# What a compromised rig or node sends in every field it controls: markup that would run or inject an
# element if any page parsed it (each sets window.__pwned, which must stay unset).
HOSTILE = ['<img src=x onerror="window.__pwned=1" id=pwn1>', "</script><script>window.__pwned=2</script>",
           '"><svg onload="window.__pwned=3" id=pwn3>', "<b id=pwn4>bold</b>{{7*7}}"]


def api_get(base: str, path: str) -> dict:
    request = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {DASHBOARD_TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def plant_hostile_data(ms: sandbox.Rig, plain: sandbox.Rig, api: KubeApiStandin) -> None:
    """The msOS card's name (over SSH: the stand-in nvidia-smi's list), the plain rig's agent status
    (over SSH: status.json) and its node's mode label and status annotation (over the API)."""
    status = {"schema": 1, "mode": HOSTILE[3], "since": HOSTILE[1], "next_change": HOSTILE[2],
              "last_error": HOSTILE[3] * 2000, "leases": [{"pod": h, "since": h} for h in HOSTILE],
              "measured": {"algo": HOSTILE[1], "mhs": [1.0]}, "profit": {"lease_pays": True, "source": HOSTILE[2]}}
    with ssh(plain) as client:
        code, out = run(client, "sudo mkdir -p /var/lib/m2p/agent && echo " + shlex.quote(json.dumps(status))
                        + " | sudo tee /var/lib/m2p/agent/status.json >/dev/null")
        assert code == 0, out
    rename = ("import json; p='/etc/m2p-standin/gpus.json'; r=json.load(open(p)); "
              "gpus = r['gpus'] if isinstance(r, dict) else r; gpus[0]['name'] = " + repr(HOSTILE[0])
              + "; json.dump(r, open(p, 'w'))")
    with ssh(ms) as client:
        code, out = run(client, "sudo python3 -c " + shlex.quote(rename))
        assert code == 0, out
    api.add_node(plain.name, "plain-" + secrets.token_hex(8), labels={"m2p.io/mode": HOSTILE[2][:60]})
    api.nodes[plain.name]["metadata"]["annotations"] = {"m2p.io/status": json.dumps(status)}


def test_the_fleet_page_a_timeline_a_redetect_and_a_refused_action(boot_rigs, tmp_path, monkeypatch):
    assert Path(CHROMIUM).exists(), "chromium is missing: run scripts/install (Debian's chromium)"
    hive, ms, plain = boot_rigs(sandbox.RigSpec("db-hive", "hiveos", ("rtx3090", "rtx3090")),
                                sandbox.RigSpec("db-ms", "msos", ("cmp90hx",)), sandbox.RigSpec("db-plain", "plain"))
    api = KubeApiStandin(host=str(network.gateway()))  # HTTPS with its own CA, as kube-apiserver
    assert api.authority is not None
    ca = tmp_path / "cluster-ca.crt"  # the cluster's CA as its owner keeps it: the agent and the dashboard trust it
    ca.write_bytes(api.authority.pem)
    token = secrets.token_urlsafe(24)
    api.add_node(hive.name, token, gpus=2)
    ssh_pw = "Sup3r-" + secrets.token_hex(6)  # an inventory secret no response may carry
    inv = tmp_path / "rigs.yml"
    hosts = {r.name: {"ansible_host": r.address, "ansible_user": r.user, "ansible_ssh_private_key_file": r.key_file,
                      "ansible_become_password": ssh_pw} for r in (hive, ms, plain)}
    hosts[hive.name] |= {"m2p_agent_token_env": "DB_AGENT_TOKEN", "m2p_agent_ca_file": str(ca)}
    inv.write_text(yaml.safe_dump({"all": {"children": {"farm_a": {"hosts": {hive.name: hosts[hive.name],
                                                                             ms.name: hosts[ms.name]}},
                                                        "farm_b": {"hosts": {plain.name: hosts[plain.name]}}}}}))
    (tmp_path / "schedule.yml").write_text("timezone: UTC\npolicy: lease-first\nmin_switch_interval: 0s\n")
    (tmp_path / "econ.yml").write_text("currency: USD\nlease_price_per_gpu_hour:\n  rtx3090: 0.25\n"
                                       "mining_revenue_per_gpu_day:\n  default: 0.80\n"
                                       "mining_revenue_per_mhs_day:\n  kawpow: 0.05\n")
    env = {**os.environ, "DB_AGENT_TOKEN": token}
    common = ["-i", str(inv), "--known-hosts", str(tmp_path / "known_hosts")]
    applied = subprocess.run([*M2P, "schedule", "apply", *common, str(tmp_path / "schedule.yml"), "--limit", hive.name,
                              "--api-server", api.url, "--accept-new", "--yes"], env=env, capture_output=True,
                             text=True, timeout=600)
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-3000:]
    wait_for("idle mining", lambda: api.nodes[hive.name]["metadata"]["labels"].get("m2p.io/mode") == "idle-mining")
    code, out, container = through_the_gate(hive, "lease/lease-1")
    assert code == 0, out
    api.add_pod("lease-1", hive.name, 2)
    wait_for("leasing", lambda: api.nodes[hive.name]["metadata"]["labels"].get("m2p.io/mode") == "leasing")

    def agent_saw_the_lease() -> bool:
        with ssh(hive) as client:
            return "lease/lease-1" in run(client, "cat /var/lib/m2p/agent/status.json")[1]
    wait_for("the agent to read the lease's pod", agent_saw_the_lease)

    api.admin_tokens.add(admin := secrets.token_urlsafe(24))  # may list the nodes, as a farm admin's token
    (tmp_path / "kube-token").write_text(admin)
    plant_hostile_data(ms, plain, api)
    token_file = tmp_path / "dashboard-token"
    token_file.write_text(DASHBOARD_TOKEN + "\n")
    token_file.chmod(0o600)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "dashboard.log", "w")
    server = subprocess.Popen([*M2P, "dashboard", *common, "--accept-new", "--port", str(port),
                               "--db", str(tmp_path / "history.sqlite3"), "--economics", str(tmp_path / "econ.yml"),
                               "--kube-api", api.url, "--kube-token-file", str(tmp_path / "kube-token"),
                               "--kube-ca", str(ca), "--token-file", str(token_file)],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    shots = tmp_path / "screenshots"
    try:
        wait_for("the dashboard to answer and sweep", lambda: _swept(base, 3), timeout=60)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            violations: list[str] = []
            page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)

            # Signing in: the page asks for the token; a session cookie follows.
            page.goto(base + "/")
            expect(page.locator('input[name="token"]')).to_be_visible()
            page.fill('input[name="token"]', DASHBOARD_TOKEN)
            page.click('form[action="/login"] button[type="submit"]')

            # The fleet: three rows, each rig's mode; the leased rig names its lease once re-read.
            expect(page.locator("#rigs tbody tr")).to_have_count(3)
            assert page.get_attribute(f'tr[data-rig="{plain.name}"]', "data-mode") == HOSTILE[3]
            _inert(page, violations)
            for rig in (plain.name, ms.name):
                page.goto(f"{base}/rigs/{rig}")
                _inert(page, violations)
            expect(page.locator("#rig-name")).to_have_text(ms.name)
            assert HOSTILE[0] in page.locator("body").inner_text()  # shown as text, whole
            page.goto(base + "/")
            page.screenshot(path=str(shots / "1-fleet.png"), full_page=True)
            # (shows: the summary line, three rows; db-hive leasing or idle-mining as the first sweep saw it)

            # Re-detect db-hive from its page: the plan (read-only), then confirm, then done.
            page.goto(f"{base}/rigs/{hive.name}")
            page.click('button[data-action="detect"]')
            expect(page.locator("#confirm")).to_be_visible(timeout=15_000)
            expect(page.locator("#output")).to_contain_text("nothing on the rig changes")
            page.click("#confirm")
            expect(page.locator("#job-state")).to_contain_text("detect (run): done", timeout=60_000)
            expect(page.locator("#output")).to_contain_text(f"{hive.name}: read")
            page.screenshot(path=str(shots / "2-redetect.png"), full_page=True)
            # (shows: the action buttons, "detect (run): done, exit 0", the output "db-hive: read")

            # The timeline: the idle-mining and the leasing spans drawn, the lease named in a span's title.
            page.goto(f"{base}/rigs/{hive.name}?days=7")
            expect(page.locator("#rig-mode")).to_have_text("leasing")
            expect(page.locator("#rig-leases")).to_have_text("lease/lease-1")
            titles = page.locator("#timeline rect.span title").evaluate_all("els => els.map(e => e.textContent)")
            assert any(t.startswith("idle-mining ") for t in titles), titles
            assert any(t.startswith("leasing ") and "(lease/lease-1)" in t for t in titles), titles
            expect(page.locator("#per-day tbody tr")).to_have_count(7)
            # The agent averaged HiveOS's miner stats (the stand-in miner's 58 MH/s kawpow at 240 W a card):
            # mining is valued at the measured rate, 58 x 0.05 = 2.90 per GPU-day.
            expect(page.locator("#economy")).to_contain_text(
                "Miner measured: kawpow, 58.0 + 58.0 MH/s at 240.0 + 240.0 W, worth 2.9 USD per GPU-day")
            page.screenshot(path=str(shots / "3-timeline.png"), full_page=True)
            # (shows: seven day rows, today's with a yellow idle-mining piece, then teal leasing)

            # A changing action on the leased rig is refused, with the lease named; nothing ran.
            page.click('button[data-action="convert"]')
            expect(page.locator("#job-state")).to_contain_text(f"refused: {hive.name} (lease/lease-1) runs a lease")
            expect(page.locator("#confirm")).to_be_hidden()
            page.screenshot(path=str(shots / "4-refused.png"), full_page=True)
            # (shows: "refused: db-hive (lease/lease-1) runs a lease: no convert until it ends; ..." in red)

            # A selection on the fleet page: re-read two rigs in one job.
            page.goto(base + "/")
            page.check(f'input.pick[value="{ms.name}"]')
            page.check(f'input.pick[value="{plain.name}"]')
            page.click('button[data-action="detect"]')
            expect(page.locator("#confirm")).to_have_text(f"confirm: detect {ms.name}, {plain.name}", timeout=15_000)
            page.click("#confirm")
            expect(page.locator("#job-state")).to_contain_text("detect (run): done", timeout=60_000)
            expect(page.locator("#output")).to_contain_text(f"{ms.name}: read\n{plain.name}: read")
            page.screenshot(path=str(shots / "5-selection.png"), full_page=True)
            # (shows: two rows ticked, "detect (run): done, exit 0", one output line per rig)

            # Filter by group and mode, as a user does in the form.
            page.goto(base + "/")
            page.select_option('select[name="group"]', "farm_a")
            page.click('form[action="/"] button[type="submit"]')
            expect(page.locator("#rigs tbody tr")).to_have_count(2)
            page.select_option('select[name="mode"]', "leasing")
            page.click('form[action="/"] button[type="submit"]')
            expect(page.locator("#rigs tbody tr")).to_have_count(1)
            page.screenshot(path=str(shots / "6-filtered.png"), full_page=True)
            _no_secret_anywhere(page, base, [ssh_pw, token, admin], [hive.name, ms.name, plain.name])
            browser.close()

        # The API says the same: hours come from the ledger, and the lease earned by the economics file.
        line = api_get(base, f"/api/rigs/{hive.name}/timeline?days=1")
        assert [s["mode"] for s in line["spans"]][-1] == "leasing" and line["spans"][-1]["leases"] == ["lease/lease-1"]
        assert line["economy"]["measured_per_gpu_day"] == 2.9 and line["earnings"]["mining_valued_by"] == "measured hashrate"
        fleet = api_get(base, "/api/rigs")
        assert {r["rig"]: r["mode"] for r in fleet["rigs"]} == {hive.name: "leasing", ms.name: "no agent",
                                                                plain.name: HOSTILE[3]}
        assert fleet["summary"]["gpus"] == 3 and fleet["summary"]["leases"] == len(HOSTILE) + 1
        # The API was read too: the one node the agent labels, with its mode and the agent's status.
        with sqlite3.connect(tmp_path / "history.sqlite3") as db:
            nodes = db.execute("SELECT node, mode, status FROM nodes").fetchall()
        assert sorted((n, m) for n, m, _ in nodes) == [(hive.name, "leasing"), (plain.name, HOSTILE[2][:60])]
        assert json.loads(dict((n, st) for n, _, st in nodes)[hive.name])["leases"][0]["pod"] == "lease/lease-1"
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()
        with open(tmp_path / "dashboard.log") as f:
            print(f.read()[-3000:])


def _swept(base: str, rigs: int) -> bool:
    try:
        fleet = api_get(base, "/api/rigs")
    except OSError:
        return False
    return len(fleet["rigs"]) == rigs and all(r["seen_at"] for r in fleet["rigs"])


def _inert(page: Page, violations: list[str]) -> None:
    """What the rigs sent is on the page as text only: no element of theirs, no script of theirs ran, and
    our own scripts and styles broke no rule of the page's Content-Security-Policy."""
    page.wait_for_load_state("load")
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#pwn1, #pwn3, #pwn4").count() == 0
    assert violations == [], violations


def _no_secret_anywhere(page: Page, base: str, secret_values: list[str], rigs: list[str]) -> None:
    """Every page and API answer, as the browser gets it: no password or token in any."""
    paths = ["/", "/api", "/api/rigs", "/api/economics", *[p for r in rigs for p in (
        f"/rigs/{r}", f"/api/rigs/{r}", f"/api/rigs/{r}/timeline?days=30")]]
    for path in paths:
        body = page.request.get(base + path).text()
        assert body, path
        for value in secret_values:
            assert value not in body, f"{path} shows a secret"
