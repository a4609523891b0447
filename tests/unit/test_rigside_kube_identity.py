"""The agent as its rig's kubelet: the kubeconfig k3s writes (a client certificate for system:node:<rig>),
over real TLS to the STAND-IN API, which judges it by the Node authorizer's and NodeRestriction's rules:
its own node's pods and Node only, never its taints, never another node."""

from __future__ import annotations

import pytest
import yaml

from m2p_sandbox.kube_api import KubeApiStandin
from miner2provider.rigside.kube import ApiError, KubeClient


def kubelet_client(api: KubeApiStandin, node: str, folder) -> KubeClient:
    ca, cert, key = api.kubelet_credential(node)
    for name, data in (("server-ca.crt", ca), ("client-kubelet.crt", cert), ("client-kubelet.key", key)):
        (folder / name).write_bytes(data)
    # relative paths, as kubectl reads them: from the kubeconfig's folder
    (folder / "kubelet.kubeconfig").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "default",
        "clusters": [{"name": "local", "cluster": {"server": api.url, "certificate-authority": "server-ca.crt"}}],
        "contexts": [{"name": "default", "context": {"cluster": "local", "user": "user"}}],
        "users": [{"name": "user", "user": {"client-certificate": "client-kubelet.crt",
                                            "client-key": "client-kubelet.key"}}]}))
    return KubeClient("", None, kubeconfig=str(folder / "kubelet.kubeconfig"))


@pytest.fixture
def api():
    served = KubeApiStandin(tls=True)
    served.add_node("rig1", "t-" + "1" * 20)
    served.add_node("rig2", "t-" + "2" * 20)
    served.add_pod("lease-a", "rig1", 1)
    served.add_pod("tenant-b", "rig2", 1)
    yield served
    served.close()


def test_the_kubelet_reads_and_patches_its_own_node_only(api, tmp_path):
    client = kubelet_client(api, "rig1", tmp_path)
    assert [p["metadata"]["name"] for p in client.pods_on_node("rig1")] == ["lease-a"]
    assert client.node("rig1")["metadata"]["name"] == "rig1"
    client.patch_node("rig1", {"metadata": {"labels": {"m2p.io/mode": "leasing"},
                                            "annotations": {"m2p.io/status": "{}"}}, "spec": {"unschedulable": True}})
    assert api.nodes["rig1"]["spec"]["unschedulable"] is True
    for denied, said in ((lambda: client.pods_on_node("rig2"), "can only list/watch pods"),
                         (lambda: client.node("rig2"), "only its own Node"),
                         (lambda: client.patch_node("rig2", {"spec": {"unschedulable": True}}), "only its own Node"),
                         (lambda: client.patch_node("rig1", {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}),
                          "not allowed to modify taints"),
                         (lambda: client.patch_node("rig1", {"metadata": {"labels": {
                             "node-role.kubernetes.io/control-plane": "true"}}}), "not allowed to modify labels")):
        with pytest.raises(ApiError, match="HTTP 403") as caught:
            denied()
        assert said in str(caught.value)
    assert "unschedulable" not in api.nodes["rig2"]["spec"]


@pytest.mark.parametrize("label, allowed", [
    ("node-role.kubernetes.io/control-plane", False),  # what the provider's pods are pinned by
    ("node-restriction.kubernetes.io/m2p-ingress", False),  # what the ingress's data plane is pinned by
    ("kubernetes.io/hostname", True),  # why nothing is pinned by it: any kubelet names itself
    ("node.kubernetes.io/instance-type", True),
    ("kubelet.kubernetes.io/anything", True),
    ("m2p.io/mode", True),
])
def test_a_worker_cannot_give_itself_a_label_that_decides_where_a_secret_goes(api, tmp_path, label, allowed):
    """NodeRestriction's label rules, as the real API applies them (KEP-279): a taken rig's kubelet cannot claim
    the server's or the ingress rig's label, so the wallet and the ingress certificate never follow it."""
    client = kubelet_client(api, "rig1", tmp_path)
    patch = {"metadata": {"labels": {label: "rig2" if label.endswith("hostname") else "true"}}}
    if allowed:
        client.patch_node("rig1", patch)
        assert label in api.nodes["rig1"]["metadata"]["labels"]
        return
    with pytest.raises(ApiError, match="HTTP 403") as caught:
        client.patch_node("rig1", patch)
    assert f"not allowed to modify labels: {label}" in str(caught.value)
    assert label not in api.nodes["rig1"]["metadata"]["labels"]


def test_no_certificate_or_a_broken_kubeconfig_is_an_api_error_not_a_crash(api, tmp_path):
    client = kubelet_client(api, "rig1", tmp_path)
    (tmp_path / "client-kubelet.crt").unlink()  # k3s has not written it yet
    with pytest.raises(ApiError):
        client.node("rig1")
    (tmp_path / "kubelet.kubeconfig").write_text("clusters: [\n")
    with pytest.raises(ApiError, match="not a kubeconfig the agent can use"):
        client.node("rig1")
    with pytest.raises(ApiError, match="No such file"):
        KubeClient("", None, kubeconfig=str(tmp_path / "absent.kubeconfig")).node("rig1")


def test_as_its_kubelet_the_agent_cordons_though_it_may_not_lift_the_first_designs_taint(tmp_path):
    """NodeRestriction refuses the kubelet a taint change: the agent says so in its status and cordons all the
    same (schedule apply removes that taint through the server's admin)."""
    from test_agent_service import FIXED_MINE, NODE, cordoned, make_agent  # tests/unit is on sys.path

    from miner2provider.rigside.kube import OLD_MINING_TAINT_KEY

    api = KubeApiStandin(tls=True)
    try:
        api.add_node(NODE, "unused-" + "x" * 20, gpus=2)
        api.nodes[NODE]["spec"]["taints"] = [{"key": OLD_MINING_TAINT_KEY, "effect": "NoSchedule"}]
        folder = tmp_path / "kubelet"
        folder.mkdir()
        agent = make_agent(api, tmp_path, FIXED_MINE)
        agent.client = kubelet_client(api, NODE, folder)
        for _ in range(2):
            agent.tick()
        assert cordoned(api) and api.nodes[NODE]["spec"]["taints"][0]["key"] == OLD_MINING_TAINT_KEY
        status = (tmp_path / "state" / "status.json").read_text()
        assert "taint stays on the node" in status and "not allowed to modify taints" in status
    finally:
        api.close()


# -- the pods a kubelet may create: NodeRestriction's mirror pods (issue 55, point 4) -------------------------------
MIRROR = "kubernetes.io/config.mirror"


def mirror_pod(api: KubeApiStandin, node: str, name: str = "static-web", bound_to: str | None = None,
               **meta_changes) -> dict:
    """A mirror pod as a kubelet makes one for a static pod: the mirror annotation, bound to its node, owned by its
    Node (kubelet pkg/kubelet/pod/mirror_client.go), here labelled as any lease's pod."""
    meta = {"name": name, "annotations": {MIRROR: "0f3c"},
            "labels": {"akash.network": "true", "akash.network/manifest-service": "web"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "controller": True,
                                 "uid": api.nodes[node]["metadata"]["uid"]}]}
    meta.update(meta_changes)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": bound_to or node, "containers": [{"name": "main", "image": "busybox:1.36"}]}}


def create_pod(client: KubeClient, namespace: str, pod: dict) -> dict:
    return client._request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)


def forbidden(rule: str, name: str = "static-web") -> str:
    return f'HTTP 403 pods "{name}" is forbidden: {rule}'


def test_a_kubelet_creates_a_mirror_pod_bound_to_itself_in_any_namespace_with_any_labels(api, tmp_path):
    """What NodeRestriction lets a taken rig do (the reclaimer must not believe it): a pod labelled as a lease's,
    in a namespace of its choosing, bound to itself."""
    api.apply([{"kind": "Namespace", "metadata": {"name": "lease-7"}}])
    client = kubelet_client(api, "rig1", tmp_path)
    made = create_pod(client, "lease-7", mirror_pod(api, "rig1"))
    assert made["metadata"]["namespace"] == "lease-7" and made["status"] == {"phase": "Pending"}
    kept = api.pods[("lease-7", "static-web")]
    assert kept["spec"]["nodeName"] == "rig1" and kept["metadata"]["labels"]["akash.network/manifest-service"] == "web"
    with pytest.raises(ApiError, match='HTTP 404 namespaces "nowhere" not found'):
        create_pod(client, "nowhere", mirror_pod(api, "rig1"))


def node_uid(api, node):
    return api.nodes[node]["metadata"]["uid"]


@pytest.mark.parametrize("change, rule", [
    (lambda api, pod: pod["metadata"].pop("annotations"),
     'pod does not have "kubernetes.io/config.mirror" annotation, node "rig1" can only create mirror pods'),
    (lambda api, pod: pod["spec"].update(nodeName="rig2"), 'node "rig1" can only create pods with spec.nodeName set to itself'),
    (lambda api, pod: pod["metadata"].update(ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f7c9b6", "uid": "u", "controller": True}]),
     'node "rig1" can only create pods with an owner reference set to itself'),
    (lambda api, pod: pod["metadata"]["ownerReferences"].append(
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f7c9b6", "uid": "u", "controller": False}),
     'node "rig1" can only create pods with a single owner reference set to itself'),
    (lambda api, pod: pod["metadata"].pop("ownerReferences"),
     'node "rig1" can only create pods with an owner reference set to itself'),
    (lambda api, pod: pod["metadata"]["ownerReferences"][0].update(name="rig2", uid=node_uid(api, "rig2")),
     'node "rig1" can only create pods with an owner reference set to itself'),
    (lambda api, pod: pod["metadata"]["ownerReferences"][0].pop("controller"),
     'node "rig1" can only create pods with a controller owner reference set to itself'),
    (lambda api, pod: pod["metadata"]["ownerReferences"][0].update(uid="not-its-uid"),
     "node rig1 UID mismatch: expected not-its-uid got {uid}"),
    (lambda api, pod: pod["spec"].update(serviceAccountName="akash-provider"),
     'node "rig1" can not create pods that reference a service account'),
    (lambda api, pod: pod["spec"].update(volumes=[{"name": "key", "secret": {"secretName": "akash-provider-keys"}}]),
     'node "rig1" can not create pods that reference secrets'),
    (lambda api, pod: pod["spec"]["containers"][0].update(env=[{"name": "K", "valueFrom": {"secretKeyRef": {
        "name": "akash-provider-keys", "key": "key.txt"}}}]), 'node "rig1" can not create pods that reference secrets'),
    (lambda api, pod: pod["spec"].update(volumes=[{"name": "c", "configMap": {"name": "akash-provider-scripts"}}]),
     'node "rig1" can not create pods that reference configmaps'),
    (lambda api, pod: pod["spec"].update(volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]),
     'node "rig1" can not create pods that reference persistentvolumeclaims'),
])
def test_the_api_refuses_a_kubelet_any_pod_but_its_own_mirror_pod_as_noderestriction_does(api, tmp_path, change, rule):
    """NodeRestriction's admitPodCreate (kubernetes/kubernetes@aab56e9b), rule by rule, with its messages: a pod
    that is no mirror pod, one bound to another node, one another controller owns, one that names a secret."""
    client = kubelet_client(api, "rig1", tmp_path)
    pod = mirror_pod(api, "rig1")
    change(api, pod)
    with pytest.raises(ApiError) as caught:
        create_pod(client, "default", pod)
    assert forbidden(rule.format(uid=node_uid(api, "rig1"))) in str(caught.value)
    assert ("default", "static-web") not in api.pods
