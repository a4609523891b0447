"""The reclaimer's API token is replaced (issue 55 point 8): its Secret deleted and made again, as the role
market_provider does on every run (tasks/reclaimer.yml), ends the old token and gives the reclaimer a new one with
the same rights; `m2p provider apply --rotate-token` runs that on a converged provider, and a plain re-apply of a
converged provider still runs nothing."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from m2p_sandbox.kube_api import KubeApiStandin
from miner2provider.core import inventory
from miner2provider.core.errors import ProviderError
from miner2provider.detect.ssh import SshOptions
from miner2provider.fleet import provider
from miner2provider.fleet.runner import HostStats, RunReport
from miner2provider.market.akash.stack import PARTS, RECLAIMER_NAMESPACE, RECLAIMER_TOKEN, reclaimer_objects
from miner2provider.market.base import ProviderStack

K3S = Path(__file__).resolve().parents[2] / "sandbox/m2p_sandbox/bundle_files/k3s"
ROLE = Path(__file__).resolve().parents[2] / "ansible_collections/m2p/rigs/roles/market_provider"
POD = ("akash-services", "akash-provider-0")


def as_reclaimer(api: KubeApiStandin, token: str, path: str) -> int:
    """The HTTP status the API answers the reclaimer's ``token`` with (over TLS, trusting the API's CA)."""
    req = urllib.request.Request(api.url + path, headers={"Authorization": f"Bearer {token}"}, method="POST"
                                 if "/exec" in path else "GET", data=b"" if "/exec" in path else None)
    assert api.authority is not None
    trusted = ssl.create_default_context(cadata=api.authority.pem.decode())
    try:
        with urllib.request.urlopen(req, timeout=5, context=trusted) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def kubectl(tmp_path: Path, api: KubeApiStandin, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """The stand-in k3s's kubectl on the server, as the admin (what the role runs)."""
    (tmp_path / "admin-token").write_text("admin-token\n")
    (tmp_path / "admin.json").write_text(api.token_kubeconfig(str(tmp_path / "admin-token")))
    return subprocess.run([sys.executable, str(K3S), "kubectl", "--kubeconfig", str(tmp_path / "admin.json"), *args],
                          input=stdin, capture_output=True, text=True, timeout=30)


def role_step(name_part: str) -> dict[str, Any]:
    tasks = yaml.safe_load((ROLE / "tasks/reclaimer.yml").read_text())
    rotate = next(t for t in tasks if "Rotate" in t["name"])
    return next(t for t in rotate["block"] if name_part in t["name"])


def test_a_rotated_reclaimer_token_is_dead_and_the_new_one_has_its_rights(tmp_path):
    """The attack: a copy of the reclaimer's token (a backup of /etc/m2p/reclaimer, a stolen disk) kept working for
    ever.  The role's rotation, as it runs it (delete the Secret, apply the manifest's Secret object, read the token
    the token controller filled): the old token is refused, the new one reads and execs into the provider's pod
    as before, and nowhere else."""
    api = KubeApiStandin()
    api.admin_tokens.add("admin-token")
    secret = next(d for d in reclaimer_objects() if d["kind"] == "Secret")
    old = "old-reclaimer-token"
    api.apply([{**secret, "data": {"token": base64.b64encode(old.encode()).decode()}}])  # the token controller's
    api.add_reclaimer(old, POD)
    nodes, exec_pod = "/api/v1/nodes?labelSelector=m2p.io%2Fmode", "/api/v1/namespaces/%s/pods/%s/exec?command=true"
    api.exec_in[(*POD, "")] = lambda argv: (0, "", "")
    try:
        assert as_reclaimer(api, old, nodes) == 200
        delete = role_step("Delete")["ansible.builtin.command"]["argv"][2:]  # after "k3s kubectl"
        gone = kubectl(tmp_path, api, *[RECLAIMER_TOKEN if "secret }}" in a else RECLAIMER_NAMESPACE
                                        if "namespace }}" in a else a for a in delete])
        assert gone.returncode == 0 and "deleted" in gone.stdout, gone.stderr
        assert as_reclaimer(api, old, nodes) == 401  # its Secret is gone: so is the token
        manifest = provider.token_secret_object(ProviderStack({"r.yaml": yaml.safe_dump_all(reclaimer_objects())},
                                                              "{}", "f", {}), RECLAIMER_NAMESPACE, RECLAIMER_TOKEN)
        made = kubectl(tmp_path, api, "apply", "--server-side", "--field-manager=m2p", "-f", "-",
                       stdin=json.dumps(manifest))
        assert made.returncode == 0, made.stderr
        read = kubectl(tmp_path, api, "get", "secret", RECLAIMER_TOKEN, "--namespace", RECLAIMER_NAMESPACE,
                       "--output", "jsonpath={.data.token}")
        new = base64.b64decode(read.stdout).decode()
        assert new and new != old
        assert as_reclaimer(api, new, nodes) == 200 and as_reclaimer(api, old, nodes) == 401
        assert as_reclaimer(api, new, exec_pod % POD) == 200
        assert as_reclaimer(api, new, exec_pod % ("akash-services", "other-pod")) == 403
        again = kubectl(tmp_path, api, "apply", "--server-side", "--field-manager=m2p", "-f", "-",
                        stdin=json.dumps(manifest))  # an apply of the same object keeps the token (server-side apply)
        assert again.returncode == 0 and as_reclaimer(api, new, nodes) == 200
    finally:
        api.close()


def test_the_role_rotates_only_a_token_the_reclaimer_held_and_reads_a_new_one():
    """The rotation runs where the reclaimer held a token and the Secret's object is given, never in check mode; it
    waits for a token other than the old one, read without logging, and that is the one written."""
    tasks = yaml.safe_load((ROLE / "tasks/reclaimer.yml").read_text())
    rotate = next(t for t in tasks if "Rotate" in t["name"])
    for cond in ("market_provider_reclaimer_rotate_token", "market_provider_reclaimer_held.stat.exists",
                 "not ansible_check_mode", "market_provider_reclaimer_token_manifest | length > 0"):
        assert cond in rotate["when"]
    read = role_step("Read the new token")
    assert read["no_log"] is True and "!= market_provider_reclaimer_token_read.stdout" in read["until"]
    written = next(t for t in tasks if t["name"].startswith("Write its token"))
    assert written["ansible.builtin.copy"]["content"].startswith("{{ market_provider_reclaimer_token_new.stdout")
    assert yaml.safe_load((ROLE / "defaults/main.yml").read_text())["market_provider_reclaimer_rotate_token"] is True


@pytest.fixture
def server(tmp_path, monkeypatch):
    inv = tmp_path / "rigs.yml"
    inv.write_text("all:\n  children:\n    k3s_server:\n      hosts:\n        s1: {ansible_host: 10.0.0.1}\n")
    hosts = inventory.load(inv).hosts
    runs: list[dict[str, Any]] = []

    def ran(playbook, fleet, **kwargs):
        runs.append(kwargs)
        return RunReport("successful", 0, {"s1": HostStats(ok=9, changed=2)})
    monkeypatch.setattr(provider, "run_playbook", ran)
    monkeypatch.setattr(provider.agent_zipapp, "write", lambda **kw: tmp_path / "m2p-reclaimer-0123456789abcdef.pyz")
    stack = ProviderStack({"m2p-akash-30-reclaimer.yaml": yaml.safe_dump_all(reclaimer_objects())}, "{}", "fp", {},
                          reclaimer='{"pod": "akash-provider-0"}')
    fingerprint = "fp-0123456789abcdef"
    monkeypatch.setattr(provider, "recorded_fingerprint", lambda *a: fingerprint)
    return hosts, stack, runs


def test_a_converged_provider_runs_nothing_unless_asked_to_rotate_the_token(server):
    """A plain re-apply of a converged provider stays the fast path (no Ansible, no restart); --rotate-token runs the
    role, which replaces the token, and hands it the Secret's object to make again."""
    hosts, stack, runs = server
    assert provider.apply(hosts[0], hosts, stack, PARTS, SshOptions()).result == "converged" and runs == []
    rotated = provider.apply(hosts[0], hosts, stack, PARTS, SshOptions(), rotate_token=True)
    assert rotated.result == "changed" and len(runs) == 1
    given = runs[0]["role_vars"]["s1"]["market_provider_reclaimer_token_manifest"]
    assert given["type"] == "kubernetes.io/service-account-token" and "data" not in given
    assert given["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "m2p-reclaimer"


def test_rotate_token_is_refused_where_no_reclaimer_runs(server):
    hosts, stack, runs = server
    with pytest.raises(ProviderError, match="--rotate-token: this provider runs no reclaimer"):
        provider.apply(hosts[0], hosts, ProviderStack(stack.files, "{}", "fp", {}), PARTS, SshOptions(),
                       rotate_token=True)
    assert runs == []
