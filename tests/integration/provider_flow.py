"""Issue 35: `m2p provider` on the converted sandbox farm of test_convert (its rigs, shared: no new boots).

Called from test_convert while the farm is converged.  The farm's k3s server cv-hive (k3s data on a
data disk) gets Akash's provider through k3s's deploy folder: what m2p writes there is rendered by a real
helm (4.1.4) over Akash's real charts (../shared/akash) with the wallet Secret read back from the API,
the way k3s's Helm job renders it.  STAND-INS: the Kubernetes API (kube_api.py: it keeps the Secret
``kubectl apply --server-side`` sends, folding stringData into data as the API does) and the stand-in k3s's
kubectl; k3s's deploy controller is played by the test (``api.apply`` of the files m2p wrote).

Issue 36: provider.yml offers a reclamation window, so apply installs the farm's reclaimer on cv-hive (a
systemd unit running m2p's zipapp with the server's python3).  It talks to the stand-in API as its own
ServiceAccount and reaches the STAND-IN chain (akash_chain.py: AEP-82's rules, a test chain whose
governance bound lets a 40 s window) only through ``kubectl exec`` into the STAND-IN provider pod.  A
worker that must mine now (its agent's status, standing in: the agent's side is tests/unit) has a lease with
a window: the reclaimer reclaims it and closes it at its deadline, and the chain refuses nothing.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import secrets
import shlex
from pathlib import Path
from typing import Any
from unittest import mock

import yaml

from m2p_sandbox import helm, network
from m2p_sandbox.akash_chain import ChainStandin, ProviderPod
from m2p_sandbox.akash_node import ProviderStatusStandin, RpcStandin
from m2p_sandbox.kube_api import KubeApiStandin
from miner2provider.cli import main
from miner2provider.market.akash import checkup, outside
from miner2provider.market.akash.address import encode

from .conftest import m2p, outcomes, point_k3s_kubectl_at, run, ssh

DATA_DIR = "/srv/k3s-data"
MANIFESTS = f"{DATA_DIR}/server/manifests"
ECONOMICS = ("mining_revenue_per_gpu_day: {rtx3090: 0.95, rtx3060: 0.45, rtx3080: 0.80}\n"
             "gpu_power_watts: {default: 200, rtx3090: 300}\npower_price_per_kwh: 0.12\nmargin: 0.15\n")
KEY = ("-----BEGIN TENDERMINT PRIVATE KEY-----\nkdf: bcrypt\nsalt: 5E0C2A1B9D8F7E6D5C4B3A2918070605\n"
       "type: secp256k1\n\nc2FuZGJveCBrZXkgYnl0ZXMsIG5vdCBhIHJlYWwgd2FsbGV0Cg==\n=Zx9Q\n"
       "-----END TENDERMINT PRIVATE KEY-----\n")


def provider_goes_on_and_off(farm: dict[str, Any]) -> None:
    env, common, tmp = farm["env"], farm["common"], farm["tmp"]
    ssh_args = [a for a in common if a != "--bundle" and not a.endswith("/bundle") and a != "-i"
                and not a.endswith("rigs.yml")]
    passphrase = "pass-" + secrets.token_urlsafe(18)
    env = {**env, "AKASH_KEY_PASS": passphrase}
    rpc = RpcStandin()
    files = _provider_files(tmp, rpc.url)
    inv_all, inv = farm["inventory"], _without_broken(farm["inventory"], tmp)
    apply = ["provider", "apply", "-p", str(files["provider"]), "--economics", str(files["economics"]),
             "--charts", str(files["charts"]), *ssh_args]
    api = KubeApiStandin(host=str(network.gateway()), tls=True)
    admin = secrets.token_urlsafe(16)
    api.admin_tokens.add(admin)
    assert api.authority is not None
    inv = _reclaimer_reaches(inv, api)
    # The farm's nodes as k3s registers them: the server with the label k3s gives it; cv-plain's kubelet (standing
    # in: a rig whose root was taken) claiming the ingress label, which m2p takes back.
    api.add_node("cv-hive", secrets.token_urlsafe(8), {"node-role.kubernetes.io/control-plane": "true"})
    api.add_node("cv-plain", secrets.token_urlsafe(8), {INGRESS_LABEL: "true"}, gpus=1)
    chain = ChainStandin(min_window_s=40.0)
    pod = ProviderPod(chain, PROVIDER, KEY)
    api.exec_in[("akash-services", "akash-provider-0", "provider")] = pod.run
    reclaimer_token = secrets.token_urlsafe(24)
    runs: dict[str, str] = {}
    try:
        point_k3s_kubectl_at(farm["hive"], api, admin)
        _check_reads_the_farm(farm, files, inv, ssh_args, passphrase, rpc, api)
        # Bad input first: nothing is installed half-way.
        refused = m2p(*apply, "-i", str(inv_all), "--yes", env=env)  # cv-locked does not answer
        assert refused.returncode == 11 and "cv-locked: FAILED" in refused.stderr, refused.stderr[-2000:]
        files["key"].chmod(0o644)
        loose = m2p(*apply, "-i", str(inv), "--yes", env=env)
        assert loose.returncode == 8 and "can be read by others (mode 0644): chmod 600" in loose.stderr, loose.stderr
        files["key"].chmod(0o600)
        unset = m2p(*apply, "-i", str(inv), "--yes", env={k: v for k, v in env.items() if k != "AKASH_KEY_PASS"})
        assert unset.returncode == 8 and "AKASH_KEY_PASS" in unset.stderr and "is not set" in unset.stderr
        runs.update(refused=refused.stdout + refused.stderr, loose=loose.stderr, unset=unset.stderr)
        assert _server_files(farm) == [] and not api.has("Secret", "m2p-akash-provider-wallet", "kube-system")

        check = m2p(*apply, "-i", str(inv), "--check", "--json", env=env)
        assert check.returncode == 1 and outcomes(check)["cv-hive"]["result"] == "pending", check.stderr[-2000:]
        assert _server_files(farm) == [] and not api.has("Secret", "m2p-akash-provider-wallet", "kube-system")

        first = m2p(*apply, "-i", str(inv), "--yes", "--json", "--keep-artifacts", str(tmp / "provider-art"), env=env)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        assert outcomes(first)["cv-hive"]["result"] == "changed"
        # The inventory operator's Deployment is not there yet (k3s's Helm job makes it): no record, and the
        # owner is told to apply again.
        assert "run `m2p provider apply` again in a few minutes" in outcomes(first)["cv-hive"]["message"]
        assert "rtx3090.24Gi=" in first.stderr and "rtx3060.12Gi=" in first.stderr  # the prices it set, said
        written = _server_files(farm)
        assert written == ["m2p-akash-00-namespaces.yaml", "m2p-akash-01-crds.yaml", "m2p-akash-02-gateway-api-crds.yaml",
                           "m2p-akash-03-ingress-crds.yaml", "m2p-akash-10-akash-gateway.yaml",
                           "m2p-akash-10-akash-hostname-operator.yaml", "m2p-akash-10-akash-inventory-operator.yaml",
                           "m2p-akash-10-akash-provider.yaml", "m2p-akash-10-ngf.yaml", "m2p-akash-20-gpu-list.yaml",
                           "m2p-akash-30-reclaimer.yaml"], written
        # The namespaces k3s has not made yet: no TLS Secret yet (the next apply makes them).
        assert not api.has("Secret", "wildcard-ingress-tls", "akash-gateway")
        assert _reclaimer_unit(farm) == "inactive"  # its token is not there yet: not started
        _renders_from_what_the_server_holds(farm, api, passphrase)
        _token_controller(farm, api, reclaimer_token)

        _status_shows_provider_and_rigs(inv, files, ssh_args, env)

        finish = m2p(*apply, "-i", str(inv), "--yes", "--json", env=env)  # the operator is there now: patched
        assert outcomes(finish)["cv-hive"]["result"] == "changed", finish.stdout[-2000:] + finish.stderr[-2000:]
        operator = api.objects[("Deployment", "akash-services", "operator-inventory")]
        env_of = {e["name"]: e.get("value") for c in operator["spec"]["template"]["spec"]["containers"]
                  for e in c.get("env", [])}
        assert env_of["AP_PROVIDER_CONFIGS_URL"] == "http://m2p-gpu-list.akash-services.svc.cluster.local"
        assert "AP_CONFIG" in env_of  # the chart's own entries stay
        _ingress_made_on_the_server(api)
        assert _reclaimer_unit(farm) == "active"
        lease = _a_lease_on_a_rig_that_must_mine(api, chain)
        again = m2p(*apply, "-i", str(inv), "--yes", "--json", env=env)
        assert outcomes(again)["cv-hive"] == {**outcomes(again)["cv-hive"], "result": "converged",
                                              "message": "provider up to date (fingerprint matches)"}
        runs.update(check=check.stdout + check.stderr, first=first.stdout + first.stderr,
                    finish=finish.stdout + finish.stderr, again=again.stdout + again.stderr)
        runs.update(status=_status_shows_the_deadline(inv, ssh_args, env, lease),
                    reclaimer=_reclaimed_and_closed(farm, chain, lease))

        remove = ["provider", "remove", "-i", str(inv), *ssh_args]
        off = m2p(*remove, "--yes", "--json", env=env)
        assert off.returncode == 0 and outcomes(off)["cv-hive"]["result"] == "changed", off.stderr[-2000:]
        assert _server_files(farm) == [] and _reclaimer_unit(farm) == "absent"
        left = [name for name in ("akash-provider", "akash-gateway", "akash-inventory-operator",
                                  "akash-hostname-operator", "ngf") if api.has("HelmChart", name, "kube-system")]
        assert INGRESS_LABEL not in api.nodes["cv-hive"]["metadata"]["labels"]  # m2p's label taken off
        assert left == [] and not api.has("Secret", "m2p-akash-provider-wallet", "kube-system"), left
        off_again = m2p(*remove, "--yes", "--json", env=env)
        assert outcomes(off_again)["cv-hive"]["result"] == "converged", off_again.stdout
        runs.update(off=off.stdout + off.stderr, off_again=off_again.stdout + off_again.stderr)

        # The passphrase and the key are in no output, no runner artifact and no file on the server.
        artifacts = {str(p): p.read_text(errors="replace") for p in (tmp / "provider-art").rglob("*") if p.is_file()}
        assert len(artifacts) > 5
        key_b64 = base64.b64encode(KEY.encode()).decode()
        for secret in (passphrase, base64.b64encode(passphrase.encode()).decode(), key_b64, "c2FuZGJveCBrZXkg",
                       reclaimer_token):
            leaks = [where for where, text in {**runs, **artifacts}.items() if secret in text]
            assert not leaks, f"wallet material in {leaks}"
        with ssh(farm["hive"]) as client:
            rc, found = run(client, f"sudo grep -rlF -e {shlex.quote(passphrase)} -e {shlex.quote(key_b64[:40])} "
                                    f"/etc /var/lib/m2p {DATA_DIR}/server /root /home /tmp 2>/dev/null; true")
        assert found.strip() == "", found
        assert pod.ran and all("PRIVATE KEY" not in " ".join(argv) for argv in pod.ran)  # the key stayed in the pod
    finally:
        api.close()
        rpc.close()
        with ssh(farm["hive"]) as client:
            run(client, "sudo rm -f /etc/m2p-standin/kube-api.json /etc/m2p-standin/kube-api-ca.crt")


def _status_shows_provider_and_rigs(inv: Path, files: dict[str, Path], ssh_args: list[str], env: dict[str, str]) -> None:
    """`provider status`: the provider's own /status (a STAND-IN over HTTPS with its own certificate) beside each
    rig; a provider that does not answer is exit 8, said in the JSON too."""
    status = ProviderStatusStandin({"cluster": {"leases": {"active": 1}, "inventory": {}}, "bidengine": {"orders": 3},
                                    "manifest": {"deployments": 1}, "address": "akash1standin",
                                    "cluster_public_hostname": "provider.farm.m2p-test.example"})
    try:
        args = ["provider", "status", "-i", str(inv), "-p", str(files["provider"]), *ssh_args, "--json"]
        shown = m2p(*args, "--url", status.url + "/status", env=env)
        assert shown.returncode == 0, shown.stderr[-2000:]
        doc = json.loads(shown.stdout)
        assert {k: doc["provider"][k] for k in ("active_leases", "open_orders", "deployments", "error")} == {
            "active_leases": 1, "open_orders": 3, "deployments": 1, "error": ""}
        assert {r["rig"]: r["state"] for r in doc["rigs"]} == {"cv-hive": "converged", "cv-plain": "converged"}
    finally:
        status.close()
    gone = m2p(*args, "--url", status.url + "/status", env=env)
    assert gone.returncode == 8 and json.loads(gone.stdout)["provider"]["error"].startswith("no answer"), gone.stdout


def _check_reads_the_farm(farm: dict[str, Any], files: dict[str, Path], inv: Path, ssh_args: list[str],
                          passphrase: str, rpc: RpcStandin, api: KubeApiStandin) -> None:
    """`provider check` in-process (its DNS lookups given: no test may ask a resolver outside this machine):
    the rigs' cores and memory, cv-hive's private address and listeners and its ingress ports (nothing answers
    before apply), the server's reach of the price feed (the STAND-IN API's address stands for it: no test may
    reach the internet), the RPC stand-in, the wallet, one GPU model per rig."""
    public = ("81.2.69.160",)  # a public address no test connects to
    feed = api.url.split("://", 1)[1].rstrip("/")
    out = io.StringIO()
    with mock.patch.object(outside, "resolve", lambda name: public), \
            mock.patch.object(checkup, "PRICE_FEEDS", (feed, "127.0.0.1:9")), \
            mock.patch.dict(os.environ, {**farm["env"], "AKASH_KEY_PASS": passphrase}), contextlib.redirect_stdout(out):
        code = main(["provider", "check", "-i", str(inv), "-p", str(files["provider"]), *ssh_args, "--json"])
    found = {(v["topic"], v["level"]): v["text"] for v in json.loads(out.getvalue())}
    assert code == 0, found  # warnings only
    assert "2 rigs:" in found[("audit floor", "warn")] and "Homenode" in found[("audit floor", "warn")]
    assert f"ingress rig cv-hive ({farm['hive'].address}) has a private address: forward" in found[("ingress", "warn")]
    assert "nothing on cv-hive holds 80, 443, 8443, 8444" in found[("ports", "ok")]
    assert f"the ingress does not answer on cv-hive ({farm['hive'].address}) (80: Connection refused" in found[
        ("reach", "warn")]
    assert f"forward tcp 80, 443, 8443, 8444 and tcp+udp 30000-32767 from its public address to {farm['hive'].address}" \
        in found[("reach", "warn")]
    assert found[("price feed", "ok")].startswith(f"the k3s server reaches {feed}")
    assert not any(topic == "gpu models" for topic, _ in found)  # one model per rig here
    assert found[("rpc", "ok")] == f"the RPC node {rpc.url} answers (akashnet-2, block 23456789)"
    assert ("wallet", "ok") in found and ("dns", "ok") in found
    assert rpc.paths == ["/status"]


def _provider_files(tmp: Path, rpc_url: str) -> dict[str, Path]:
    charts = helm.chart_folder(tmp / "akash-charts")
    key = tmp / "provider.key"
    key.write_text(KEY)
    key.chmod(0o600)
    provider = tmp / "provider.yml"
    assert m2p("provider", "init", str(provider)).returncode == 0
    text = provider.read_text()
    for old, new in (("domain: farm.example.com", "domain: farm.m2p-test.example"),
                     ("address: akash1qqqsyqcyq5rqwzqfpg9scrgwpugpzysnwduagr", f"address: {encode(bytes(range(20, 40)))}"),
                     ("ingress_rig: rig01", "ingress_rig: cv-hive"),
                     ("rpc_node: https://rpc.example.com:443", f"rpc_node: {rpc_url}"),
                     ("# reclamation_window: 24h", "reclamation_window: 36h")):
        assert old in text, old
        text = text.replace(old, new)
    provider.write_text(text)
    economics = tmp / "economics.yml"
    economics.write_text(ECONOMICS)
    return {"charts": charts, "key": key, "provider": provider, "economics": economics}


def _without_broken(inventory: Path, tmp: Path) -> Path:
    """The farm without cv-locked (its password is wrong: every rig must answer for the provider)."""
    doc = yaml.safe_load(inventory.read_text())
    del doc["all"]["children"]["broken"]
    trimmed = tmp / "rigs-provider.yml"
    trimmed.write_text(yaml.safe_dump(doc))
    return trimmed


def _server_files(farm: dict[str, Any]) -> list[str]:
    with ssh(farm["hive"]) as client:
        rc, out = run(client, f"sudo find {MANIFESTS} -name 'm2p-akash-*' -printf '%f %m\\n' | sort")
    assert rc == 0, out
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert all(mode == "600" for _, mode in rows), rows
    return [name for name, _ in rows]


def _renders_from_what_the_server_holds(farm: dict[str, Any], api: KubeApiStandin, passphrase: str) -> None:
    """Each HelmChart m2p wrote, as k3s's deploy controller and Helm job take it, renders Akash's stack."""
    with ssh(farm["hive"]) as client:
        rc, text = run(client, f"sudo sh -c 'cat {MANIFESTS}/m2p-akash-10-*.yaml'")
    assert rc == 0, text[-500:]
    helmcharts = {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d}
    assert passphrase not in text
    api.apply(list(helmcharts.values()))  # k3s's deploy controller, standing in
    with ssh(farm["hive"]) as client:
        rc, namespaces = run(client, f"sudo cat {MANIFESTS}/m2p-akash-00-namespaces.yaml")
    assert rc == 0, namespaces[-500:]
    api.apply([d for d in yaml.safe_load_all(namespaces) if d])
    secret = api.objects[("Secret", "kube-system", "m2p-akash-provider-wallet")]
    assert "stringData" not in secret
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    for obj in helmcharts.values():
        helm.check_helmchart(obj)
    provider = helm.render(helmcharts["akash-provider"], {"m2p-akash-provider-wallet": values})
    api.apply(helm.render(helmcharts["akash-inventory-operator"]))  # k3s's Helm job, standing in
    by = {(o["kind"], o["metadata"]["name"]): o for o in provider}
    api.apply([by[("StatefulSet", "akash-provider")]])  # the provider's Helm job, standing in (m2p patches it)
    # Helm's release history as Helm 3+ stores it: one Secret per revision (its values, the key among them).
    api.apply([{"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
                "metadata": {"name": f"sh.helm.release.v1.akash-provider.v{n}", "namespace": "akash-services",
                             "labels": {"owner": "helm", "name": "akash-provider", "status": status,
                                        "version": str(n)}}, "data": {"release": "c3RhbmQtaW4="}}
               for n, status in ((1, "superseded"), (2, "superseded"), (3, "deployed"))])
    keys = by[("Secret", "akash-provider-keys")]["data"]
    assert base64.b64decode(keys["key.txt"]).decode() == KEY
    assert base64.b64decode(keys["key-pass.txt"]).decode() == passphrase
    mappings = by[("ConfigMap", "akash-provider-pricing")]["data"]["PRICE_TARGET_GPU_MAPPINGS"]
    assert {pair.split("=")[0] for pair in mappings.split(",")} == {"rtx3090.24Gi", "rtx3090", "rtx3060.12Gi",
                                                                    "rtx3060"}, mappings
    pod = by[("StatefulSet", "akash-provider")]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": "true"}
    env = {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env", [])}
    assert env["AKASH_RECLAMATION_WINDOW"] == "36h"
    host = by[("ConfigMap", "akash-provider-main")]["data"]["AKASH_CLUSTER_PUBLIC_HOSTNAME"]
    assert host == "provider.farm.m2p-test.example"


INGRESS_LABEL = "node-restriction.kubernetes.io/m2p-ingress"


def _ingress_made_on_the_server(api: KubeApiStandin) -> None:
    """What the role made on cv-hive with the admin's credential: the ingress rig's label (cv-plain, which a kubelet
    labelled so, loses it), the self-signed TLS Secrets (made there with openssl), and the provider's network-policy
    setting by the name it reads."""
    assert api.nodes["cv-hive"]["metadata"]["labels"][INGRESS_LABEL] == "true"
    assert INGRESS_LABEL not in api.nodes["cv-plain"]["metadata"]["labels"]
    for name in ("akash-default-tls", "wildcard-ingress-tls"):
        secret = api.objects[("Secret", "akash-gateway", name)]
        assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"tls.crt", "tls.key"}
    crt = base64.b64decode(api.objects[("Secret", "akash-gateway", "wildcard-ingress-tls")]["data"]["tls.crt"])
    assert crt.startswith(b"-----BEGIN CERTIFICATE-----")
    provider = api.objects[("StatefulSet", "akash-services", "akash-provider")]
    env = {e["name"]: e.get("value") for c in provider["spec"]["template"]["spec"]["containers"]
           for e in c.get("env", [])}
    assert env["AKASH_DEPLOYMENT_NETWORK_POLICIES_ENABLED"] == "true" and env["AKASH_WITHDRAWAL_PERIOD"] == "12h"
    history = sorted(name for kind, ns, name in api.objects if kind == "Secret" and name.startswith("sh.helm.release"))
    assert history == ["sh.helm.release.v1.akash-provider.v3"]  # only the deployed revision keeps the wallet


PROVIDER = "akash1" + "q" * 38  # the stand-in chain's provider (the pod signs as it)
TENANT = "akash1" + "p" * 38


def _reclaimer_reaches(inventory: Path, api: KubeApiStandin) -> Path:
    """The reclaimer's API address and CA on cv-hive: the stand-in's, not k3s's 127.0.0.1:6443 (role variables
    market_provider_api_server / _api_ca, as an owner whose API listens elsewhere sets them)."""
    doc = yaml.safe_load(inventory.read_text())
    for group in doc["all"]["children"].values():
        if "cv-hive" in (group.get("hosts") or {}):
            group["hosts"]["cv-hive"].update(market_provider_api_server=api.url,
                                             market_provider_api_ca="/etc/m2p-standin/kube-api-ca.crt")
    inventory.write_text(yaml.safe_dump(doc))
    return inventory


def _token_controller(farm: dict[str, Any], api: KubeApiStandin, token: str) -> None:
    """k3s's deploy controller makes the reclaimer's objects, and the API's token controller fills its Secret."""
    with ssh(farm["hive"]) as client:
        rc, text = run(client, f"sudo cat {MANIFESTS}/m2p-akash-30-reclaimer.yaml")
    assert rc == 0, text
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert {d["kind"] for d in docs} == {"Namespace", "ServiceAccount", "Secret", "ClusterRole", "ClusterRoleBinding",
                                         "Role", "RoleBinding"}
    secret = next(d for d in docs if d["kind"] == "Secret")
    api.apply([d for d in docs if d is not secret])
    api.apply([{**secret, "data": {"token": base64.b64encode(token.encode()).decode()}}])
    api.add_reclaimer(token)  # the RBAC those objects grant, as the stand-in enforces it


def _reclaimer_unit(farm: dict[str, Any]) -> str:
    """active (its credential root-only), inactive (installed, waiting for its token) or absent (no unit)."""
    with ssh(farm["hive"]) as client:
        rc, out = run(client, "systemctl is-active m2p-reclaimer.service; test -e "
                              "/etc/systemd/system/m2p-reclaimer.service && echo unit; sudo stat -c '%a %U' "
                              "/etc/m2p/reclaimer /etc/m2p/reclaimer/token 2>/dev/null")
    lines = out.split()
    if lines[0] == "active":
        assert lines[1:] == ["unit", "700", "root", "600", "root"], out
        return "active"
    return "inactive" if "unit" in lines else "absent"


def _a_lease_on_a_rig_that_must_mine(api: KubeApiStandin, chain: ChainStandin) -> Any:
    """cv-plain's agent says it must mine now; a lease with a 40 s window runs on it (Akash's labels)."""
    import time
    from datetime import UTC, datetime

    api.add_node("cv-plain", secrets.token_urlsafe(8), {"m2p.io/mode": "draining"}, gpus=1)
    now = datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="seconds")
    api.nodes["cv-plain"]["metadata"]["annotations"]["m2p.io/status"] = json.dumps({"mode": "draining", "mine_at": now})
    label = "akash.network/lease.id."
    api.apply([{"kind": "Namespace", "metadata": {"name": "lease-ns-1", "labels": {
        f"{label}owner": TENANT, f"{label}dseq": "4242", f"{label}gseq": "1", f"{label}oseq": "1",
        f"{label}provider": PROVIDER}}}])
    api.add_pod("web", "cv-plain", 1, namespace="lease-ns-1")
    return chain.create_lease(TENANT, 4242, PROVIDER, 40.0)


def _status_shows_the_deadline(inv: Path, ssh_args: list[str], env: dict[str, str], lease: Any) -> str:
    """`m2p status` shows the lease on cv-plain, the rig it runs on, as reclaiming until the chain's deadline (read
    from the reclaimer's status file on cv-hive, the server), and the reclaimer's last sweep on cv-hive's row."""
    import time

    from miner2provider.market.akash.reclaim import utc

    until = time.monotonic() + 60
    while lease.state != "reclaiming" and time.monotonic() < until:
        time.sleep(1)
    assert lease.state == "reclaiming" and lease.deadline is not None, lease.state
    rows: dict[str, Any] = {}
    while time.monotonic() < until + 40:  # the reclaimer's next sweep (15 s) asks the chain again, then writes it
        shown = m2p("status", "-i", str(inv), *ssh_args, "--json", env=env)
        assert shown.returncode == 0, shown.stderr[-2000:]
        rows = {r["rig"]: r for r in json.loads(shown.stdout)}
        found = [(r["state"], r["deadline"]) for r in rows["cv-plain"]["reclaims"] if "/4242/" in r["lease"]]
        if found == [("reclaiming", utc(lease.deadline))]:
            assert rows["cv-hive"]["reclaimer"]["last_error"] == "" and rows["cv-hive"]["reclaims"] == []
            text = m2p("status", "-i", str(inv), *ssh_args, env=env).stdout
            assert f"reclaiming until {utc(lease.deadline)}" in text, text
            return text
        time.sleep(2)
    raise AssertionError(f"m2p status never showed the reclaiming lease: {json.dumps(rows)[-2000:]}")


def _reclaimed_and_closed(farm: dict[str, Any], chain: ChainStandin, lease: Any) -> str:
    """The reclaimer on cv-hive reclaims the lease at once (mining is due) and closes it at its deadline."""
    import time

    deadline = time.monotonic() + 150
    while lease.state != "closed" and time.monotonic() < deadline:
        time.sleep(2)
    with ssh(farm["hive"]) as client:
        rc, out = run(client, "sudo cat /var/lib/m2p/reclaimer/status.json /var/lib/m2p/reclaimer/ledger.jsonl; "
                              "sudo journalctl -u m2p-reclaimer --no-pager -n 20")
    assert lease.state == "closed", f"{chain.txs}\n{out}"
    assert [tx["kind"] for tx in chain.txs] == ["start-reclaim", "close"] and chain.refused() == [], chain.txs
    assert chain.txs[1]["block_time"] >= lease.deadline
    assert '"sent": "close"' in out and '"result": "accepted"' in out, out
    return out
