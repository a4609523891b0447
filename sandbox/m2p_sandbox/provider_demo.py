"""`m2p demo`'s provider steps: the converted demo rig, its own k3s server, becomes an Akash provider and
stops being one.  Everything outside m2p is a STAND-IN: the Kubernetes API (kube_api.py), the RPC node and
the provider's /status (akash_node.py), DNS (the check's lookups answered here: the demo asks no resolver),
the wallet (an armored block that is no real key), the internet's AKT price feed (the stand-in API's address
answers for it), and k3s's deploy controller and Helm jobs (the namespaces, the inventory operator's Deployment
and the provider's StatefulSet put in the API by hand; NGF's chart rendered by the real helm to show where its
data plane runs).  Akash's chart archives are the test data in ../shared/akash; without them the
demo says so and goes on without these steps.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shlex
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import yaml

from m2p_sandbox import helm, tenant
from m2p_sandbox.akash_node import ProviderStatusStandin, RpcStandin
from m2p_sandbox.kube_api import KubeApiStandin
from m2p_sandbox.rig import Rig
from miner2provider.cli.app import main
from miner2provider.market.akash import checkup, outside
from miner2provider.market.akash.address import encode

PASS_ENV = "M2P_DEMO_AKASH_KEY_PASS"
KEY = ("-----BEGIN TENDERMINT PRIVATE KEY-----\nkdf: bcrypt\nsalt: 0F1E2D3C4B5A69788796A5B4C3D2E1F0\n"
       "type: secp256k1\n\nbTJwIGRlbW86IGEgU1RBTkQtSU4sIG5vIHJlYWwga2V5\n=DeMo\n"
       "-----END TENDERMINT PRIVATE KEY-----\n")
Step = tuple[str, list[str] | Callable[[], int], int]  # what it shows, the command or a stand-in's act, its exit


def charts_here() -> Path | None:
    return helm.CHARTS if (helm.CHARTS / "provider-19.0.2.tgz").is_file() else None


def steps(rig: Rig, api: KubeApiStandin, work: Path, inv: Path, ssh: list[str], stack: ExitStack) -> list[Step]:
    charts = charts_here()
    if charts is None:
        def absent() -> int:
            print(f"(no Akash chart archives at {helm.CHARTS}: the provider steps are left out)")
            return 0
        return [("the provider steps need Akash's chart archives (docs/akash-provider.md)", absent, 0)]
    folder = helm.chart_folder(work / "akash-charts")
    rpc = RpcStandin()
    stack.callback(rpc.close)
    status = ProviderStatusStandin({"cluster": {"leases": {"active": 0}}, "bidengine": {"orders": 0},
                                    "manifest": {"deployments": 0}, "cluster_public_hostname": "provider.demo.example",
                                    "address": encode(bytes(range(40, 60)))})
    stack.callback(status.close)
    key = work / "provider.key"
    key.write_text(KEY)
    key.chmod(0o600)
    (work / "provider.yml").write_text(
        f"domain: demo.example\nwallet:\n  address: {encode(bytes(range(40, 60)))}\n  key_file: provider.key\n"
        f"  passphrase_env: {PASS_ENV}\nemail: ops@demo.example\nregion: demo\ningress_rig: demo-hive\n"
        f"rpc_node: {rpc.url}\nreclamation_window: 24h\n")
    os.environ[PASS_ENV] = "demo-" + secrets.token_urlsafe(12)
    admin = secrets.token_urlsafe(16)
    api.admin_tokens.add(admin)
    assert api.authority is not None
    ca_file = "/etc/m2p-standin/kube-api-ca.crt"  # the stand-in kubectl checks the API (TLS) against it
    config = json.dumps({"url": api.url, "token": admin, "ca_file": ca_file})
    ca = shlex.quote(api.authority.pem.decode())
    client = tenant.ssh(rig)
    try:  # the stand-in k3s's kubectl talks to the stand-in API as the server's admin
        code, out = tenant.run(client, f"sudo mkdir -p /etc/m2p-standin && echo {ca} | sudo tee {ca_file} > /dev/null"
                                       f" && echo {shlex.quote(config)} | sudo tee /etc/m2p-standin/kube-api.json")
    finally:
        client.close()
    if code != 0:
        raise RuntimeError(f"could not point the demo rig's stand-in kubectl at the stand-in API: {out}")
    common = ["-i", str(inv), "-p", str(work / "provider.yml"), *ssh]
    apply = ["provider", "apply", *common, "--economics", str(work / "economics.yml"), "--charts", str(folder)]

    feed = api.url.split("://", 1)[1].rstrip("/")  # the AKT price feed's STAND-IN: an address the rig reaches

    def check() -> int:
        with mock.patch.object(outside, "resolve", lambda name: ("81.2.69.160",)), \
                mock.patch.object(checkup, "PRICE_FEEDS", (feed,)):  # DNS and the price feed, STAND-INS
            return main(["provider", "check", *common])

    def helm_job() -> int:
        manifests = _server_manifests(rig)
        api.apply([d for d in yaml.safe_load_all(manifests["m2p-akash-00-namespaces.yaml"]) if d])
        api.apply([{"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "operator-inventory", "namespace": "akash-services"},
                    "spec": {"template": {"spec": {"containers": [{"name": "operator-inventory", "env": []}]}}}},
                   {"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "metadata": {"name": "akash-provider", "namespace": "akash-services"},
                    "spec": {"template": {"spec": {"containers": [{"name": "provider", "env": []}]}}}}])
        if "demo-hive" not in api.nodes:
            api.add_node("demo-hive", secrets.token_urlsafe(8), {"node-role.kubernetes.io/control-plane": "true"})
        print("(STAND-IN: k3s made the namespaces, and its Helm jobs the inventory operator's Deployment and the "
              "provider's StatefulSet)")
        return 0

    def ingress() -> int:
        (chart,) = [d for d in yaml.safe_load_all(_server_manifests(rig)["m2p-akash-10-ngf.yaml"]) if d]
        proxy = next(o for o in helm.render(chart) if o["kind"] == "NginxProxy")["spec"]["kubernetes"]["daemonSet"]
        ports = ", ".join(str(p["port"]) for p in proxy["container"]["hostPorts"])
        print(f"NGINX Gateway Fabric (release ngf in nginx-gateway, rendered by helm): its data plane takes host ports "
              f"{ports} on the node labelled {proxy['pod']['nodeSelector']}")
        labelled = sorted(n for n, node in api.nodes.items() if "node-restriction.kubernetes.io/m2p-ingress"
                          in (node["metadata"].get("labels") or {}))
        print(f"nodes m2p labelled as the ingress (with the admin's credential; no kubelet may): {labelled}")
        for name in ("akash-default-tls", "wildcard-ingress-tls"):
            secret = api.objects.get(("Secret", "akash-gateway", name))
            made = secret is not None and base64.b64decode(secret["data"]["tls.crt"]).startswith(b"-----BEGIN")
            print(f"Secret akash-gateway/{name}: {'made on the server, self-signed' if made else 'missing'}")
            if not made:
                return 1
        return 0 if labelled == ["demo-hive"] else 1

    return [
        ("provider check: is the farm ready to be an Akash provider? (warnings: below the audit floor, a "
         "private ingress address)", check, 0),
        ("provider apply --check: what would change (exit 1: changes pending)", [*apply, "--check"], 1),
        ("provider apply: Akash's stack through k3s's Helm controller, the wallet only in a Secret",
         [*apply, "--yes"], 0),
        ("k3s's Helm job installs the charts (STAND-IN)", helm_job, 0),
        ("provider apply again: the inventory operator is pointed at m2p's card list, the ingress's TLS Secrets "
         "are made on the server and its rig labelled", [*apply, "--yes"], 0),
        ("the ingress: NGINX Gateway Fabric's data plane on the ingress rig only, its certificates on the server",
         ingress, 0),
        ("provider status: the provider's own status beside the rig",
         ["provider", "status", *common, "--url", status.url + "/status"], 0),
        ("provider remove: the provider off the farm (the wallet stays yours)",
         ["provider", "remove", "-i", str(inv), *ssh, "--yes"], 0),
    ]



def _server_manifests(rig: Rig) -> dict[str, str]:
    """m2p's manifests in the demo rig's k3s manifests folder, as k3s's deploy controller reads them."""
    client = tenant.ssh(rig)
    try:
        code, out = tenant.run(client, "sudo sh -c 'for f in /var/lib/rancher/k3s/server/manifests/m2p-akash-*.yaml; "
                                       "do printf \"\\n#M2P-FILE %s\\n\" \"${f##*/}\"; cat \"$f\"; done'")
    finally:
        client.close()
    if code != 0:
        raise RuntimeError(f"could not read the demo rig's manifests: {out[-300:]}")
    files: dict[str, str] = {}
    for chunk in out.split("\n#M2P-FILE ")[1:]:
        name, _, text = chunk.partition("\n")
        files[name.strip()] = text
    return files
