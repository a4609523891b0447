"""Akash's provider stack for a farm (market/akash/stack.py), rendered by a real helm over Akash's real
charts (../shared/akash) the way k3s's Helm job renders them, and checked against k3s's HelmChart CRD:
attributes and prices for a farm of mixed models (every model, never ``*``), the reclamation window, the
provider and operators on the server node, NGINX Gateway Fabric's data plane on the ingress rig only, every
kind rendered built in or served by a CRD the stack installs first, and no wallet material in any manifest."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from typing import Any

import pytest
import yaml

from m2p_sandbox import helm
from miner2provider.core.errors import ProviderError
from miner2provider.detect.facts.gpu import Gpu, Gpus
from miner2provider.market.akash import AKASH, charts, stack, wallet
from miner2provider.market.akash.address import encode
from miner2provider.market.akash.provider_file import AcmeDns, parse
from miner2provider.market.base import ProviderFarm, ProviderStack, RigGpus
from miner2provider.market.cards import cards_of
from miner2provider.market.pricing import floors
from miner2provider.timeshare import economics

ADDRESS = encode(bytes(range(1, 21)))
PROVIDER = parse(f"""domain: farm.example.com
wallet: {{address: {ADDRESS}, key_file: provider.key, passphrase_env: AKASH_KEY_PASS}}
email: ops@farm.example.com
website: https://farm.example.com
organization: Example Farm
region: eu-central
ingress_rig: rig01
rpc_node: http://akash-node:26657
reclamation_window: 24h
""", "/farm/provider.yml")
PASSPHRASE = "correct horse battery staple 7731"
KEY = ("-----BEGIN TENDERMINT PRIVATE KEY-----\nkdf: bcrypt\nsalt: 8C4A0F4E2D1B6E1C9A2B3C4D5E6F7081\n"
       "type: secp256k1\n\nZmFrZSBlbmNyeXB0ZWQga2V5IGJ5dGVzIGZvciBhIHRlc3Q=\n=AbCd\n"
       "-----END TENDERMINT PRIVATE KEY-----\n")
ECON = economics.parse("mining_revenue_per_gpu_day: {default: 0.40, rtx3090: 0.95, cmp90hx: 0.55}\n"
                       "gpu_power_watts: {default: 200, rtx3090: 300}\npower_price_per_kwh: 0.12\nmargin: 0.15\n")


# The label k3s gives its servers and NodeRestriction refuses to kubelets (never kubernetes.io/hostname).
SERVER = {"node-role.kubernetes.io/control-plane": "true"}


def gpu(device: str, name: str, mib: int) -> Gpu:
    return Gpu(0, name, "GPU-x", "00000000:01:00.0", "10de", device, "0x00000000", mib, "550.54")


RIGS = [RigGpus("rig01", Gpus("ok", (gpu("2204", "NVIDIA GeForce RTX 3090", 24576),) * 2), "12.4"),
        RigGpus("rig02", Gpus("ok", (gpu("2206", "NVIDIA GeForce RTX 3080", 10240),
                                     gpu("220a", "NVIDIA GeForce RTX 3080 12GB", 12288))), "12.2"),
        RigGpus("rig03", Gpus("ok", (gpu("220d", "NVIDIA CMP 90HX", 10240),) * 4), "12.4")]


def farm(rigs: list[RigGpus] = RIGS) -> ProviderFarm:
    cards = [(c.slug, c.memory) for r in rigs for c in cards_of(r.gpus)]
    return ProviderFarm(AKASH.fleet_attributes(rigs, PROVIDER.region).attributes, tuple(floors(cards, ECON)), "rig01",
                        AKASH.card_list(rigs)[0], "rig02")


@pytest.fixture(scope="module")
def chart_dir(tmp_path_factory: pytest.TempPathFactory):
    return helm.chart_folder(tmp_path_factory.mktemp("charts"))


@pytest.fixture(scope="module")
def built(chart_dir) -> ProviderStack:
    loaded = charts.load(chart_dir, PROVIDER.charts)
    return stack.build(PROVIDER, farm(), loaded, wallet.chart_values(PROVIDER, KEY, PASSPHRASE))


def helmcharts(built: ProviderStack) -> dict[str, dict]:  # type: ignore[type-arg]
    out = {}
    for text in built.files.values():
        for doc in yaml.safe_load_all(text):
            if doc and doc["kind"] == "HelmChart":
                out[doc["metadata"]["name"]] = doc
    return out


def secrets(built: ProviderStack) -> dict[str, dict[str, str]]:
    sent = json.loads(built.secret)
    return {s["metadata"]["name"]: s["stringData"] for s in sent.get("items", [sent]) if s["kind"] == "Secret"}


def rendered(built: ProviderStack, release: str) -> list[dict]:  # type: ignore[type-arg]
    return helm.render(helmcharts(built)[release], secrets(built))


def find(objects: list[dict], kind: str, name: str | None = None) -> dict:  # type: ignore[type-arg]
    (found,) = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def test_every_helmchart_fits_k3s_crd_and_installs_the_archive_itself(built):
    charts_in = helmcharts(built)
    assert set(charts_in) == {"akash-provider", "akash-hostname-operator", "akash-inventory-operator",
                              "akash-gateway", "ngf"}
    for obj in charts_in.values():
        helm.check_helmchart(obj)
        assert obj["metadata"]["namespace"] == "kube-system" and "chart" not in obj["spec"]  # offline: no repo
        assert obj["spec"]["bootstrap"] is True  # its install Job runs on a server only
    assert charts_in["akash-gateway"]["spec"]["targetNamespace"] == "akash-gateway"
    assert charts_in["ngf"]["spec"]["targetNamespace"] == "nginx-gateway"
    namespaces = {d["metadata"]["name"]: d["metadata"]["labels"]
                  for d in yaml.safe_load_all(built.files["m2p-akash-00-namespaces.yaml"]) if d}
    assert namespaces["akash-services"]["akash.network/name"] == "akash-services"
    assert all(labels.get("akash.network") == "true" for n, labels in namespaces.items() if n != "nginx-gateway")
    assert set(namespaces) == {"akash-services", "lease", "akash-gateway", "nginx-gateway"}


def test_the_provider_renders_with_every_model_priced_and_the_farms_attributes(built):
    objects = rendered(built, "akash-provider")
    pricing = find(objects, "ConfigMap", "akash-provider-pricing")["data"]
    mappings = dict(pair.split("=") for pair in pricing["PRICE_TARGET_GPU_MAPPINGS"].split(","))
    assert "*" not in mappings
    assert set(mappings) == {"rtx3090.24Gi", "rtx3090", "rtx3080.10Gi", "rtx3080.12Gi", "rtx3080", "cmp90hx.10Gi",
                             "cmp90hx"}
    by_key = {f.key: f.floor_per_month for f in farm().floors}
    assert float(mappings["rtx3090.24Gi"]) == pytest.approx(by_key["rtx3090.24Gi"], abs=0.006)
    assert float(mappings["rtx3080"]) == max(float(mappings["rtx3080.10Gi"]), float(mappings["rtx3080.12Gi"]))
    main = find(objects, "ConfigMap", "akash-provider-main")["data"]
    assert main["AKASH_FROM"] == ADDRESS and main["AKASH_NODE"] == "http://akash-node:26657"
    assert main["AKASH_BID_PRICE_STRATEGY"] == "shellScript"
    assert main["AKASH_CLUSTER_PUBLIC_HOSTNAME"] == "provider.farm.example.com"
    script = find(objects, "ConfigMap", "akash-provider-script")["data"]
    provider_yaml = script["create_provider.sh"]
    assert "host: https://provider.farm.example.com:8443" in provider_yaml
    for key in ("capabilities/gpu/vendor/nvidia/model/rtx3090/ram/24Gi", "capabilities/gpu/vendor/nvidia/model/cmp90hx",
                "location-region", "organization"):
        assert f"- key: {key}\n" in provider_yaml
    assert "value: eu-central" in provider_yaml and "value: Example Farm" in provider_yaml
    assert script["price_script.sh"].startswith("#!")  # Akash's own bid script, from the archive
    assert "- key: capabilities/storage/1/class\n    value: ram\n" in provider_yaml.replace("  - key", "- key")
    pod = find(objects, "StatefulSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == SERVER
    env = {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env", [])}
    assert env["AKASH_RECLAMATION_WINDOW"] == "24h" and env["AKASH_WITHDRAWAL_PERIOD"] == "12h"
    patch = next(p for p in built.patches if p["kind"] == "statefulset")
    assert patch["name"] == find(objects, "StatefulSet")["metadata"]["name"]
    (container,) = json.loads(patch["body"])["spec"]["template"]["spec"]["containers"]
    assert container["name"] in [c["name"] for c in pod["containers"]]
    assert container["env"] == [{"name": "AKASH_DEPLOYMENT_NETWORK_POLICIES_ENABLED", "value": "true"}]


def test_the_wallet_is_only_in_the_secret_and_the_chart_gets_it_from_there(built):
    key_b64, pass_b64 = base64.b64encode(KEY.encode()).decode(), base64.b64encode(PASSPHRASE.encode()).decode()
    for name, text in built.files.items():
        for secret in (PASSPHRASE, key_b64, pass_b64, "TENDERMINT PRIVATE KEY", "kdf: bcrypt"):
            assert secret not in text, f"{secret[:12]}... in {name}"
    keys = find(rendered(built, "akash-provider"), "Secret", "akash-provider-keys")["data"]
    assert (keys["key.txt"], keys["key-pass.txt"]) == (key_b64, pass_b64)


def test_the_operators_and_gateway_render_for_the_farm(built):
    for release in ("akash-hostname-operator", "akash-inventory-operator"):
        deployment = find(rendered(built, release), "Deployment")
        assert deployment["metadata"].get("namespace", "akash-services") == "akash-services"  # helm --namespace
        assert deployment["spec"]["template"]["spec"]["nodeSelector"] == SERVER
    gateway = find(rendered(built, "akash-gateway"), "Gateway")
    hosts = {listener.get("hostname") for listener in gateway["spec"]["listeners"]}
    assert "*.ingress.farm.example.com" in hosts


def test_no_window_unless_set_and_the_fingerprint_follows_every_input(chart_dir):
    loaded = charts.load(chart_dir, PROVIDER.charts)
    values = wallet.chart_values(PROVIDER, KEY, PASSPHRASE)
    base = stack.build(PROVIDER, farm(), loaded, values)
    off = stack.build(replace(PROVIDER, reclamation_window=""), farm(), loaded, values)
    assert "reclamationWindow" not in off.values["provider"] and base.values["provider"]["reclamationWindow"] == "24h"
    assert stack.build(PROVIDER, farm(), loaded, values).fingerprint == base.fingerprint
    other_pass = stack.build(PROVIDER, farm(), loaded, wallet.chart_values(PROVIDER, KEY, PASSPHRASE + "!"))
    assert len({base.fingerprint, off.fingerprint, other_pass.fingerprint}) == 3
    assert PASSPHRASE not in base.fingerprint
    # The window comes with the reclaimer that honours it, and only then.
    assert off.reclaimer == "" and "m2p-akash-30-reclaimer.yaml" not in off.files
    assert json.loads(base.reclaimer) == {"pod_namespace": "akash-services", "pod": "akash-provider-0",
                                          "container": "provider", "close_without_window": False,
                                          "reclaim_spanning": False}
    opted = stack.build(replace(PROVIDER, close_leases_without_window=True), farm(), loaded, values)
    assert json.loads(opted.reclaimer)["close_without_window"] is True and opted.fingerprint != base.fingerprint


def test_the_reclaimer_may_read_and_exec_into_the_provider_pod_only():
    """Least privilege (roles/market_provider installs these): no write verb anywhere, exec on one pod by name."""
    import kubernetes_validate

    docs = stack.reclaimer_objects()
    for doc in docs:
        kubernetes_validate.validate(doc, "1.32", strict=True)
    rules = [(d["kind"], rule) for d in docs if d["kind"] in ("ClusterRole", "Role") for rule in d["rules"]]
    verbs = {verb for _, rule in rules for verb in rule["verbs"]}
    assert verbs == {"get", "list", "create"}
    assert [rule for _, rule in rules if "create" in rule["verbs"]] == [
        {"apiGroups": [""], "resources": ["pods/exec"], "resourceNames": ["akash-provider-0"], "verbs": ["create", "get"]}]
    role = next(d for d in docs if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "akash-services"
    account = next(d for d in docs if d["kind"] == "ServiceAccount")
    assert account["automountServiceAccountToken"] is False


@pytest.mark.parametrize("key, passphrase, said", [
    ("not a key", PASSPHRASE, "not an exported key"),
    (KEY.replace("TENDERMINT PRIVATE KEY", "PGP MESSAGE"), PASSPHRASE, "not an exported key"),
    (KEY, "", "AKASH_KEY_PASS (wallet.passphrase_env) is empty or unset"),
])
def test_bad_wallet_material_is_refused_without_quoting_it(key, passphrase, said):
    with pytest.raises(ProviderError) as caught:
        wallet.chart_values(PROVIDER, key, passphrase)
    assert said in str(caught.value) and "horse" not in str(caught.value)


def test_a_model_without_a_floor_is_refused_never_priced_by_another(chart_dir):
    bare = economics.parse("mining_revenue_per_gpu_day: {rtx3090: 0.95}\ngpu_power_watts: {default: 200}\n"
                           "power_price_per_kwh: 0.1\n")
    unpriced = floors([("rtx3090", "24Gi"), ("cmp90hx", "10Gi")], bare)
    with pytest.raises(ProviderError, match="no lease floor for cmp90hx.10Gi"):
        stack.price_mappings(unpriced)


@pytest.mark.parametrize("damage, said", [
    (lambda d: d.joinpath("provider-19.0.2.tgz").unlink(), "cannot read chart archive"),
    (lambda d: d.joinpath("provider-19.0.2.tgz").write_bytes(b"junk"), "not a chart archive"),
    (lambda d: d.joinpath("provider-19.0.2.tgz").write_bytes(d.joinpath("akash-gateway-1.2.1.tgz").read_bytes()),
     "not a chart archive with provider/Chart.yaml"),
    (lambda d: d.joinpath("akash-crd.yaml").write_text("kind: Deployment\nspec: {}\n"),
     "holds 'Deployment'; only CustomResourceDefinition belong"),
    (lambda d: d.joinpath("gateway-api-crds.yaml").write_text(
        d.joinpath("gateway-api-crds.yaml").read_text() + "---\nkind: ClusterRoleBinding\nspec: {}\n"),
     "holds 'ClusterRoleBinding'"),
    (lambda d: d.joinpath("nginx-gateway-fabric-crds.yaml").unlink(), "NGINX Gateway Fabric's CRDs"),
    (lambda d: d.joinpath("nginx-gateway-fabric-2.5.1.tgz").unlink(), "the nginx-gateway-fabric chart, version 2.5.1"),
    (lambda d: d.joinpath("gateway-api-crds.yaml").unlink(), "the Gateway API's CRDs: kubernetes-sigs/gateway-api"),
    (lambda d: d.joinpath("gateway-api-crds.yaml").write_text(
        d.joinpath("gateway-api-crds.yaml").read_text().replace("kind: TCPRoute", "kind: Other")),
     "no CRD for TCPRoute of gateway.networking.k8s.io"),
])
def test_a_wrong_or_missing_archive_is_named(tmp_path, chart_dir, damage, said):
    for f in chart_dir.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    damage(tmp_path)
    with pytest.raises(ProviderError, match=said):
        charts.load(tmp_path, PROVIDER.charts)


def operator_names(card_list: dict, vendor: str, device: str) -> str | None:  # type: ignore[type-arg]
    """What Akash's inventory operator does with a card (operator/inventory/node-discovery.go parseGPUInfo):
    the vendor, then the device ID, looked up in the list; a card not found is skipped (None)."""
    entry = card_list.get(vendor, {}).get("devices", {}).get(device)
    return None if entry is None else f"{card_list[vendor]['name']}/{entry['name']}/{entry['memory_size']}"


def test_the_operator_reads_m2ps_card_list_so_a_cmp90hx_farm_is_named(built):
    docs = [d for d in yaml.safe_load_all(built.files["m2p-akash-20-gpu-list.yaml"]) if d]
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"ConfigMap", "Deployment", "Service", "NetworkPolicy"}
    served = json.loads(kinds["ConfigMap"]["data"]["gpus"])
    assert operator_names(served, "10de", "220d") == "nvidia/cmp90hx/10Gi"
    assert operator_names(served, "10de", "2204") == "nvidia/rtx3090/24Gi"
    akash_list = {"10de": {"name": "nvidia", "devices": {"2204": {"name": "rtx3090", "interface": "PCIe",
                                                                  "memory_size": "24Gi"}}}}
    assert operator_names(akash_list, "10de", "220d") is None  # under Akash's own list: skipped, never named
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == SERVER
    (container,) = pod["containers"]
    assert container["image"].endswith("/akash-network/provider:0.16.2")  # the operator's own image, from its chart
    assert pod["automountServiceAccountToken"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    allowed = kinds["NetworkPolicy"]["spec"]["ingress"][0]["from"]
    assert allowed == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "inventory"}}}]
    patch = next(p for p in built.patches if p["kind"] == "deployment")
    body = json.loads(patch["body"])
    (env,) = body["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == {"name": "AP_PROVIDER_CONFIGS_URL", "value": "http://m2p-gpu-list.akash-services.svc.cluster.local"}
    operator = find(rendered(built, "akash-inventory-operator"), "Deployment")
    assert operator["metadata"]["name"] == patch["name"] and body["spec"]["template"]["spec"]["containers"][0][
        "name"] in [c["name"] for c in operator["spec"]["template"]["spec"]["containers"]]
    labels = operator["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "inventory"  # what the NetworkPolicy lets in


# What k3s itself serves beside the built-in API (helm-controller's CRD, ../shared/akash/crds).
K3S_SERVES = {("helm.cattle.io/v1", "HelmChart"), ("helm.cattle.io/v1", "HelmChartConfig")}


def unserved(built: ProviderStack) -> list[str]:
    """Every object the stack's files hold and its HelmCharts render that is neither built into Kubernetes 1.35
    (kubernetes-validate's schemas) nor served by a CRD in a file k3s applies before it (its manifests, by name;
    every HelmChart's objects come after every CRD file, since its Job starts only once its file is applied; a
    file after the HelmCharts' may use a CRD a chart installs: k3s's deploy controller applies it again until
    the kind is served)."""
    import kubernetes_validate

    served: dict[tuple[str, str], str] = {}  # (apiVersion, kind) -> the file whose CRD serves it
    found: list[str] = []
    charts_done = "m2p-akash-10-~"  # sorts after every HelmChart's file

    def serve(docs: Any, where: str) -> None:
        for doc in docs:
            if doc and doc["kind"] == "CustomResourceDefinition":
                for version in doc["spec"]["versions"]:
                    if version.get("served"):
                        served.setdefault((f"{doc['spec']['group']}/{version['name']}", doc["spec"]["names"]["kind"]),
                                          where)

    def check(obj: dict, where: str, after: str) -> None:  # type: ignore[type-arg]
        key = (obj["apiVersion"], obj["kind"])
        if key in K3S_SERVES or (key in served and served[key] < after):
            return
        try:
            kubernetes_validate.validate(obj, "1.35", strict=False)
        except kubernetes_validate.SchemaNotFoundError:
            found.append(f"{obj['apiVersion']} {obj['kind']} {obj['metadata'].get('name')} ({where})")

    files = {name: [d for d in yaml.safe_load_all(text) if d] for name, text in sorted(built.files.items())}
    for name, docs in files.items():
        serve(docs, name)
    rendered_by_charts = {release: helm.render(chart, secrets(built)) for release, chart in helmcharts(built).items()}
    for objects in rendered_by_charts.values():
        serve(objects, charts_done)
    for name, docs in files.items():
        for doc in docs:
            check(doc, name, name)
    for release, objects in rendered_by_charts.items():
        for obj in objects:
            check(obj, f"helm chart {release}", "m2p-akash-10")
    return found


def test_every_kind_the_stack_makes_is_built_in_or_served_by_a_crd_installed_first(built):
    assert unserved(built) == []


def test_a_kind_whose_crd_is_missing_is_found(built):
    """The check above can fail: without NGF's CRDs file, NGF's and akash-gateway's objects of its kinds are named;
    with the Gateway API's CRDs after the charts', none of its kinds counts as served."""
    without = replace(built, files={k: v for k, v in built.files.items() if "ingress-crds" not in k})
    missing = unserved(without)
    assert any("NginxProxy" in m and "helm chart ngf" in m for m in missing), missing
    assert any("ClientSettingsPolicy" in m and "helm chart akash-gateway" in m for m in missing), missing
    late = dict(built.files)
    late["m2p-akash-99-gateway-api-crds.yaml"] = late.pop("m2p-akash-02-gateway-api-crds.yaml")
    assert any("TCPRoute" in m for m in unserved(replace(built, files=late)))


def test_the_ingress_data_plane_runs_on_the_ingress_rig_only_and_its_control_plane_on_the_server(built):
    objects = rendered(built, "ngf")
    proxy = find(objects, "NginxProxy")["spec"]["kubernetes"]["daemonSet"]
    assert proxy["pod"]["nodeSelector"] == {"node-restriction.kubernetes.io/m2p-ingress": "true"}
    ports = sorted(p["port"] for p in proxy["container"]["hostPorts"])
    assert ports == [80, 443, 8443, 8444]
    assert proxy["container"]["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    control = find(objects, "Deployment")["spec"]["template"]["spec"]
    assert control["nodeSelector"] == SERVER
    assert control["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    args = control["containers"][0]["args"]
    assert "--gatewayclass=nginx" in args and "--gateway-api-experimental-features" in args
    assert "--product-telemetry-disable" in args
    job = find(objects, "Job")["spec"]["template"]["spec"]
    assert job["nodeSelector"] == SERVER
    assert find(objects, "GatewayClass")["metadata"]["name"] == "nginx"
    assert find(objects, "Service")["spec"]["type"] == "ClusterIP"
    # The rig and the Secrets the role makes on the server, never manifests.
    server_side = json.loads(built.server_side)
    assert server_side["node_labels"] == {"node-restriction.kubernetes.io/m2p-ingress": "rig02"}
    assert {t["name"] for t in server_side["tls"]} == {"akash-default-tls", "wildcard-ingress-tls"}
    assert "*.ingress.farm.example.com" in next(t for t in server_side["tls"] if t["name"] == "wildcard-ingress-tls")[
        "names"]
    written = [d for text in built.files.values() for d in yaml.safe_load_all(text) if d and d["kind"] == "Secret"]
    assert [d["type"] for d in written] == ["kubernetes.io/service-account-token"]  # the reclaimer's, filled by the API


ACME = replace(PROVIDER, acme_dns=AcmeDns("cloudflare", "CF_API_TOKEN"),
               charts={**PROVIDER.charts, "cert-manager": "v1.19.1"})
TOKEN = "cf-token-" + "7" * 30


@pytest.fixture(scope="module")
def with_acme(chart_dir) -> ProviderStack:
    return stack.build(ACME, farm(), charts.load(chart_dir, ACME.charts), wallet.chart_values(ACME, KEY, PASSPHRASE),
                       TOKEN)


def test_a_real_wildcard_certificate_through_cert_manager_on_the_server(with_acme, built):
    assert unserved(with_acme) == []
    objects = rendered(with_acme, "m2p-cert-manager")
    assert {o["spec"]["names"]["kind"] for o in objects if o["kind"] == "CustomResourceDefinition"} >= {
        "ClusterIssuer", "Certificate"}
    pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("Deployment", "Job")]
    assert len(pods) == 4 and all(p["nodeSelector"].items() >= SERVER.items() for p in pods)  # it holds the credential
    issuer, certificate = [d for d in yaml.safe_load_all(with_acme.files["m2p-akash-25-certificate.yaml"]) if d]
    assert issuer["spec"]["acme"]["solvers"] == [{"dns01": {"cloudflare": {"apiTokenSecretRef": {
        "name": "m2p-acme-dns", "key": "credential"}}}}]
    assert certificate["spec"]["secretName"] == "wildcard-ingress-tls"
    assert certificate["spec"]["dnsNames"] == ["*.farm.example.com", "*.ingress.farm.example.com"]
    # The credential: only in the Secret list sent on stdin, never a file; cert-manager's namespace made first.
    assert all(TOKEN not in text for text in with_acme.files.values())
    sent = json.loads(with_acme.secret)["items"]
    assert [(o["kind"], o["metadata"]["name"]) for o in sent] == [
        ("Namespace", "cert-manager"), ("Secret", "m2p-akash-provider-wallet"), ("Secret", "m2p-acme-dns")]
    assert sent[2]["metadata"]["namespace"] == "cert-manager" and sent[2]["stringData"] == {"credential": TOKEN}
    assert with_acme.secret_env == ("AKASH_KEY_PASS", "CF_API_TOKEN")
    made = json.loads(with_acme.server_side)["tls"]
    assert [t["name"] for t in made] == ["akash-default-tls"]  # cert-manager fills the wildcard's Secret
    assert "m2p-cert-manager" not in helmcharts(built) and "m2p-akash-25-certificate.yaml" not in built.files


def test_without_the_dns_credential_nothing_is_built(chart_dir):
    with pytest.raises(ProviderError, match="CF_API_TOKEN .acme_dns.credential_env in /farm/provider.yml"):
        stack.build(ACME, farm(), charts.load(chart_dir, ACME.charts), wallet.chart_values(ACME, KEY, PASSPHRASE), "")
