"""``GET /metrics`` (issue 56): the fleet in Prometheus's text format, read back with the client library's own
parsers (the text format's, and OpenMetrics' where a scrape asks for it as Prometheus does); guarded like the API
(no token 401, a wrong one 401 and counted by the limiter the login shares); a rig's hostile card names come out
as label values that read back whole; no secret in the exposition; the Grafana dashboard in docs/ names only
metrics the exposition has."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import time
from pathlib import Path

import pytest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient
from test_dashboard import ECON, INVENTORY, TOKEN, report, sign_in  # tests/unit is on sys.path (no package)

from miner2provider.alerts.dispatch import Outbox
from miner2provider.alerts.receivers import SendFailed
from miner2provider.alerts.rules import Message
from miner2provider.core import inventory
from miner2provider.dashboard.actions import Actions, Fleet
from miner2provider.dashboard.app import DashboardConfig, create_app
from miner2provider.dashboard.collect import snapshot
from miner2provider.dashboard.history import History
from miner2provider.dashboard.metrics import metric_names
from miner2provider.dashboard.sessions import FAILURES_PER_CLIENT
from miner2provider.detect.report import status_rows
from miner2provider.detect.ssh import SshOptions
from miner2provider.rigside.ledger import Entry
from miner2provider.rigside.status import Card, Telemetry

HOUR = 3600.0
DOCS = Path(__file__).resolve().parents[2] / "docs"
# What a compromised rig sends in a field it controls: the browser test's HOSTILE (tests/integration/
# test_dashboard.py), and the characters the text format must escape in a label value (backslash, quote, newline).
HOSTILE = ['<img src=x onerror="window.__pwned=1" id=pwn1>', "</script><script>window.__pwned=2</script>",
           '"><svg onload="window.__pwned=3" id=pwn3>', "<b id=pwn4>bold</b>{{7*7}}", 'a\\"b\nc} x{y="1"} 7\n# EOF']
READ_AT = "2026-11-24T05:00:00+00:00"
# rig01's agent read three cards: a hostile name on card 0, card 1 hot; card 1 named again (a rig may write anything)
CARDS = (Card(0, HOSTILE[2], HOSTILE[4], health="ok", temperature_c=64.0, fan_percent=55.0, power_w=220.5,
              power_limit_w=300.0, sm_mhz=1500.0, memory_mhz=9501.0, utilization_percent=97.0,
              memory_used_mib=4096.0, memory_total_mib=24576.0),
         Card(1, "GPU-hot", "NVIDIA GeForce RTX 3090", health="hot", why="91 °C, the limit is 85 °C",
              temperature_c=91.0, power_w=340.0),
         Card(1, "GPU-again", "a second card 1", temperature_c=20.0))
# What Prometheus 3 sends with its default scrape protocols (prometheus/prometheus scrape/scrape_test.go,
# TestAcceptHeader, with the UTF-8 escaping it validates names under by default).
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
                     "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;"
                     "q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2")


@pytest.fixture
def scrape(tmp_path):
    """A dashboard over two rigs: rig01 idle-mining with telemetry (a hostile card name, a hot card), rig02 with a
    one-GPU lease for the last hour and no telemetry; each mined 4 hours before that."""
    (tmp_path / "rigs.yml").write_text(INVENTORY)
    hosts = list(inventory.load(tmp_path / "rigs.yml").hosts)
    db, now = tmp_path / "h.sqlite3", time.time()
    reports = [report("rig01"), report("rig02", ("lease/job",))]
    first = reports[0].facts
    assert first is not None
    reports[0] = dataclasses.replace(reports[0], facts=dataclasses.replace(first, agent_status=dataclasses.replace(
        first.agent_status, telemetry=Telemetry(READ_AT, CARDS))))
    with History(db) as history:
        for rig, row in zip(reports, status_rows(reports, {"rig01": "rig01", "rig02": "rig02"}), strict=True):
            leases = rig.facts.agent_status.leases if rig.facts else ()
            history.add_snapshot(rig.name, now, {**snapshot(rig, row), "read_at": now})
            history.add_ledger(rig.name, [Entry(now - 5 * HOUR, "idle-mining", gpus=1),
                                          Entry(now - HOUR, "leasing", gpus=1, leases=tuple(x.pod for x in leases),
                                                leased=len(leases))], seen_at=now)
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda rig: rig))
    app = create_app(DashboardConfig(db, hosts, ECON, actions, lambda chosen: None, lambda chosen: 0, 0, TOKEN))

    @contextlib.contextmanager
    def client():
        with TestClient(app, base_url="http://127.0.0.1:8477") as made:
            yield made
    return client, now


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def samples(text: str, parse=text_string_to_metric_families) -> dict[tuple[str, frozenset], float]:
    """(sample name, its labels) -> value, every sample of the exposition, each once."""
    found: dict[tuple[str, frozenset], float] = {}
    for family in parse(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in found, f"{key} twice"
            found[key] = sample.value
    return found


def value(found, name, **labels):
    return found[(name, frozenset(labels.items()))]


def card(rig, index, uuid, model, **extra):
    return {"rig": rig, "card": str(index), "uuid": uuid, "model": model, **extra}


def test_the_exposition_parses_and_carries_every_rig_and_card_with_the_fleet_pages_figures(scrape):
    client, now = scrape
    with client() as c:
        answer = c.get("/metrics", headers=bearer(TOKEN))
    assert answer.status_code == 200 and answer.headers["content-type"] == CONTENT_TYPE_PLAIN_0_0_4
    assert answer.headers["content-encoding"] == "gzip"  # httpx asks for it, as Prometheus does, and unpacks it
    found = samples(answer.text)
    hot, odd = card("rig01", 1, "GPU-hot", "NVIDIA GeForce RTX 3090"), card("rig01", 0, HOSTILE[2], HOSTILE[4])
    assert value(found, "m2p_gpu_temperature_celsius", **hot) == 91.0
    assert value(found, "m2p_gpu_power_draw_watts", **hot) == 340.0
    assert value(found, "m2p_gpu_health", **hot, health="hot") == 1.0
    assert value(found, "m2p_gpu_health", **hot, health="ok") == 0.0
    assert value(found, "m2p_gpu_health", **odd, health="ok") == 1.0
    assert (value(found, "m2p_gpu_fan_speed_ratio", **odd), value(found, "m2p_gpu_utilization_ratio", **odd)) == (
        0.55, 0.97)
    assert value(found, "m2p_gpu_memory_used_bytes", **odd) == 4096 * 2**20
    assert value(found, "m2p_gpu_memory_total_bytes", **odd) == 24576 * 2**20
    assert value(found, "m2p_gpu_power_limit_watts", **odd) == 300.0
    assert value(found, "m2p_gpu_sm_clock_hertz", **odd) == 1.5e9
    assert ("m2p_gpu_fan_speed_ratio", frozenset(hot.items())) not in found  # [N/A]: no sample, not a made-up 0
    # one card per index: the second "card 1" the rig wrote is not a second series of the same labels
    assert not any(dict(labels).get("uuid") == "GPU-again" for _, labels in found)
    assert {dict(labels)["rig"] for name, labels in found if name.startswith("m2p_gpu_")} == {"rig01"}
    # per rig: modes as an enum, leases, the ledger's GPU-seconds and the economics file's earnings (rtx3090:
    # 0.25 a GPU-hour leased, 1.20 a GPU-day mined), when each was last read
    assert value(found, "m2p_rig_mode", rig="rig01", mode="idle-mining") == 1.0
    assert value(found, "m2p_rig_mode", rig="rig02", mode="leasing") == 1.0
    assert sum(v for (name, labels), v in found.items() if name == "m2p_rig_mode") == 2.0
    assert (value(found, "m2p_rig_leases", rig="rig01"), value(found, "m2p_rig_leases", rig="rig02")) == (0.0, 1.0)
    assert value(found, "m2p_rig_gpus", rig="rig02") == 1.0 and value(found, "m2p_rig_reachable", rig="rig02") == 1.0
    assert value(found, "m2p_rig_gpu_seconds_total", rig="rig02", use="leased") == pytest.approx(HOUR)
    assert value(found, "m2p_rig_gpu_seconds_total", rig="rig02", use="mined") == pytest.approx(4 * HOUR)
    assert value(found, "m2p_rig_gpu_seconds_total", rig="rig01", use="leased") == 0.0
    assert value(found, "m2p_rig_earnings_total", rig="rig02", source="lease", currency="USD") == 0.25
    assert value(found, "m2p_rig_earnings_total", rig="rig02", source="mining", currency="USD") == 0.2
    assert value(found, "m2p_rig_last_seen_timestamp_seconds", rig="rig01") == pytest.approx(now)
    assert value(found, "m2p_rig_telemetry_timestamp_seconds", rig="rig01") == 1_795_496_400.0  # READ_AT
    assert ("m2p_rig_telemetry_timestamp_seconds", frozenset({("rig", "rig02")})) not in found


def test_a_scrape_as_prometheus_sends_it_gets_openmetrics_that_parses(scrape):
    client, _ = scrape
    with client() as c:
        answer = c.get("/metrics", headers={**bearer(TOKEN), "Accept": PROMETHEUS_ACCEPT})
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/openmetrics-text")
    found = samples(answer.text, openmetrics_families)
    assert value(found, "m2p_gpu_temperature_celsius", **card("rig01", 1, "GPU-hot", "NVIDIA GeForce RTX 3090")) == 91
    assert value(found, "m2p_gpu_temperature_celsius", **card("rig01", 0, HOSTILE[2], HOSTILE[4])) == 64


def test_hostile_card_names_round_trip_as_label_values(scrape, tmp_path):
    """Every HOSTILE string as a card's name and UUID comes back whole as that card's labels, and adds no series;
    a made-up mode on the rig's node reads as unknown."""
    client, _ = scrape
    cards = tuple(Card(n, text, text, temperature_c=float(n)) for n, text in enumerate(HOSTILE))
    with History(tmp_path / "h.sqlite3") as history:
        at, stored = history.latest("rig02") or (0.0, {})
        stored["facts"]["agent_status"]["telemetry"] = {"read_at": READ_AT, "cards": [
            {"index": c.index, "uuid": c.uuid, "name": c.name, "temperature_c": c.temperature_c} for c in cards]}
        history.add_snapshot("rig02", at + 1, stored)
        history.set_nodes({"rig01": (HOSTILE[3], {"schema": 1, "mode": HOSTILE[3]})}, time.time() + 60)
    with client() as c:
        text = c.get("/metrics", headers=bearer(TOKEN)).text
    found = samples(text)
    for n, hostile in enumerate(HOSTILE):
        assert value(found, "m2p_gpu_temperature_celsius", **card("rig02", n, hostile, hostile)) == n
    assert sum(dict(labels)["rig"] == "rig02" for name, labels in found
               if name == "m2p_gpu_temperature_celsius") == len(HOSTILE)  # one series a card: none of a name's making
    assert all(name.startswith("m2p_") for name, _ in found)
    # a mode the node's annotation makes up is "unknown", not a series of its own
    assert value(found, "m2p_rig_mode", rig="rig01", mode="unknown") == 1.0
    assert not any(HOSTILE[3] in dict(labels).values() for name, labels in found if name == "m2p_rig_mode")


def test_metrics_are_guarded_like_the_api_and_wrong_tokens_are_limited(scrape):
    client, _ = scrape
    with client() as c:
        assert c.get("/metrics", follow_redirects=False).status_code == 401  # a scraper gets no login page
        for n in range(FAILURES_PER_CLIENT):
            wrong = c.get("/metrics", headers=bearer(f"guess-{n:020d}"))
            assert wrong.status_code == 401 and "m2p_" not in wrong.text
        limited = c.get("/metrics", headers=bearer(TOKEN))  # the guesser waits, even with the right token
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
        assert c.get("/api/rigs", headers=bearer(TOKEN)).status_code == 429  # one limit for every way in
    with client() as c:  # the same app: a session a browser opened reads it too, as it reads /api/
        c.app.state.m2p.limiter = type(c.app.state.m2p.limiter)()
        assert sign_in(c).status_code == 303 and c.get("/metrics").status_code == 200
        assert "GET /metrics" in c.get("/api").json()


def test_no_secret_reaches_the_exposition(scrape):
    client, _ = scrape
    with client() as c:
        text = c.get("/metrics", headers=bearer(TOKEN)).text
    assert "m2p_rig_mode" in text
    for secret in (TOKEN, "pw-Sup3rSecret!", "Sup3rSecret"):
        assert secret not in text


def test_the_grafana_dashboard_names_only_metrics_the_exposition_has(scrape):
    client, _ = scrape
    with client() as c:
        exposed = {name for name, _ in samples(c.get("/metrics", headers=bearer(TOKEN)).text)}
    text = (DOCS / "grafana-m2p.json").read_text()
    board = json.loads(text)
    exprs = [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]
    named = set(re.findall(r"\bm2p_[a-z_]+", text))  # in the panels' queries and the rig variable's alike
    assert exprs and named and named <= exposed, named - exposed
    assert {"m2p_gpu_temperature_celsius", "m2p_gpu_power_draw_watts", "m2p_rig_mode", "m2p_rig_leases"} <= named
    documented = set(re.findall(r"\bm2p_[a-z_]+", (DOCS / "metrics.md").read_text()))
    # the alert receivers' counters are exported only with an alert file (this dashboard has none)
    alerts_only = {"m2p_alert_deliveries", "m2p_alert_deliveries_total", "m2p_alert_retries", "m2p_alert_retries_total"}
    assert exposed == {name for name in metric_names()
                       if name not in {"m2p_rig_gpu_seconds", "m2p_rig_earnings", *alerts_only}}
    assert documented <= metric_names() and exposed <= documented, (documented - metric_names(), exposed - documented)
    assert {"m2p_alert_deliveries_total", "m2p_alert_retries_total"} <= documented


def test_the_alert_receivers_deliveries_are_counted_per_receiver_and_outcome(tmp_path):
    """With an alert file (--alerts), /metrics counts each receiver's messages sent, given up and dropped, and its
    retries: a receiver that keeps failing shows as its given-up count rising (a Prometheus rule can say it through
    another channel).  Without one, no alert series at all."""
    class Flaky:
        name, kind = "hook", "webhook"

        def __init__(self) -> None:
            self.calls = 0

        def send(self, message: Message) -> None:
            self.calls += 1
            if "fails" in message.line:
                raise SendFailed("HTTP 500")

        def secrets(self) -> tuple:
            return ()

    (tmp_path / "rigs.yml").write_text(INVENTORY)
    hosts = list(inventory.load(tmp_path / "rigs.yml").hosts)
    db = tmp_path / "h.sqlite3"
    History(db).close()
    actions = Actions(Fleet(str(tmp_path / "rigs.yml"), SshOptions(known_hosts=tmp_path / "kh"), None, (),
                            lambda rig: rig))
    outbox = Outbox([Flaky()], attempts=3, backoff_s=0.01)
    try:
        outbox.submit([Message("firing", "k1", "silent", "rig01", "rig01 fails to answer", 1.0),
                       Message("firing", "k2", "silent", "rig02", "rig02 is silent", 1.0)])
        assert outbox.wait(10)
        with TestClient(create_app(DashboardConfig(db, hosts, ECON, actions, lambda chosen: None, lambda chosen: 0, 0,
                                                   TOKEN, alert_outbox=outbox)), base_url="http://127.0.0.1:8477") as c:
            found = samples(c.get("/metrics", headers=bearer(TOKEN)).text)
    finally:
        outbox.close()
    hook = {"receiver": "hook", "kind": "webhook"}
    assert value(found, "m2p_alert_deliveries_total", **hook, outcome="sent") == 1.0
    assert value(found, "m2p_alert_deliveries_total", **hook, outcome="given_up") == 1.0
    assert value(found, "m2p_alert_deliveries_total", **hook, outcome="dropped") == 0.0
    assert value(found, "m2p_alert_retries_total", **hook) == 2.0
    with TestClient(create_app(DashboardConfig(db, hosts, ECON, actions, lambda chosen: None, lambda chosen: 0, 0,
                                               TOKEN)), base_url="http://127.0.0.1:8477") as c:
        assert "m2p_alert" not in c.get("/metrics", headers=bearer(TOKEN)).text
