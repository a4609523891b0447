"""The dashboard without a browser: the economics file, earnings arithmetic (property tests: hours
never exceed wall time), and the web app through Starlette's test client (API, CSRF, token, lease
refusal, no secret in any response)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient
from test_readiness import facts  # tests/unit is on sys.path (no package)

from miner2provider.core import inventory
from miner2provider.core.errors import EconomicsError
from miner2provider.dashboard import views
from miner2provider.dashboard.actions import Actions, Fleet
from miner2provider.dashboard.app import DashboardConfig, create_app
from miner2provider.dashboard.collect import snapshot
from miner2provider.dashboard.history import History
from miner2provider.detect.facts.reclaimer import ReclaimedLease, ReclaimerStatus
from miner2provider.detect.facts.tunnel import Handshake, Tunnel
from miner2provider.detect.readiness import assess
from miner2provider.detect.report import RigReport, status_rows
from miner2provider.detect.ssh import SshOptions
from miner2provider.market.base import ProviderState
from miner2provider.rigside.ledger import Entry
from miner2provider.rigside.status import AgentStatus, Lease
from miner2provider.timeshare import economics

HOUR, DAY = 3600.0, 86_400.0
ECON = economics.parse("currency: USD\nlease_price_per_gpu_hour:\n  default: 0.10\n  rtx3090: 0.25\n"
                       "mining_revenue_per_gpu_day:\n  rtx3090: 1.20\n", "econ.yml")


# -- the economics file -------------------------------------------------------------------

@pytest.mark.parametrize("text, where, said", [
    ("lease_price_per_gpu_hour:\n  rtx3090: -1\n", "e.yml:2", "a number from 0 to"),
    ("lease_price_per_gpu_hour:\n  rtx3090: .nan\n", "e.yml:2", "a number from 0 to"),
    ("lease_price_per_gpu_hour:\n  rtx3090: yes\n", "e.yml:2", "a number from 0 to"),
    ("currency: USD\nlease_price: 1\n", "e.yml:2", "unknown economics key 'lease_price'"),
    ("mining_revenue_per_gpu_day: 3\n", "e.yml:1", "is a mapping of model: price"),
    ("lease_price_per_gpu_hour:\n  a: 1\n  a: 2\n", "e.yml:3", "a is given twice"),
    ("currency: 12\n", "e.yml:1", "use a code such as USD"),
    ("- 1\n", "e.yml:1", "an economics file is a mapping"),
    ("currency: [\n", "e.yml:2", "YAML syntax error"),
])
def test_a_bad_economics_file_names_its_line(text, where, said):
    with pytest.raises(EconomicsError) as caught:
        economics.parse(text, "e.yml")
    assert caught.value.where == where and said in caught.value.message


def test_a_model_without_a_figure_falls_back_to_default_or_is_unknown():
    assert ECON.lease_price("rtx3090") == 0.25 and ECON.lease_price("cmp90hx") == 0.10
    assert ECON.mining_revenue("rtx3090") == 1.20 and ECON.mining_revenue("cmp90hx") is None


# -- earnings and hours -------------------------------------------------------------------

def rig(ledger, seen_at, name="rig01", snap=None):
    return views.RigInput(name, ("farm",), seen_at, snap, tuple(ledger))


def test_earnings_count_lease_hours_and_mining_hours_by_the_rigs_models():
    t0 = 1_800_000_000.0
    ledger = [Entry(t0, "idle-mining", gpus=2), Entry(t0 + 2 * HOUR, "leasing", gpus=2),
              Entry(t0 + 3 * HOUR, "leasing", gpus=2, leases=("lease/a",), leased=2), Entry(t0 + 7 * HOUR, "mining", gpus=2)]
    spans = views.rig_spans(rig(ledger, t0 + 9 * HOUR), t0, t0 + DAY)
    e = views.earnings(views.span_totals(spans, 2), ["rtx3090", "rtx3090"], ECON)
    # 4 h leased x 2 GPUs x 0.25; 4 h mining x 2 GPUs x 1.20 / 24; the hour offered but idle earns nothing
    assert e == {"currency": "USD", "gpu_hours_leased": 8.0, "gpu_hours_mined": 8.0, "lease": 2.0, "mining": 0.4,
                 "mining_valued_by": "economics file", "total": 2.4}
    measured = views.earnings(views.span_totals(spans, 2), ["rtx3090", "rtx3090"], ECON, measured_per_gpu_day=2.4)
    assert measured["mining"] == 0.8 and measured["mining_valued_by"] == "measured hashrate"
    assert views.earnings(views.span_totals(spans, 2), ["cmp90hx", "cmp90hx"], ECON)["total"] is None  # no mining figure: unknown


def test_a_per_card_lease_counts_its_gpu_leased_and_the_others_mined():
    """A 1-GPU lease on a 3-GPU rig that hands over per card: 1 GPU-hour leased and 2 mined an hour; handed over
    whole (no mining count), the 2 idle cards earn nothing."""
    t0 = 1_800_000_000.0
    ledger = [Entry(t0, "leasing", gpus=3, leases=("lease/a",), leased=1, mining=2),
              Entry(t0 + 2 * HOUR, "leasing", gpus=3, leases=("lease/a",), leased=1)]
    spans = views.rig_spans(rig(ledger, t0 + 3 * HOUR), t0, t0 + DAY)
    e = views.earnings(views.span_totals(spans, 3), ["rtx3090"] * 3, ECON)
    assert (e["gpu_hours_leased"], e["gpu_hours_mined"]) == (3.0, 4.0), e


def test_a_rig_not_seen_since_earns_nothing_after_its_last_sweep():
    t0 = 1_800_000_000.0
    spans = views.rig_spans(rig([Entry(t0, "mining", gpus=1)], seen_at=t0 + HOUR), t0, t0 + 30 * DAY)
    assert sum(s.seconds for s in spans) == HOUR


# The lease of a change: 0 none, 1 the whole rig's GPUs (a whole-rig hand-over), 2 one GPU with the miner on the
# others (per card).
CHANGES = st.lists(st.tuples(st.floats(0, 10 * DAY, allow_nan=False),
                             st.sampled_from(views.MODES), st.integers(0, 2)), max_size=40)


T0 = 1_800_000_000.0
WORLDS = st.tuples(CHANGES, st.floats(0, 12 * DAY, allow_nan=False), st.floats(0, 12 * DAY, allow_nan=False))


def world_of(drawn, gpus):
    """(ledger, the last read, since, until) from drawn changes, read time and window end."""
    changes, seen, window_end = drawn
    ledger = [Entry(T0 + at, mode, gpus=gpus, leases=("l/p",) if lease else (),
                    leased={0: 0, 1: gpus, 2: min(1, gpus)}[lease], mining=max(0, gpus - 1) if lease == 2 else 0)
              for at, mode, lease in sorted(changes)]
    return ledger, T0 + seen, T0 + window_end / 3, T0 + window_end


@settings(max_examples=80, deadline=None)
@given(WORLDS, st.integers(1, 8))
def test_hours_never_exceed_wall_time(drawn, gpus):
    ledger, seen, since, until = world_of(drawn, gpus)
    spans = views.rig_spans(rig(ledger, seen), since, until)
    wall = max(0.0, until - since)
    assert sum(s.seconds for s in spans) <= wall + 1e-6
    assert all(since <= s.start <= s.end <= until for s in spans)
    e = views.earnings(views.span_totals(spans, gpus), ["rtx3090"] * gpus, ECON)
    assert 0 <= e["gpu_hours_leased"] + e["gpu_hours_mined"] <= wall / HOUR * gpus + 0.02
    assert e["total"] is not None and e["total"] >= 0


def test_a_timeline_splits_hours_at_utc_midnight():
    now = 1_800_000_000.0 - 1_800_000_000.0 % DAY + 6 * HOUR  # 06:00 UTC
    ledger = [Entry(now - 10 * HOUR, "mining", gpus=1), Entry(now - 2 * HOUR, "leasing", gpus=1, leases=("l/p",))]
    line = views.timeline(rig(ledger, now), ECON, now, 2)
    assert [d["hours"] for d in line["per_day"]] == [{"mining": 4.0}, {"mining": 4.0, "leasing": 2.0}]
    assert [(s["mode"], s["seconds"]) for s in line["spans"]] == [("mining", 8 * HOUR), ("leasing", 2 * HOUR)]


# -- the web app --------------------------------------------------------------------------

INVENTORY = """all:
  children:
    farm_a:
      hosts:
        rig01: {ansible_host: 10.0.0.1, ansible_password: "pw-Sup3rSecret!"}
        rig02: {ansible_host: 10.0.0.2, ansible_password: "pw-Sup3rSecret!"}
"""


# The farm's reclaimer on rig01 (the server) reclaims a lease on rig02; its words come from the cluster.
RECLAIMING = ReclaimerStatus(True, "2026-11-24T06:00:00+00:00", "", (ReclaimedLease(
    "akash1t/77/1/1/akash1p", ("rig02",), "reclaiming", "2026-11-24T07:00:00+00:00", "2026-11-24T07:00:00+00:00",
    3600.0, "wait", "<b>y</b>its deadline comes before mining starts", ""),))


# rig01's tunnel shook hands 12 s before the sweep; rig02's not for 400 s (a farm across sites, docs/sites.md).
# rig01 is a hub: one of its peers never shook hands (its address as the hub's own wg printed it, escaped or not).
TUNNELS = {"rig01": Tunnel(True, "k", "up", 1280, (Handshake("h", 1_000, "10.237.0.2"),
                                                   Handshake("g", 0, "<b>10.237.0.9</b>")), 1_012),
           "rig02": Tunnel(True, "k", "up", 1280, (Handshake("h", 1_000),), 1_400)}


def report(name, leases=(), reclaiming=None):
    f = facts()
    status = AgentStatus(True, "leasing" if leases else "idle-mining", "2026-11-24T05:00:00+00:00", "", "schedule",
                         "", tuple(Lease(p, "2026-11-24T05:00:00+00:00") for p in leases),
                         mine_at="<b>x</b>2026-11-24T18:00" if leases else "")
    f = dataclasses.replace(f, agent_status=status, reclaimer=reclaiming or ReclaimerStatus(False),
                            tunnel=TUNNELS.get(name, Tunnel(False)),
                            installed=dataclasses.replace(f.installed, k3s="v1.31.4+k3s1", k3s_service="k3s"))
    return RigReport(name, "10.0.0.1", f, assess(f))


@pytest.fixture
def world(tmp_path):
    inv_file = tmp_path / "rigs.yml"
    inv_file.write_text(INVENTORY)
    hosts = inventory.load(inv_file).hosts
    db = tmp_path / "h.sqlite3"
    now = time.time()
    reports = [report("rig01", (), reclaiming=RECLAIMING), report("rig02", ("lease/job",))]
    rows = status_rows(reports, {"rig01": "rig01", "rig02": "rig02"})
    with History(db) as h:
        for r, leases, row in (("rig01", (), rows[0]), ("rig02", ("lease/job",), rows[1])):
            h.add_snapshot(r, now, {**snapshot(reports[int(r[-1]) - 1], row), "read_at": now})
            h.add_ledger(r, [Entry(now - 5 * HOUR, "idle-mining", gpus=1),
                             Entry(now - HOUR, "leasing", gpus=1, leases=leases)], seen_at=now)
    redetected = []

    def redetect(name):
        redetected.append(name)
        return f"{name}: read"

    secrets = tuple(s for host in hosts for s in host.secrets().values())
    actions = Actions(Fleet(str(inv_file), SshOptions(known_hosts=tmp_path / "kh"), None, secrets, redetect))

    @contextlib.contextmanager
    def make(token=TOKEN, signed_in=True):
        app = create_app(DashboardConfig(db, list(hosts), ECON, actions, lambda chosen: None, lambda chosen: 0, 0, token))
        with TestClient(app, base_url="http://127.0.0.1:8477") as client:
            if signed_in:
                assert sign_in(client).status_code == 303
            yield client
    return make, redetected


TOKEN = "tok-" + "x" * 30
OWN = {"Origin": "http://127.0.0.1:8477"}  # what a browser sends with a POST from the dashboard's own page


def sign_in(client, token=TOKEN):
    return client.post("/login", data={"token": token}, headers=OWN, follow_redirects=False)


def act(client, path, body, plan=None):
    return client.post(path, json={**body, **({"plan": plan} if plan else {})}, headers=OWN)


def wait_job(client, job_id):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job = client.get(f"/api/jobs/{job_id}").json()
        if job["state"] != "running":
            return job
        time.sleep(0.05)
    raise AssertionError("the job did not end")


def test_the_api_shows_the_fleet_and_the_page_the_same(world):
    make, _ = world
    with make() as client:
        # DNS rebinding: another name pointed at 127.0.0.1 gets nothing
        assert client.get("/api/rigs", headers={"Host": "rebind.example:8477"}).status_code == 421
        assert client.get("/api/rigs", headers={"Host": "localhost:8477"}).status_code == 200
        assert client.get("/api/rigs", headers={"Host": "[::1]:8477"}).status_code == 200
        fleet = client.get("/api/rigs").json()
        assert [(r["rig"], r["mode"], r["leases"]) for r in fleet["rigs"]] == [
            ("rig01", "idle-mining", []), ("rig02", "leasing", ["lease/job"])]
        assert fleet["summary"]["modes"] == {"idle-mining": 1, "leasing": 1} and fleet["groups"] == ["farm_a"]
        # The server's reclaimer's lease shows on the rig it runs on, with its deadline.
        assert [r["reclaims"] for r in fleet["rigs"]][0] == [] and fleet["summary"]["reclaiming"] == 1
        assert {k: fleet["rigs"][1]["reclaims"][0][k] for k in ("lease", "state", "deadline")} == {
            "lease": "akash1t/77/1/1/akash1p", "state": "reclaiming", "deadline": "2026-11-24T07:00:00+00:00"}
        assert client.get("/api/rigs?mode=leasing").json()["rigs"][0]["rig"] == "rig02"
        page = client.get("/").text
        assert 'data-rig="rig01" data-mode="idle-mining"' in page and "lease/job" in page
        line = client.get("/api/rigs/rig02/timeline?days=7").json()
        assert [s["mode"] for s in line["spans"]] == ["idle-mining", "leasing"]
        assert client.get("/api/rigs/nobody").status_code == 404
        rig02 = client.get("/rigs/rig02?days=30").text
        assert "<svg" in rig02 and "akash1t/77/1/1/akash1p: reclaiming, ends 2026-11-24T07:00:00+00:00" in rig02
        assert 'id="rig-reclaims"' not in client.get("/rigs/rig01").text
        assert "being reclaimed for mining" in page
        assert [r["tunnel"]["ok"] for r in fleet["rigs"]] == [True, False] and "tunnel: up, carrying nothing" in page
        assert "last handshake 400 s before the sweep (1 peer): not carrying traffic" in " ".join(rig02.split())
        rig01 = " ".join(client.get("/rigs/rig01").text.split())
        assert "last handshake 12 s before the sweep (2 peers)." in rig01
        assert "Silent peers (their site or tunnel carries nothing): &lt;b&gt;10.237.0.9&lt;/b&gt; (no handshake seen)." \
            in rig01 and "<b>10.237" not in rig01
        assert "silent tunnel peers: &lt;b&gt;10.237.0.9&lt;/b&gt;" in page


def test_actions_plan_first_refuse_a_leased_rig_and_come_only_from_the_page(world):
    make, redetected = world
    with make() as client:
        for headers in ({}, {"Origin": "http://evil.example"}, {**OWN, "Sec-Fetch-Site": "cross-site"}):
            foreign = client.post("/api/rigs/rig01/actions", json={"action": "detect", "kind": "run"}, headers=headers)
            assert foreign.status_code == 403 and "another site" in foreign.json()["error"]
        for kind in ("plan", "run"):
            leased = act(client, "/api/rigs/rig02/actions", {"action": "convert", "kind": kind})
            assert leased.status_code == 409 and "rig02 (lease/job) runs a lease" in leased.json()["error"]
        plan = act(client, "/api/rigs/rig01/actions", {"action": "detect", "kind": "plan"})
        assert plan.status_code == 202 and redetected == []  # a plan changes nothing
        assert wait_job(client, plan.json()["id"])["lines"] == ["plan: reads the rig over SSH (the detect probe); "
                                                               "nothing on the rig changes"]
        run = act(client, "/api/rigs/rig01/actions", {"action": "detect", "kind": "run"})
        assert wait_job(client, run.json()["id"])["state"] == "done" and redetected == ["rig01"]
        # A selection: one job for all; a leased rig in it stops a changing action, not a re-read.
        both = {"rigs": ["rig01", "rig02"], "action": "revert", "kind": "plan"}
        refused = act(client, "/api/actions", both)
        assert refused.status_code == 409 and "leave it out of the selection" in refused.json()["error"]
        reread = act(client, "/api/actions", {**both, "action": "detect", "kind": "run"})
        assert wait_job(client, reread.json()["id"])["rigs"] == ["rig01", "rig02"]
        assert redetected == ["rig01", "rig01", "rig02"]
        assert act(client, "/api/actions", {"rigs": "rig01"}).status_code == 400
        assert act(client, "/api/actions", {"rigs": ["rig01"], "action": "revert", "kind": "run",
                                            "plan": 7}).status_code == 400


def test_the_server_runs_a_changing_action_only_after_its_own_plan(world, monkeypatch):
    """A run of convert/revert/schedule names a finished plan of the same action on the same rigs, once."""
    from miner2provider.dashboard import actions as actions_module

    make, _ = world
    ran = []
    monkeypatch.setattr(actions_module.Actions, "_subprocess", lambda self, job, argv: ran.append(argv) or 0)
    with make() as client:
        revert = {"rigs": ["rig01"], "action": "revert"}
        bare = act(client, "/api/actions", {**revert, "kind": "run"})
        assert bare.status_code == 409 and "runs only after its plan" in bare.json()["error"] and ran == []
        detect_plan = wait_job(client, act(client, "/api/actions", {**revert, "action": "detect", "kind": "plan"})
                               .json()["id"])
        other = act(client, "/api/actions", {**revert, "kind": "run"}, plan=detect_plan["id"])
        assert other.status_code == 409 and ran == []  # a plan of another action is no plan for this one
        plan = wait_job(client, act(client, "/api/actions", {**revert, "kind": "plan"}).json()["id"])
        wider = act(client, "/api/actions", {"rigs": ["rig01", "rig02"], "action": "revert", "kind": "run"},
                    plan=plan["id"])
        assert wider.status_code == 409 and ran == []  # nor of other rigs (rig02's lease refuses first anyway)
        first = act(client, "/api/actions", {**revert, "kind": "run"}, plan=plan["id"])
        assert first.status_code == 202 and wait_job(client, first.json()["id"])["state"] == "done"
        assert ran == [["revert", "--yes"]]
        again = act(client, "/api/actions", {**revert, "kind": "run"}, plan=plan["id"])
        assert again.status_code == 409 and "has run already" in again.json()["error"] and len(ran) == 1
        monkeypatch.setattr(actions_module, "PLAN_VALID_S", -1)
        stale = wait_job(client, act(client, "/api/actions", {**revert, "kind": "plan"}).json()["id"])
        old = act(client, "/api/actions", {**revert, "kind": "run"}, plan=stale["id"])
        assert old.status_code == 409 and "too old" in old.json()["error"] and len(ran) == 1


def test_a_token_guards_everything_and_no_secret_reaches_a_response(world):
    make, _ = world
    with make(signed_in=False) as client:
        assert client.get("/api/rigs").status_code == 401
        assert client.get("/", follow_redirects=False).headers["location"] == "/login"
        # an unauthenticated local POST: refused before anything runs
        assert act(client, "/api/actions", {"rigs": ["rig01"], "action": "detect", "kind": "run"}).status_code == 401
        assert client.post("/login", data={"token": TOKEN}).status_code == 403  # no Origin: not our page
        assert sign_in(client, "wrong").status_code == 401
        signed = sign_in(client)
        cookie = signed.headers["set-cookie"]
        assert signed.status_code == 303 and TOKEN not in cookie
        assert all(flag in cookie.lower() for flag in ("httponly", "samesite=strict", "max-age=43200"))
        bodies = [client.get(path).text for path in ("/", "/api", "/api/rigs", "/api/rigs/rig01",
                                                     "/api/rigs/rig01/timeline?days=30", "/rigs/rig01",
                                                     "/api/economics")]
        assert all(body for body in bodies)
        for body in bodies:
            assert "Sup3rSecret" not in body and TOKEN not in body
        session = client.cookies.get("m2p-session-8477")
        assert session and client.post("/logout", headers=OWN, follow_redirects=False).status_code == 303
        client.cookies.set("m2p-session-8477", session)  # the old cookie, kept by an attacker: dead
        assert client.get("/api/rigs").status_code == 401
    with make(signed_in=False) as client:
        assert client.get("/api/rigs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert client.get("/api/rigs", headers={"Authorization": "Bearer nope"}).status_code == 401


def test_sessions_expire_and_logins_are_rate_limited():
    from miner2provider.dashboard.peer import Client
    from miner2provider.dashboard.sessions import FAILURE_WINDOW_S, FAILURES_PER_CLIENT, LoginLimiter, Sessions

    now = [1000.0]
    sessions = Sessions(ttl_s=60, clock=lambda: now[0])
    sid = sessions.open("uid 1000 on port 8477")
    assert sessions.valid(sid, "uid 1000 on port 8477") and not sessions.valid("guess", "uid 1000 on port 8477")
    assert len(sid) >= 40 and not sessions.valid(sid, "uid 1001 on port 8477")
    now[0] += 61
    assert not sessions.valid(sid, "uid 1000 on port 8477")  # expired
    limiter = LoginLimiter(clock=lambda: now[0])
    lan = Client("10.0.0.9")
    for _ in range(FAILURES_PER_CLIENT):
        assert limiter.wait_s(lan) == 0
        limiter.failed(lan)
    assert limiter.wait_s(lan) == FAILURE_WINDOW_S and limiter.wait_s(Client("127.0.0.1", 1000)) == 0
    now[0] += FAILURE_WINDOW_S
    assert limiter.wait_s(lan) == 0


def test_the_login_answers_429_after_too_many_wrong_tokens(world):
    from miner2provider.dashboard.sessions import FAILURES_PER_CLIENT

    make, _ = world
    with make(signed_in=False) as client:
        for _ in range(FAILURES_PER_CLIENT):
            assert sign_in(client, "wrong").status_code == 401
        slowed = sign_in(client)  # even the right token waits: the limit is on trying
        assert slowed.status_code == 429 and int(slowed.headers["retry-after"]) > 0


def test_pages_escape_and_forbid_what_a_rig_sends_and_bad_parameters_are_400s(world, tmp_path):
    make, _ = world
    with make() as client:
        page = client.get("/rigs/rig01")
        policy = page.headers["content-security-policy"]
        nonce = policy.split("'nonce-")[1].split("'")[0]
        assert "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.text.count(f'nonce="{nonce}"') == page.text.count("<script") + page.text.count("<style")
        assert "csrf" not in page.text.lower()  # no token a page script could read
        leased = client.get("/rigs/rig02").text + client.get("/rigs/rig01").text
        assert "mines from &lt;b&gt;x&lt;/b&gt;2026-" in leased and "<b>x" not in leased  # the agent's mine_at
        assert "(&lt;b&gt;y&lt;/b&gt;its deadline" in leased and "<b>y" not in leased  # the reclaimer's words
        for path in ("/api/rigs?days=\u00b2", "/api/rigs/rig01/timeline?days=0", "/?days=99999999999",
                     "/rigs/rig01?days=-1"):
            bad = client.get(path)
            assert bad.status_code == 400 and "a whole number" in bad.json()["error"], path
        job = act(client, "/api/rigs/rig01/actions", {"action": "detect", "kind": "plan"}).json()
        assert client.get(f"/api/jobs/{job['id']}?since=\u00b2").status_code == 400


def test_a_body_over_its_limit_is_refused_unread(world):
    make, _ = world
    with make() as client:
        big = client.post("/login", content=b"token=" + b"x" * (5 << 10), headers={**OWN,
                          "Content-Type": "application/x-www-form-urlencoded"})
        assert big.status_code == 413
        huge = client.post("/api/actions", content=b"{" + b" " * (70 << 10) + b"}",
                           headers={**OWN, "Content-Type": "application/json"})
        assert huge.status_code == 413


# -- m2p dashboard's refusals (before it serves anything) ---------------------------------

@pytest.mark.parametrize("extra, said", [
    (["--bind", "0.0.0.0"], "--bind '0.0.0.0' serves beyond this machine: give --tls-cert and --tls-key"),
    (["--token-file", "{tmp}/short"], "{tmp}/short:1: the token is shorter than 16"),
    (["--bind", "192.168.1.5", "--tls-cert", "{tmp}/short"], "--tls-cert and --tls-key go together"),
    (["--token-file", "{tmp}/open"], "{tmp}/open is readable or writable by other users (mode 644): chmod 600"),
    (["--token-file", "{tmp}/none"], "{tmp}/none: the token file does not exist"),
    (["--economics", "{tmp}/econ.yml"], "{tmp}/econ.yml:2: lease_price_per_gpu_hour.rtx3090 is -1"),
    (["--interval", "3s"], "--interval '3s': a duration from 10s to 1d (or 0)"),
])
def test_the_dashboard_refuses_unsafe_or_bad_settings(tmp_path, capsys, extra, said):
    from miner2provider.cli import main

    (tmp_path / "rigs.yml").write_text(INVENTORY)
    (tmp_path / "short").write_text("abc\n")
    (tmp_path / "short").chmod(0o600)
    (tmp_path / "open").write_text("x" * 40 + "\n")
    (tmp_path / "open").chmod(0o644)
    (tmp_path / "econ.yml").write_text("lease_price_per_gpu_hour:\n  rtx3090: -1\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    code = 7 if "--economics" in extra else 2  # a bad economics file has a schedule's code
    assert main(["dashboard", "-i", str(tmp_path / "rigs.yml"), "--db", str(tmp_path / "h.db"), *args]) == code
    err = capsys.readouterr().err
    assert said.replace("{tmp}", str(tmp_path)) in err and len(err.strip().splitlines()) == 1, err


# -- the Kubernetes API: one list of nodes, fresher than the last sweep --------------------

def test_modes_from_the_api_win_over_an_older_sweep(world, tmp_path):
    import json

    from m2p_sandbox.kube_api import KubeApiStandin  # the STAND-IN API server, on loopback
    from miner2provider.dashboard import kube_sweep
    from miner2provider.rigside.kube import ApiError, KubeClient

    api = KubeApiStandin()  # HTTPS with its own CA, as kube-apiserver; the dashboard's --kube-ca holds it
    try:
        assert api.authority is not None
        (tmp_path / "ca.crt").write_bytes(api.authority.pem)
        ca = str(tmp_path / "ca.crt")
        api.admin_tokens.add(admin := "admin-" + "y" * 20)
        api.add_node("rig01", "agent-token", labels={"m2p.io/mode": "draining"})
        api.nodes["rig01"]["metadata"]["annotations"] = {"m2p.io/status": json.dumps(
            {"mode": "draining", "since": "2026-11-24T06:00:00+00:00", "last_error": "API: slow",
             "leases": [{"pod": "lease/late", "since": "2026-11-24T06:00:00+00:00"}]})}
        api.add_node("not-m2p", "other-token")  # no m2p.io/mode label: not one of ours
        (tmp_path / "admin").write_text(admin)
        make, _ = world
        with History(tmp_path / "h.sqlite3") as h:
            assert kube_sweep.collect(h, KubeClient(api.url, str(tmp_path / "admin"), ca), now=time.time() + 60) == 1
            assert set(h.nodes()) == {"rig01"}
        with make() as client:
            row = client.get("/api/rigs/rig01").json()
        assert (row["mode"], row["mode_from"], row["leases"], row["agent_error"]) == (
            "draining", "api", ["lease/late"], "API: slow")
        (tmp_path / "admin").write_text("wrong")
        with History(tmp_path / "h.sqlite3") as h, pytest.raises(ApiError, match="HTTP 401"):
            kube_sweep.collect(h, KubeClient(api.url, str(tmp_path / "admin"), ca))
    finally:
        api.close()


def test_a_rig_read_only_through_the_api_is_charted_and_a_node_no_rig_owns_is_not(tmp_path):
    """The cards' readings in a node's status go to its rig's day charts, the rig named by the inventory (node name
    -> rig), never by the node: an unknown node's readings are stored for no one, and the same reading listed again
    adds nothing."""
    import json
    from datetime import UTC, datetime

    from m2p_sandbox.kube_api import KubeApiStandin  # the STAND-IN API server, on loopback
    from miner2provider.dashboard import kube_sweep
    from miner2provider.rigside.kube import KubeClient

    read_at = time.time() - 30
    stamp = datetime.fromtimestamp(read_at, UTC).isoformat(timespec="seconds")

    def status(temperature: float) -> str:
        return json.dumps({"mode": "leasing", "telemetry": {"read_at": stamp, "error": "", "cards": [
            {"index": 0, "uuid": "GPU-1", "name": "NVIDIA GeForce RTX 3090", "pci": "00000000:01:00.0",
             "health": "ok", "why": "", "temperature_c": temperature, "power_w": 301.5}]}})

    api = KubeApiStandin()
    try:
        assert api.authority is not None
        (tmp_path / "ca.crt").write_bytes(api.authority.pem)
        api.admin_tokens.add(admin := "admin-" + "z" * 20)
        (tmp_path / "admin").write_text(admin)
        for node, temperature in (("k3s-rig07", 71.0), ("stranger", 99.0)):
            api.add_node(node, f"agent-{node}", labels={"m2p.io/mode": "leasing"})
            api.nodes[node]["metadata"]["annotations"] = {"m2p.io/status": status(temperature)}
        client = KubeClient(api.url, str(tmp_path / "admin"), str(tmp_path / "ca.crt"))
        with History(tmp_path / "h.sqlite3") as h:
            for _ in range(2):
                assert kube_sweep.collect(h, client, rigs={"k3s-rig07": "rig07"}) == 2
            assert h.card_samples("rig07", read_at - 60) == {0: [(pytest.approx(read_at, abs=1), 71.0, 301.5)]}
            assert h.card_samples("stranger", 0) == {} and h.card_samples("k3s-rig07", 0) == {}
    finally:
        api.close()


def test_node_states_skip_foreign_nodes_and_unreadable_annotations():
    from miner2provider.dashboard.kube_sweep import node_states

    items = [{"metadata": {"name": "a", "labels": {"m2p.io/mode": "leasing"},
                           "annotations": {"m2p.io/status": "{not json"}}},
             {"metadata": {"name": "b", "labels": {}}}, {"metadata": {"labels": {"m2p.io/mode": "mining"}}}]
    assert node_states(items) == {"a": ("leasing", {})}
    odd = [{"metadata": {"name": "c", "labels": {"m2p.io/mode": "m" * 500},
                         "annotations": {"m2p.io/status": '{"leases": "abc", "last_error": "' + "e" * 200_000 + '"}'}}}]
    assert node_states(odd)["c"][0] == "m" * 63
    # JSON nested past the parser's depth (one rig's root, annotating its own node) is an unreadable status, never
    # an error that stops the dashboard's API sweep or the farm's reclaimer for every rig
    deep = [{"metadata": {"name": "d", "labels": {"m2p.io/mode": "leasing"}, "annotations": {"m2p.io/status": "[" * 100_000}}}]
    assert node_states(deep) == {"d": ("leasing", {})}


def test_a_node_status_of_the_wrong_shape_is_that_rigs_problem_not_the_pages(world):
    """Through the API anyone who may annotate a node sends anything: ``{"leases": "abc"}`` and a 200 KB
    error once made the fleet page a 500 for every rig."""
    make, _ = world
    with make() as client:
        with History(client.app.state.m2p.config.db) as h:
            h.set_nodes({"rig01": ("<i>x</i>", {"leases": "abc", "last_error": "<b>" * 50_000, "mode": 7})},
                        time.time() + 60)
        page = client.get("/")
        assert page.status_code == 200 and "<i>x</i>" not in page.text and "&lt;i&gt;x&lt;/i&gt;" in page.text
        row = client.get("/api/rigs/rig01").json()
        assert row["leases"] == [] and len(row["agent_error"]) <= 300


@settings(max_examples=60, deadline=None)
@given(WORLDS, st.integers(0, 4))
def test_the_fleet_pages_sql_sums_equal_the_spans(drawn, gpus):
    ledger, seen, since, until = world_of(drawn, gpus)
    with History(":memory:") as h:
        h.add_ledger("rig01", ledger, seen_at=T0)
        window = h.windows(since, until).get("rig01", views.Window((), None))
        kept = h.ledger("rig01", since, math.inf)  # as the rig page reads it (duplicates stored once)
    by_spans = views.span_totals(views.rig_spans(rig(kept, seen), since, until), 3)
    by_sql = views.window_totals(window, seen, since, until, 3)
    assert by_sql.seconds.keys() == by_spans.seconds.keys()
    for mode, value in by_spans.seconds.items():
        assert by_sql.seconds[mode] == pytest.approx(value, abs=1e-3)
    assert by_sql.gpu_seconds_leased == pytest.approx(by_spans.gpu_seconds_leased, abs=1e-3)
    assert by_sql.gpu_seconds_mined == pytest.approx(by_spans.gpu_seconds_mined, abs=1e-3)


def test_the_agents_measured_miner_and_quote_reach_the_row_from_ssh_or_the_api():
    """The sweep's report carries the agent's status checked (rigside/status.py); the API's annotation is the
    agent's raw status.json, checked by the same reader (a garbled figure is dropped, never shown)."""
    from miner2provider.rigside.status import AgentStatus, Measured, agent_status_from

    econ = economics.parse("mining_revenue_per_gpu_day: {rtx3090: 1.20}\nmining_revenue_per_mhs_day: {kawpow: 0.05}\n")
    swept = AgentStatus(True, "idle-mining", measured=Measured("kawpow", (58.0, 56.0), (240.0, 240.0)),
                        lease_pays=True, floor_per_hour=0.187, quote_source="measured kawpow hashrate of 2 GPUs",
                        reclaim_per_hour=0.0187, leased_gpus=1, leased_of=2, leased_per_hour=0.12,
                        hand_over="per card")
    assert views.economy(swept, econ) == {
        "lease_pays": True, "floor_per_hour": 0.187, "quote_source": "measured kawpow hashrate of 2 GPUs",
        "reclaim_per_hour": 0.0187, "leased": {"gpus": 1, "of": 2, "per_hour": 0.12,
                                               "hand_over": "the miner mines on the cards no lease holds"},
        "measured": {"algo": "kawpow", "mhs": [58.0, 56.0], "watts": [240.0, 240.0]}, "measured_per_gpu_day": 2.85}
    raw = {"mode": "idle-mining", "profit": {"lease_pays": True, "floor_per_hour": 0.187, "source": "x",
                                             "reclaim_per_hour": "lots", "leased": {"gpus": 9, "of": 2}},
           "measured": {"algo": "kawpow", "mhs": [58.0, "lots"], "watts": []}}
    assert views.economy(agent_status_from(raw), econ) == {"lease_pays": True, "floor_per_hour": 0.187,
                                                          "quote_source": "x", "reclaim_per_hour": None,
                                                          "leased": None, "measured": None,
                                                          "measured_per_gpu_day": None}
    unpriced = views.economy(dataclasses.replace(swept, measured=Measured("etchash", (58.0,), ())), econ)
    assert unpriced["measured_per_gpu_day"] is None


def test_the_fleet_page_shows_the_providers_own_status_escaped(tmp_path):
    """`m2p dashboard --provider`: the provider's status, asked at every sweep, on the fleet page; what it
    sends is escaped like everything a rig sends, and an unanswered provider is said so."""
    (tmp_path / "rigs.yml").write_text(INVENTORY)
    hosts = list(inventory.load(tmp_path / "rigs.yml").hosts)
    answers = iter([ProviderState("https://10.0.0.1:8443/status", "", {
        "hostname": "<script>alert(1)</script>", "address": "akash1x", "active_leases": 3, "open_orders": 2,
        "deployments": 3}), ProviderState("https://10.0.0.1:8443/status", "no answer (timed out)", {})])
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda rig: rig))
    for expected in (["<b>3</b> active leases", "<b>2</b> open orders", "&lt;script&gt;alert(1)&lt;/script&gt;"],
                     ["no answer (timed out)"]):
        config = DashboardConfig(tmp_path / "h.sqlite3", hosts, ECON, actions, lambda chosen: None, lambda chosen: 0,
                                 0, TOKEN, provider_status=lambda: next(answers), provider_label="Akash")
        with TestClient(create_app(config), base_url="http://127.0.0.1:8477") as client:
            assert sign_in(client).status_code == 303
            deadline = time.monotonic() + 10
            while "not asked yet" in (page := client.get("/").text) and time.monotonic() < deadline:
                time.sleep(0.05)  # the sweeper thread asks the provider right after start
        assert "Akash provider" in page and "<script>alert" not in page
        for text in expected:
            assert text in page, page[page.find('id="provider"'):][:600]


def test_a_report_stored_after_a_page_shows_on_the_next_though_the_pages_keep_reports_decoded(world, tmp_path):
    make, _ = world
    with make() as client:
        assert [r["mode"] for r in client.get("/api/rigs").json()["rigs"]] == ["idle-mining", "leasing"]
        assert client.get("/").status_code == 200  # the same reports again, from the page's cache
        later = report("rig01", ("lease/new",))
        with History(tmp_path / "h.sqlite3") as h:
            h.add_snapshot("rig01", time.time() + 1, {**snapshot(later, status_rows([later], {})[0]),
                                                      "read_at": time.time() + 1})
        fleet = client.get("/api/rigs").json()
        assert [(r["rig"], r["mode"], r["leases"]) for r in fleet["rigs"]] == [
            ("rig01", "leasing", ["lease/new"]), ("rig02", "leasing", ["lease/job"])]
        assert "lease/new" in client.get("/").text
