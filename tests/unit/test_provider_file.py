"""provider.yml (market/akash/provider_file.py): the starter `m2p provider init` writes is valid, every
mistake is one line at its file:line, and a wallet's secret pasted anywhere is refused without being quoted."""

from __future__ import annotations

import pytest

from miner2provider.cli import main
from miner2provider.core.errors import ProviderFileError
from miner2provider.market.akash import provider_file

GOOD = """domain: farm.example.com
wallet:
  key_file: keys/provider.key
  passphrase_env: AKASH_KEY_PASS
  address: akash1365yvmc4s7awdyj3n2sav7xfx76adc6dnmlx63
email: ops@farm.example.com
website: https://farm.example.com
organization: Example Farm
region: eu-central
ingress_rig: rig01
rpc_node: http://akash-node:26657
reclamation_window: 1h30m
charts: {provider: "19.0.3"}
"""
MNEMONIC = " ".join(["abandon"] * 11 + ["about"])


def test_a_good_file_reads_whole():
    got = provider_file.parse(GOOD, "/farm/provider.yml")
    assert (got.domain, got.email, got.ingress_rig, got.rpc_node, got.region) == (
        "farm.example.com", "ops@farm.example.com", "rig01", "http://akash-node:26657", "eu-central")
    assert str(got.wallet.key_file) == "/farm/keys/provider.key" and got.wallet.passphrase_env == "AKASH_KEY_PASS"
    assert got.wallet.address == "akash1365yvmc4s7awdyj3n2sav7xfx76adc6dnmlx63"
    assert got.reclamation_window_s == 5400
    assert got.charts == {**provider_file.CHARTS, "provider": "19.0.3"}


@pytest.mark.parametrize("change, line, said", [
    (("domain: farm.example.com", "domain: 203.0.113.7"), 1, "a DNS name you control"),
    (("domain: farm.example.com", "domain: localhost"), 1, "a DNS name you control"),
    (("email: ops@farm.example.com", "email: ops"), 6, "an address such as"),
    (("rpc_node: http://akash-node:26657", "rpc_node: akash-node:26657"), 11, "the RPC node's URL"),
    (("reclamation_window: 1h30m", "reclamation_window: 720"), 12, "a bare number is no duration"),
    (("reclamation_window: 1h30m", "reclamation_window: 30m"), 12, "from 1h to 720h"),
    (("reclamation_window: 1h30m", "reclamation_window: 721h"), 12, "from 1h to 720h"),
    (("reclamation_window: 1h30m", "reclamation_window: 1 day"), 12, "a Go duration"),
    (("region: eu-central", "region: eu central"), 9, "letters, digits"),
    (('charts: {provider: "19.0.3"}', "charts: {provider: 19.0}"), 13, "a chart version"),
    (('charts: {provider: "19.0.3"}', 'charts: {akash-node: "1.0.0"}'), 13, "unknown charts key 'akash-node'"),
    (("  passphrase_env: AKASH_KEY_PASS", "  passphrase_env: hunter2 is my pass"), 4, "the NAME of an environment"),
    (("  passphrase_env: AKASH_KEY_PASS", "  passphrase: x"), 4, "unknown wallet key 'passphrase'"),
    (("akash1365yvmc4s7awdyj3n2sav7xfx76adc6dnmlx63", "akash1365yvmc4s7awdyj3n2sav7xfx76adc6dnmlx64"), 5,
     "wallet.address 'akash1365yvmc4s7awdyj3n2sav7xfx76adc6dnmlx64': the provider's akash1"),
    (("  address: akash1365yvmc4s7awdyj3n2sav7xfx76adc6dnmlx63\n", ""), 3, "wallet.address missing"),
    (("ingress_rig: rig01", "ingres_rig: rig01"), 10, "unknown provider key 'ingres_rig'"),
    (("ingress_rig: rig01\n", ""), 1, "ingress_rig missing"),
    (("email: ops@farm.example.com", f"email: {MNEMONIC}"), 6, "looks like the wallet's key or mnemonic"),
    (("organization: Example Farm", "organization: |\n  -----BEGIN TENDERMINT PRIVATE KEY-----\n  abc"), 8,
     "looks like the wallet's key or mnemonic"),
    (("website: https://farm.example.com", "website: [a, b]"), 7, "a single value"),
    (("domain: farm.example.com", "domain: farm.example.com\ndomain: other.example.com"), 2, "given twice"),
    (("charts: {", "acme_dns: {provider: route53, credential_env: AWS}\ncharts: {"), 13,
     "acme_dns.provider 'route53': cloudflare or google"),
    (("charts: {", "acme_dns: {provider: cloudflare, credential_env: my token}\ncharts: {"), 13,
     "acme_dns.credential_env: the NAME of an environment variable"),
    (("charts: {", "acme_dns: {provider: google, credential_env: GCP_KEY}\ncharts: {"), 13,
     "acme_dns.project '': the Google Cloud project"),
    (("charts: {", "acme_dns: {provider: cloudflare, credential_env: CF, project: p-12345}\ncharts: {"), 13,
     "acme_dns.project is for google only"),
    (("charts: {", "acme_dns: cloudflare\ncharts: {"), 13, "acme_dns is a mapping"),
    (('charts: {provider: "19.0.3"}', 'charts: {cert-manager: "v1.19.1"}'), 13, "unknown charts key 'cert-manager'"),
])
def test_every_mistake_is_one_line_at_its_place(change, line, said):
    text = GOOD.replace(*change)
    assert text != GOOD
    with pytest.raises(ProviderFileError) as caught:
        provider_file.parse(text, "p.yml")
    assert caught.value.where == f"p.yml:{line}" and said in caught.value.message, caught.value
    assert MNEMONIC not in str(caught.value) and "BEGIN" not in str(caught.value)


def test_a_dns_provider_for_a_real_certificate_brings_cert_managers_chart():
    got = provider_file.parse(GOOD.replace("charts: {", "acme_dns: {provider: google, credential_env: GCP_KEY, "
                                                         "project: my-farm-dns}\ncharts: {"), "p.yml")
    assert got.acme_dns == provider_file.AcmeDns("google", "GCP_KEY", "my-farm-dns")
    assert got.charts["cert-manager"] == "v1.19.1" and "cert-manager" not in provider_file.parse(GOOD, "p.yml").charts


def test_go_durations_read_as_go_reads_them():
    assert [provider_file.go_duration_s(t) for t in ("24h", "1h30m", "90m", "1.5h", "", "1d", "h", "-1h")] == [
        86400, 5400, 5400, 5400, None, None, None, None]


def test_provider_init_writes_a_valid_starter_and_keeps_an_existing_file(tmp_path, capsys):
    target = tmp_path / "provider.yml"
    assert main(["provider", "init", str(target)]) == 0
    parsed = provider_file.load(target)
    assert parsed.reclamation_window == "" and parsed.charts == provider_file.CHARTS  # off unless set
    target.write_text("mine\n")
    assert main(["provider", "init", str(target)]) == 2
    assert "exists; use --force" in capsys.readouterr().err and target.read_text() == "mine\n"
