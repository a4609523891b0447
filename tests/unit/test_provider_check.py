"""`m2p provider check` for Akash (market/akash/checkup.py, outside.py, wallet.py): one verdict per need,
with what to do; the RPC node asked for real (a loopback STAND-IN of CometBFT's /status); DNS given (no
test may query a resolver outside this machine).  The 81.2.69.x addresses are public ones no test connects
to (documentation ranges such as 203.0.113.0/24 are not global, so they cannot stand for a public address)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import replace

import pytest

from m2p_sandbox.akash_node import RpcStandin
from miner2provider.detect.facts.listening import Listening
from miner2provider.fleet.provider import parse_sight
from miner2provider.market.akash import checkup, outside, provider_status, wallet
from miner2provider.market.akash.address import encode
from miner2provider.market.akash.checkup import RpcStatus, Seen
from miner2provider.market.akash.provider_file import parse
from miner2provider.market.base import FarmFacts, IngressSight

KEY = ("-----BEGIN TENDERMINT PRIVATE KEY-----\nkdf: bcrypt\nsalt: 00112233445566778899AABBCCDDEEFF\n"
       "type: secp256k1\n\nc29tZSBieXRlcw==\n=Ab12\n-----END TENDERMINT PRIVATE KEY-----\n")


def provider(tmp_path, domain: str = "farm.example.com"):
    return parse(f"domain: {domain}\nwallet: {{address: {encode(bytes(20))}, key_file: k.key, "
                 "passphrase_env: PASS}\nemail: ops@example.com\ningress_rig: rig01\nrpc_node: http://127.0.0.1:1\n",
                 str(tmp_path / "provider.yml"))


def seen(**changes) -> Seen:
    farm = {"rigs": 12, "cores": 72, "memory_mib": 140 * 1024, "ingress_address": "81.2.69.160",
            "ingress_listening": Listening((22,), (), True), "models": {"rig01": ("rtx3090",)},
            "server_reach": {"api.diadata.org:443": "", "api.coingecko.com:443": "Connection refused"},
            "ingress_sight": IngressSight()}
    farm.update({k: v for k, v in changes.items() if k in farm})
    base = {"farm": FarmFacts(**farm),
            "resolved": {"provider.farm.example.com": ("81.2.69.160",),
                         "m2p-check.ingress.farm.example.com": ("81.2.69.160",)},
            "rpc": RpcStatus("akashnet-2", 100, False), "wallet_problem": "",
            "reach": {port: "" for port in checkup.INGRESS_PORTS}, "acme_problem": ""}
    base.update({k: v for k, v in changes.items() if k in base})
    return Seen(**base)


def by_topic(found):
    """(topic, level) -> the texts of those verdicts, joined."""
    out: dict[tuple[str, str], str] = {}
    for v in found:
        out[(v.topic, v.level)] = out.get((v.topic, v.level), "") + v.text + "\n"
    return out


def test_a_ready_farm_gets_only_oks(tmp_path):
    found = checkup.verdicts(provider(tmp_path), seen())
    assert {v.level for v in found} == {"ok"}, found
    assert [v.topic for v in found] == ["audit floor", "ingress", "dns", "dns", "ports", "reach", "rpc", "price feed",
                                        "wallet", "tls", "reclamation"]


def test_check_states_the_trade_of_the_reclamation_window(tmp_path):
    from dataclasses import replace

    offered = checkup.verdicts(replace(provider(tmp_path), reclamation_window="36h"), seen())[-1]
    assert offered.topic == "reclamation" and "reclaims a rig's leases 36h before it must mine" in offered.text
    assert "reclamation_window: 36h too" in offered.text
    off = checkup.verdicts(replace(provider(tmp_path), reclamation_window=""), seen())[-1]
    assert "no reclamation window offered" in off.text and "lease_grace" in off.text


@pytest.mark.parametrize("changes, topic, level, said", [
    ({"cores": 24, "memory_mib": 64 * 1024}, "audit floor", "warn", "Homenode (AEP-60)"),
    ({"ingress_address": "192.168.1.20", "resolved": {"provider.farm.example.com": ("81.2.69.142",),
                                                      "m2p-check.ingress.farm.example.com": ("81.2.69.142",)}},
     "ingress", "warn", "forward tcp 80, 443, 8443, 8444 and tcp+udp 30000-32767"),
    ({"ingress_address": "100.72.3.4"}, "ingress", "fail", "carrier-grade NAT"),
    ({"resolved": {"provider.farm.example.com": "Name or service not known"}}, "dns", "fail",
     "provider.farm.example.com does not resolve (Name or service not known): add an A record"),
    ({"resolved": {"provider.farm.example.com": ("81.2.69.160",),
                   "m2p-check.ingress.farm.example.com": ("10.0.0.5",)}}, "dns", "fail",
     "*.ingress.farm.example.com resolves to 10.0.0.5, not a public address"),
    ({"resolved": {"provider.farm.example.com": ("81.2.69.192",),
                   "m2p-check.ingress.farm.example.com": ("81.2.69.160",)}}, "dns", "fail",
     "not the ingress rig's 81.2.69.160"),
    ({"ingress_listening": Listening((22, 80, 31000), (), True)}, "ports", "fail", "listens on 80, 31000"),
    ({"ingress_listening": Listening((), (), False)}, "ports", "warn", "has no ss"),
    ({"ingress_listening": "connection refused"}, "ports", "fail", "cannot read what listens on rig01"),
    ({"rpc": "http://127.0.0.1:1/status: [Errno 111] Connection refused"}, "rpc", "fail", "does not answer"),
    ({"rpc": RpcStatus("sandbox-01", 5, False)}, "rpc", "fail", "serves 'sandbox-01', not Akash's mainnet"),
    ({"rpc": RpcStatus("akashnet-2", 5, True)}, "rpc", "warn", "still catching up"),
    ({"wallet_problem": "the key file can be read by others"}, "wallet", "fail", "can be read by others"),
])
def test_each_problem_is_one_verdict_with_what_to_do(tmp_path, changes, topic, level, said):
    found = by_topic(checkup.verdicts(provider(tmp_path), seen(**changes)))
    assert said in found[(topic, level)], found


def test_a_dynamic_dns_domain_is_warned_about(tmp_path):
    p = provider(tmp_path, "myfarm.duckdns.org")
    names = checkup.names(p)
    found = by_topic(checkup.verdicts(p, seen(resolved={n: ("81.2.69.160",) for n in names})))
    assert "dynamic-DNS name (duckdns.org): Akash's audit refuses those" in found[("domain", "warn")]


def test_the_rpc_node_is_asked_for_its_status():
    rpc = RpcStandin(height=987)
    try:
        assert outside.rpc_status(rpc.url) == RpcStatus("akashnet-2", 987, False)
        assert outside.rpc_status(rpc.url.replace("http://", "tcp://")) == RpcStatus("akashnet-2", 987, False)
        assert rpc.paths == ["/status", "/status"]
        assert outside.rpc_status(rpc.url + "/cosmos") == f"{rpc.url}/cosmos/status: HTTP 404"
    finally:
        rpc.close()
    assert "Connection refused" in str(outside.rpc_status(rpc.url, timeout_s=2))


def test_dns_answers_and_failures_come_back_as_values(monkeypatch):
    assert "127.0.0.1" in outside.resolve("localhost")  # /etc/hosts: no resolver is asked
    failures = iter([socket.gaierror(socket.EAI_NONAME, "Name or service not known"), OSError("network down")])

    def refuse(*args):
        raise next(failures)

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    assert outside.resolve("farm.example.com") == "Name or service not known"
    assert outside.resolve("farm.example.com") == "network down"
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a: time.sleep(3))
    assert outside.resolve("farm.example.com", timeout_s=0.2) == "no answer in 0.2 s"


@pytest.mark.parametrize("mode, text, environ, said", [
    (0o600, KEY, {"PASS": "x"}, ""),
    (0o640, KEY, {"PASS": "x"}, "can be read by others (mode 0640): chmod 600"),
    (0o600, "hello", {"PASS": "x"}, "not an exported key"),
    (0o600, KEY, {}, "PASS (wallet.passphrase_env in"),
    (0o600, KEY, {"PASS": ""}, "is empty"),
])
def test_the_wallet_is_judged_without_quoting_it(tmp_path, mode, text, environ, said):
    key = tmp_path / "k.key"
    key.write_text(text)
    key.chmod(mode)
    problem = wallet.problem(provider(tmp_path), environ)
    assert (said in problem) if said else problem == "", problem
    assert "c29tZSBieXRlcw" not in problem


def test_a_missing_key_file_says_how_to_export_one(tmp_path):
    assert "provider-services keys export NAME" in wallet.problem(provider(tmp_path), {"PASS": "x"})


@pytest.mark.parametrize("doc, expected", [
    ({"cluster": {"leases": {"active": 2}}, "bidengine": {"orders": 1}, "manifest": {"deployments": 2},
      "address": "akash1x", "cluster_public_hostname": "provider.f.example"},
     {"active_leases": 2, "open_orders": 1, "deployments": 2, "address": "akash1x", "hostname": "provider.f.example"}),
    ({"cluster": {"leases": 4}}, {"active_leases": 4, "open_orders": 0, "deployments": 0, "address": "",
                                  "hostname": ""}),  # older providers: a bare number
])
def test_a_provider_status_reads_as_numbers(doc, expected):
    assert provider_status.parse(doc) == expected


@pytest.mark.parametrize("doc", [[], {"result": {}}, {"cluster": {"leases": {"active": -1}}}, {"cluster": {"leases": 1 << 40}},
                                 {"bidengine": {"orders": "many"}}, {"manifest": {"deployments": True}},
                                 {"cluster": "x"}])
def test_a_hostile_status_is_refused(doc):
    with pytest.raises((ValueError, TypeError, AttributeError)):
        provider_status.parse(doc)


def test_a_status_that_is_no_status_is_said_so():
    rpc = RpcStandin()  # answers /status with a CometBFT document: no provider's
    try:
        state = provider_status.fetch(rpc.url + "/status")
        assert (state.error, state.fields) == ("not an Akash provider's status", {})
        assert provider_status.fetch(rpc.url + "/none").error == "HTTP 404"
    finally:
        rpc.close()


def test_the_ingress_ports_from_the_farms_side_and_the_router_forwarding_said(tmp_path):
    private = seen(ingress_address="192.168.1.40", reach={80: "Connection refused", 443: "", 8443: "", 8444: ""})
    (reach,) = [v for v in checkup.verdicts(provider(tmp_path), private) if v.topic == "reach"]
    assert reach.level == "warn" and "80: Connection refused" in reach.text
    assert "forward tcp 80, 443, 8443, 8444 and tcp+udp 30000-32767 from its public address to 192.168.1.40" in reach.text
    (public,) = [v for v in checkup.verdicts(provider(tmp_path), seen()) if v.topic == "reach"]
    assert public.level == "ok" and "no port forwarding" in public.text


def test_a_server_without_the_price_feed_fails_and_says_what_bids_then_do(tmp_path):
    cut = FarmFacts(1, 8, 16384, "81.2.69.160", Listening((22,), (), True), {},
                    {"api.diadata.org:443": "Name or service not known", "api.coingecko.com:443": "timed out"})
    (feed,) = [v for v in checkup.verdicts(provider(tmp_path), seen(farm=cut)) if v.topic == "price feed"]
    assert feed.level == "fail" and "bids on no order" in feed.text and "api.diadata.org:443: Name" in feed.text
    unasked = FarmFacts(1, 8, 16384, "81.2.69.160", Listening((22,), (), True), {}, "rig0: no answer")
    (feed,) = [v for v in checkup.verdicts(provider(tmp_path), seen(farm=unasked)) if v.topic == "price feed"]
    assert feed.level == "warn" and "rig0: no answer" in feed.text


def test_each_rig_mixing_gpu_models_is_named(tmp_path):
    mixed = FarmFacts(3, 8, 16384, "81.2.69.160", Listening((22,), (), True),
                      {"rig01": ("rtx3090",), "rig02": ("rtx3060", "rtx3080"), "rig03": ("cmp90hx", "rtx3070")})
    found = [v for v in checkup.verdicts(provider(tmp_path), seen(farm=mixed)) if v.topic == "gpu models"]
    assert [v.text.split(" mixes ")[0] for v in found] == ["rig02", "rig03"]
    assert all(v.level == "warn" and "one GPU model per node" in v.text for v in found)


def test_reach_opens_a_real_connection_and_says_why_one_does_not():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    open_port = listener.getsockname()[1]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    free = closed.getsockname()[1]
    closed.close()
    try:
        found = outside.reach("127.0.0.1", (open_port, free), timeout_s=2.0)
    finally:
        listener.close()
    assert found[open_port] == ""
    assert found[free] == "Connection refused"


def test_a_real_certificate_needs_its_dns_credential_set(tmp_path):
    from dataclasses import replace

    from miner2provider.market.akash import acme_problem
    from miner2provider.market.akash.provider_file import AcmeDns

    asked = replace(provider(tmp_path), acme_dns=AcmeDns("cloudflare", "CF_API_TOKEN"))
    problem = acme_problem(asked, {})
    assert "CF_API_TOKEN (acme_dns.credential_env" in problem and acme_problem(asked, {"CF_API_TOKEN": "t"}) == ""
    (tls,) = [v for v in checkup.verdicts(asked, seen(acme_problem=problem)) if v.topic == "tls"]
    assert tls.level == "fail" and tls.text == problem
    (tls,) = [v for v in checkup.verdicts(asked, seen()) if v.topic == "tls"]
    assert tls.level == "ok" and "cloudflare DNS-01" in tls.text
    (plain,) = [v for v in checkup.verdicts(provider(tmp_path), seen()) if v.topic == "tls"]
    assert "self-signed" in plain.text and "set acme_dns" in plain.text


PRIVATE = "192.168.1.23"


def ingress_said(tmp_path, sight, dns=("81.2.69.160",)):
    found = checkup.verdicts(provider(tmp_path), seen(ingress_address=PRIVATE, ingress_sight=sight, resolved={
        "provider.farm.example.com": dns, "m2p-check.ingress.farm.example.com": dns}))
    return [(v.level, v.text) for v in found if v.topic == "ingress"]


def test_carrier_grade_nat_is_judged_from_outside_not_from_the_lan_address(tmp_path):
    home = IngressSight("192.168.1.1", "192.168.1.1", PRIVATE)  # behind a home router: all the rig itself sees
    # Without an echo service: the DNS answer stands for the router's address, and the verdict says how CGNAT shows.
    ((level, text),) = ingress_said(tmp_path, home)
    assert level == "warn" and text.startswith(f"ingress rig rig01 ({PRIVATE}) has a private address: forward tcp "
                                               "80, 443, 8443, 8444 and tcp+udp 30000-32767 from your router's "
                                               "public address (81.2.69.160, as your DNS says) to it. ")
    assert "set public_address_echo in provider.yml" in text
    assert text.endswith("if your router's own WAN address (its status page) is not 81.2.69.160, the line is "
                         "behind carrier-grade NAT and no lease is reachable: ask your ISP for a public address or "
                         "use a VPS as the ingress")
    # The rig's own route through the ISP's shared space: carrier-grade NAT, whatever its LAN address says.
    for sight, where in ((IngressSight("192.168.1.1", "100.72.0.1", PRIVATE), "its route to the internet leaves "
                                                                               "through 100.72.0.1"),
                         (IngressSight("100.72.0.1"), "its default gateway is 100.72.0.1"),
                         (IngressSight("", "", "100.72.3.4"), "its route's source address is 100.72.3.4")):
        ((level, text),) = ingress_said(tmp_path, sight)
        assert (level, text) == ("fail", f"ingress rig rig01 ({PRIVATE}): {where}, carrier-grade NAT (your ISP's "
                                         "NAT): nothing from the internet reaches it; ask your ISP for a public "
                                         "address, or use a public node (a VPS) as the ingress")
    # The echo service's answer Y: the public address as the internet sees it.
    ((level, text),) = ingress_said(tmp_path, replace(home, public_address="81.2.69.160"))
    assert (level, text) == ("warn", f"ingress rig rig01 ({PRIVATE}) has a private address: forward tcp 80, 443, "
                                     "8443, 8444 and tcp+udp 30000-32767 from your router's public address "
                                     "81.2.69.160 (as the internet sees it) to it")
    moved = checkup.verdicts(provider(tmp_path), seen(ingress_address=PRIVATE, ingress_sight=replace(
        home, public_address="81.2.69.161")))
    said = [(v.level, v.text) for v in moved if v.topic in ("ingress", "dns")]
    assert said[0] == ("fail", "provider.farm.example.com points at 81.2.69.160; the farm leaves from 81.2.69.161 "
                               "(the echo service's answer): point provider.farm.example.com and "
                               "*.ingress.farm.example.com at 81.2.69.161, or pick an ingress rig on the line "
                               "behind 81.2.69.160")
    assert [v.topic for v in moved][1:3] == ["dns", "ingress"]
    assert said[1][0] == "warn" and "from your router's public address 81.2.69.161" in said[1][1]
    ((level, text),) = ingress_said(tmp_path, replace(home, public_address="100.64.9.9"))
    assert level == "fail" and "saw the farm leave from 100.64.9.9, not a public address: carrier-grade NAT" in text
    ((level, text),) = ingress_said(tmp_path, replace(home, echo_problem="the echo service did not answer (URLError)"))
    assert level == "warn" and "m2p could not ask: the echo service did not answer (URLError)" in text
    ((level, text),) = ingress_said(tmp_path, "rig01: connection refused")
    assert level == "warn" and "the rig's route could not be read (rig01: connection refused)" in text


def test_the_rigs_route_source_says_whether_it_is_public(tmp_path):
    """The rig's route leaves from the public address (a rig on the line itself): no forwarding, with or without
    the echo; a rig the inventory names by a VPN address in 100.64.0.0/10 is judged by the way it leaves."""
    public = IngressSight("81.2.69.1", "81.2.69.1", "81.2.69.160")
    for sight in (public, replace(public, public_address="81.2.69.160")):
        ((level, text),) = ingress_said(tmp_path, sight)
        assert level == "ok" and f"ingress rig rig01 ({PRIVATE}) has a public address (81.2.69.160)" in text
        assert "no port forwarding" in text
    reach = {v.topic: v.text for v in checkup.verdicts(provider(tmp_path), seen(ingress_address=PRIVATE,
                                                                               ingress_sight=public))}["reach"]
    assert "no port forwarding: the rig's address is public" in reach
    vpn = checkup.verdicts(provider(tmp_path), seen(ingress_address="100.100.7.7", ingress_sight=IngressSight(
        "192.168.1.1", "192.168.1.1", PRIVATE)))
    ((level, text),) = [(v.level, v.text) for v in vpn if v.topic == "ingress"]
    assert level == "warn" and "has a private address: forward" in text and f"to {PRIVATE}." in text


def test_the_ingress_rigs_sight_is_read_from_its_own_output():
    """Golden output of ``ip -4 route show default``, ``ip -4 route get`` (iproute2) and echo answers."""
    text = ("default\tdefault via 192.168.1.1 dev eth0 proto dhcp src 192.168.1.23 metric 100\n"
            "toward\t81.2.69.160 via 192.168.1.1 dev eth0 src 192.168.1.23 uid 0 \n"
            "echo\t81.2.69.160\n")
    assert parse_sight(text, asked=True) == IngressSight("192.168.1.1", "192.168.1.1", "192.168.1.23", "81.2.69.160")
    cgnat = ("default\tdefault via 100.72.0.1 dev wan0 proto static\n"
             "toward\t81.2.69.160 via 100.72.0.1 dev wan0 src 100.72.3.4 uid 1000 \n")
    assert parse_sight(cgnat, asked=False) == IngressSight("100.72.0.1", "100.72.0.1", "100.72.3.4")
    # On the line itself (the route toward its own public address is local), and a tunnel's link route.
    assert parse_sight("toward\tlocal 81.2.69.160 dev lo table local src 81.2.69.160 uid 0 \n", asked=False) == \
        IngressSight("", "", "81.2.69.160")
    assert parse_sight("default\tdefault dev wg0 scope link\n", asked=False) == IngressSight()
    assert parse_sight("echo\t81.2.69.160\n", asked=True).public_address == "81.2.69.160"
    assert parse_sight("echo\t2001:db8::1\n", asked=True) == IngressSight(
        echo_problem="the echo service answered '2001:db8::1', not an IPv4 address")
    assert parse_sight("echo\t<html>\n", asked=True).echo_problem == \
        "the echo service answered '<html>', not an IPv4 address"
    assert parse_sight("echo\t\n", asked=True).echo_problem == "the echo service answered '', not an IPv4 address"
    assert parse_sight("echo-error\tTimeoutError\n", asked=True).echo_problem == \
        "the echo service did not answer (TimeoutError)"
    assert parse_sight("", asked=True).echo_problem == "no answer (no python3 on the rig?)"
    assert parse_sight("", asked=False) == IngressSight()


def test_public_address_echo_must_be_https(tmp_path):
    text = (tmp_path / "p.yml")
    base = ("domain: farm.example.com\nwallet: {address: " + encode(bytes(20)) + ", key_file: k.key, passphrase_env: "
            "PASS}\nemail: ops@example.com\ningress_rig: rig01\nrpc_node: http://127.0.0.1:1\n")
    assert parse(base + "public_address_echo: https://echo.invalid/ip\n", str(text)).public_address_echo == \
        "https://echo.invalid/ip"
    with pytest.raises(Exception, match=r"p.yml:6: public_address_echo.*an https URL"):
        parse(base + "public_address_echo: http://echo.invalid/ip\n", str(text))


def test_the_ingress_rig_is_asked_its_route_toward_the_dns_answer_and_the_echo(tmp_path, monkeypatch):
    """_SIGHT run here by sh, as the rig's shell runs it: a stand-in ``ip`` prints iproute2's output, and the
    echo is a loopback listener answering with an address as plain text."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from m2p_sandbox.served import serve_in_background
    from miner2provider.core.inventory import Host
    from miner2provider.detect.ssh import Result
    from miner2provider.fleet import provider as provider_run

    (tmp_path / "ip").write_text("#!/bin/sh\necho \"$*\" >> \"$0.args\"\ncase \"$*\" in\n"
                                 "*default*) echo 'default via 192.168.1.1 dev eth0 proto dhcp metric 100' ;;\n"
                                 "*get*) printf '81.2.69.160 via 192.168.1.1 dev eth0 src 192.168.1.23 uid 0 \\n"
                                 "    cache \\n' ;;\nesac\n")
    (tmp_path / "ip").chmod(0o755)

    class Echo(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"81.2.69.160\n" + b"x" * 4096)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Echo)
    serve_in_background(server)
    scripts = []

    def here(host, script, opts, **kw):
        scripts.append(script)
        done = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, timeout=30,
                              env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
        return Result(host, done.stdout, done.returncode)

    monkeypatch.setattr(provider_run, "run_one", here)
    rig = Host("rig01", "192.168.1.23", 22, "user", None, None, None, ("all",), {})
    try:
        echo = f"http://127.0.0.1:{server.server_port}/ip"
        assert provider_run.ingress_sight(rig, echo, "81.2.69.160", None) == IngressSight(
            "192.168.1.1", "192.168.1.1", "192.168.1.23", "81.2.69.160")
        assert (tmp_path / "ip.args").read_text() == "-4 route show default\n-4 route get 81.2.69.160\n"
        # No echo named: none asked; a target that is not an address never reaches the shell.
        assert provider_run.ingress_sight(rig, "", "$(reboot)", None) == IngressSight("192.168.1.1")
        assert "reboot" not in scripts[-1] and (tmp_path / "ip.args").read_text().count("\n") == 3
    finally:
        server.shutdown()
    monkeypatch.setattr(provider_run, "run_one", lambda host, script, opts, **kw: Result(
        host, failure="refused", error="connection refused (is sshd running?)"))
    assert provider_run.ingress_sight(rig, "", "", None) == "rig01: connection refused (is sshd running?)"


def test_the_akash_target_is_the_first_public_dns_answer(tmp_path, monkeypatch):
    from miner2provider.market.akash import AKASH

    monkeypatch.setattr(outside, "resolve", lambda name: ("10.0.0.5", "81.2.69.160") if name.startswith(
        "provider.") else ())
    assert AKASH.public_target(provider(tmp_path)) == "81.2.69.160"
    monkeypatch.setattr(outside, "resolve", lambda name: "Name or service not known")
    assert AKASH.public_target(provider(tmp_path)) == ""
