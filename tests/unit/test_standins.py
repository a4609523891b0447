"""Fidelity of the sandbox's stand-ins that had no test of their own (docs/stand-ins.md lists them all):
the test bundle's nvidia-ctk and k3s say their versions as the real ones do, nvidia-ctk writes a CDI spec of
the real shape from what nvidia-smi lists and fails as the real one does without a driver, and the stand-in
Ubuntu driver repository holds the packages the nvidia_driver role installs, under an index apt can check.
Run here, no rig: each stand-in is the file the harness installs, on this machine's python3."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from m2p_sandbox import apt_repo, bundle, gpu_standin
from miner2provider.detect.facts.base import Output
from miner2provider.detect.facts.node import InstalledFact

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = json.loads((ROOT / "tests/unit/facts/installed/full-stack.json").read_text())  # real k3s and nvidia-ctk


def standin(tmp_path: Path, name: str, version: str) -> Path:
    """``bundle_files/<name>`` as the test bundle builds it (``@VERSION@`` filled in), run by this python3."""
    source = (bundle.SOURCES / name).read_text().replace("@VERSION@", version).replace("@FAILS_AT_START@", "no")
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!{sys.executable}\n" + source.split("\n", 1)[1])
    path.chmod(0o755)
    return path


def run(path: Path, *args: str, env_path: str) -> subprocess.CompletedProcess[str]:
    """The stand-in at ``path`` with only ``env_path`` on PATH, and its GPU stand-in's cards beside its folder."""
    env = {"PATH": env_path, "M2P_STANDIN_GPUS": str(path.parents[1] / "gpus.json")}
    return subprocess.run([str(path), *args], capture_output=True, text=True, env=env)


def test_the_standin_toolkit_and_k3s_say_their_versions_as_the_real_ones_do(tmp_path):
    """detect reads the first line of each --version (InstalledFact): the stand-ins' lines give what the real
    lines captured on a rig give."""
    ctk = run(standin(tmp_path, "nvidia-ctk", "1.17.8"), "--version", env_path="/usr/bin:/bin")
    k3s = run(standin(tmp_path, "k3s", "v1.32.3+k3s1"), "--version", env_path="/usr/bin:/bin")
    assert ctk.returncode == k3s.returncode == 0
    real = GOLDEN["output"].splitlines()
    ours = [f"toolkit {ctk.stdout.splitlines()[0]}", f"k3s {k3s.stdout.splitlines()[0]}", *real[2:]]
    assert ours[:2] != real[:2]  # not a copy: the stand-ins say they are stand-ins
    parsed = InstalledFact.parse(Output(text="\n".join(ours) + "\n", rc=0))
    assert parsed == InstalledFact.parse(Output(text=GOLDEN["output"], rc=0))
    assert (parsed.container_toolkit, parsed.k3s) == ("1.17.8", "v1.32.3+k3s1")


# CDI's rules (cncf-tags/container-device-interface SPEC.md, pkg/parser): a kind is <vendor>/<class>, a device
# name starts and ends with a letter or digit and holds only letters, digits and - _ . :
CDI_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
CDI_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


def cdi_generate(tmp_path: Path, env_path: str, *flags: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    spec = tmp_path / "cdi.yaml"
    proc = run(standin(tmp_path, "nvidia-ctk", "1.17.8"), "cdi", "generate", *flags, f"--output={spec}",
               env_path=env_path)
    return proc, spec


def gpu_standin_on_path(tmp_path: Path, cards: list[str]) -> str:
    (tmp_path / "gpus.json").write_text(json.dumps(gpu_standin.rig_config("r1", cards)))
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir(exist_ok=True)
    smi.write_text(f"#!{sys.executable}\n" + (Path(gpu_standin.__file__).parent / "nvidia-smi").read_text()
                   .split("\n", 1)[1])
    smi.chmod(0o755)
    return f"{smi.parent}:/usr/bin:/bin"


def test_the_standin_nvidia_ctk_writes_a_cdi_spec_of_the_real_shape_from_the_cards_listed(tmp_path):
    """The role's own flags (roles/nvidia_container_toolkit: names by index and UUID): one device per name and
    card, ``all``, the control nodes for every container, every name and kind legal under CDI's rules."""
    path = gpu_standin_on_path(tmp_path, ["rtx3090", "cmp90hx"])
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True,
                             env={"PATH": path, "M2P_STANDIN_GPUS": str(tmp_path / "gpus.json")}).stdout
    uuids = re.findall(r"\(UUID: (GPU-[^)]+)\)", listing)
    assert len(uuids) == 2
    proc, spec_file = cdi_generate(tmp_path, path, "--device-name-strategy=index", "--device-name-strategy=uuid")
    assert proc.returncode == 0, proc.stderr
    spec = yaml.safe_load(spec_file.read_text())
    assert spec["cdiVersion"] == "0.5.0" and CDI_KIND.match(spec["kind"]) and spec["kind"] == "nvidia.com/gpu"
    devices = {d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]}
    assert all(CDI_NAME.match(name) for name in devices), list(devices)
    assert devices == {"0": ["/dev/nvidia0"], uuids[0]: ["/dev/nvidia0"], "1": ["/dev/nvidia1"],
                       uuids[1]: ["/dev/nvidia1"], "all": ["/dev/nvidia0", "/dev/nvidia1"]}
    assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    # The default strategy is index alone, as the real one's single-valued flag had it.
    proc, spec_file = cdi_generate(tmp_path, path)
    assert [d["name"] for d in yaml.safe_load(spec_file.read_text())["devices"]] == ["0", "1", "all"]


def test_without_a_driver_the_standin_nvidia_ctk_fails_and_writes_no_spec(tmp_path):
    """No nvidia-smi (no driver, NVML absent): the real one fails to initialise NVML and writes nothing; so does
    the stand-in, never an empty spec a role would install."""
    (tmp_path / "gpus.json").write_text("{}")
    proc, spec_file = cdi_generate(tmp_path, "/nonexistent")
    assert proc.returncode == 1 and "failed to initialize NVML" in proc.stderr
    assert not spec_file.exists()


def test_the_standin_driver_repository_holds_the_packages_the_role_installs(tmp_path):
    """Ubuntu's names (nvidia-headless-<branch>-server needing nvidia-utils-<branch>-server at the same version,
    as roles/nvidia_driver/tasks/upgrade_apt.yml installs them) in a flat repository whose index apt checks:
    every entry's size and SHA256 are its file's."""
    role = (ROOT / "ansible_collections/m2p/rigs/roles/nvidia_driver/tasks/upgrade_apt.yml").read_text()
    repo = apt_repo.build_driver_repo(tmp_path / "repo", "570.172.08")
    entries = [dict(re.findall(r"^([A-Za-z0-9-]+): (.*)$", stanza, re.M))
               for stanza in (repo / "Packages").read_text().strip().split("\n\n")]
    by_name = {e["Package"]: e for e in entries}
    assert set(by_name) == {"nvidia-headless-570-server", "nvidia-utils-570-server"}
    for name in by_name:
        assert f'"{name.replace("570", "{{ nvidia_driver_ubuntu_branch }}")}"' in role
    assert by_name["nvidia-headless-570-server"]["Depends"] == "nvidia-utils-570-server (= 570.172.08-0ubuntu1)"
    for entry in entries:
        data = (repo / entry["Filename"]).read_bytes()
        assert entry["Version"] == "570.172.08-0ubuntu1"
        assert (int(entry["Size"]), entry["SHA256"]) == (len(data), hashlib.sha256(data).hexdigest())


def test_the_standin_ca_issues_a_kubelet_certificate_as_k3s_does():
    """k3s's kubelet client certificate: subject O=system:nodes, CN=system:node:<name> (what the Node authorizer
    and NodeRestriction read), client use only, signed by the cluster's CA; the API's own is a server's for its
    address only.  A certificate of another shape would let tests pass that a real API refuses."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from m2p_sandbox import pki

    ca = pki.Authority()
    kubelet = x509.load_pem_x509_certificate(ca.issue("system:node:rig1", organization="system:nodes")[0])
    assert kubelet.subject.rfc4514_string() == "CN=system:node:rig1,O=system:nodes"
    assert kubelet.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    assert list(kubelet.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH]
    kubelet.verify_directly_issued_by(ca.cert)
    server = x509.load_pem_x509_certificate(ca.issue("kube-apiserver", address="127.0.0.1")[0])
    assert list(server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH]
    assert [str(a) for a in server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            .get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    other = pki.Authority()
    with pytest.raises(InvalidSignature):  # another cluster's CA of the same name: not its certificate
        kubelet.verify_directly_issued_by(other.cert)


# k8s.io/cluster-bootstrap token/api BootstrapTokenPattern, in k3s's secure format (pkg/clientaccess/token.go).
BOOTSTRAP = re.compile(r"^K10(?P<ca>[0-9a-f]{64})::(?P<id>[a-z0-9]{6})\.(?P<secret>[a-z0-9]{16})$")


def k3s_server_dir(tmp_path: Path, pid: int) -> Path:
    """A stand-in k3s server's data dir as it leaves it running: its server token and the pid it runs as."""
    server = tmp_path / "data" / "server"
    server.mkdir(parents=True)
    (server / "token").write_text("K10" + "ab" * 32 + "::server:" + "cd" * 16 + "\n")
    (server / "m2p-standin-server.pid").write_text(f"{pid}\n")
    return server


def test_the_standin_k3s_makes_bootstrap_tokens_as_k3s_token_create_does(tmp_path):
    """`k3s token create --ttl 15m --usages authentication`: K10<the server CA's hash>::<id>.<secret> on stdout,
    and the Secret bootstrap-token-<id> with the token, its expiration 15 minutes on, only the usage asked for, and
    k3s's default group; without --ttl it expires in 24 h, and --ttl 0 (or less) never, as in k3s."""
    server = k3s_server_dir(tmp_path, os.getpid())  # this process stands in for the running server
    k3s = standin(tmp_path, "k3s", "v1.35.3+k3s1")
    data_dir = f"--data-dir={server.parent}"
    made = run(k3s, "token", "create", "--ttl", "15m", "--usages", "authentication", "--description", "join rig1",
               data_dir, env_path="/usr/bin:/bin")
    assert made.returncode == 0, made.stderr
    found = BOOTSTRAP.match(made.stdout.strip())
    assert found and found["ca"] == "ab" * 32
    secrets_ = json.loads((server / "m2p-standin-bootstrap-tokens.json").read_text())
    data = secrets_[f"bootstrap-token-{found['id']}"]
    assert (data["token-id"], data["token-secret"]) == (found["id"], found["secret"])
    assert {k for k in data if k.startswith("usage-")} == {"usage-bootstrap-authentication"}
    assert data["auth-extra-groups"] == "system:bootstrappers:k3s:default-node-token"
    assert data["description"] == "join rig1"
    expires = datetime.strptime(data["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert timedelta(minutes=14) < expires - datetime.now(UTC) <= timedelta(minutes=15)

    for ttl, lasts in ((None, timedelta(hours=24)), ("0", None), ("-5m", None), ("1h30m", timedelta(hours=1.5))):
        made = run(k3s, "token", "create", *(["--ttl", ttl] if ttl else []), data_dir, env_path="/usr/bin:/bin")
        token_id = BOOTSTRAP.match(made.stdout.strip())["id"]  # type: ignore[index]
        data = json.loads((server / "m2p-standin-bootstrap-tokens.json").read_text())[f"bootstrap-token-{token_id}"]
        assert {k for k in data if k.startswith("usage-")} == {"usage-bootstrap-signing",
                                                               "usage-bootstrap-authentication"}
        if lasts is None:
            assert "expiration" not in data
        else:
            expires = datetime.strptime(data["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            assert lasts - timedelta(minutes=1) < expires - datetime.now(UTC) <= lasts


def test_the_standin_k3s_makes_no_token_where_no_server_runs_or_for_a_bad_ttl(tmp_path):
    """No kinder than k3s: token create needs the server's API (an agent, or a stopped server, has none to ask), and
    --ttl must be a Go duration ("15" without a unit is not one)."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    server = k3s_server_dir(tmp_path, int(dead.stdout))  # a server that ran and stopped
    k3s = standin(tmp_path, "k3s", "v1.35.3+k3s1")
    stopped = run(k3s, "token", "create", "--ttl", "15m", f"--data-dir={server.parent}", env_path="/usr/bin:/bin")
    assert stopped.returncode == 1 and stopped.stdout == "" and "connection refused" in stopped.stderr
    agent = run(k3s, "token", "create", f"--data-dir={tmp_path / 'agent-only'}", env_path="/usr/bin:/bin")
    assert agent.returncode == 1 and agent.stdout == ""
    (server / "m2p-standin-server.pid").write_text(f"{os.getpid()}\n")
    bad = run(k3s, "token", "create", "--ttl", "15", f"--data-dir={server.parent}", env_path="/usr/bin:/bin")
    assert bad.returncode == 1 and bad.stdout == "" and 'invalid value "15" for flag -ttl' in bad.stderr
    assert not (server / "m2p-standin-bootstrap-tokens.json").exists()


def test_the_standin_k3s_deletes_a_bootstrap_token_by_its_id_only_as_k3s_does(tmp_path):
    """`k3s token delete ID`: its Secret goes ("bootstrap token "ID" deleted"); one not there fails as the API's
    NotFound; a whole token as the argument fails, since k3s parses its --token flag for anything not an ID."""
    server = k3s_server_dir(tmp_path, os.getpid())
    k3s = standin(tmp_path, "k3s", "v1.35.3+k3s1")
    data_dir = f"--data-dir={server.parent}"
    token = run(k3s, "token", "create", data_dir, env_path="/usr/bin:/bin").stdout.strip()
    token_id = BOOTSTRAP.match(token)["id"]  # type: ignore[index]
    whole = run(k3s, "token", "delete", token.split("::")[-1], data_dir, env_path="/usr/bin:/bin")
    assert whole.returncode == 1 and "didn't match pattern" in whole.stderr
    deleted = run(k3s, "token", "delete", token_id, data_dir, env_path="/usr/bin:/bin")
    assert deleted.returncode == 0 and deleted.stdout == f'bootstrap token "{token_id}" deleted\n'
    assert f"bootstrap-token-{token_id}" not in json.loads((server / "m2p-standin-bootstrap-tokens.json").read_text())
    again = run(k3s, "token", "delete", token_id, data_dir, env_path="/usr/bin:/bin")
    assert again.returncode == 1 and "not found" in again.stderr
