"""Issue 55 point 2, where a rig has no nft of its own: role k3s loads its pod filter with the nft k3s bundles
(files/find-nft.sh, run as the role runs it), and where there is none at all, a rig outside Tailscale mode still
converts and its outcome says that its tenants can reach 169.254.0.0/16 and 100.64.0.0/10 and how to stop it (the
role's own tasks, run by m2p's runner against this machine).

The k3s here is a STAND-IN shell script that unpacks as k3s does (k3s-io/k3s cmd/k3s/main.go, stageAndRun ->
extract: any tool it runs, kubectl among them, first unpacks its data into DATA_DIR/data/<hash>/ and points
DATA_DIR/data/current there; its nft lies in bin/aux, k3s-io/k3s-root scripts/package); its nft is this machine's.
Needs root (`nft list tables`) and nft (scripts/install), like test_k3s_pod_filter.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from miner2provider.core import collection
from miner2provider.core.inventory import Host
from miner2provider.fleet import pipeline, runner

FIND_NFT = collection.root() / "roles" / "k3s" / "files" / "find-nft.sh"


def host_nft() -> str:
    if os.geteuid() != 0 or shutil.which("nft") is None:  # never a skip: a machine that cannot run it goes red
        pytest.fail("needs root and nft (nftables): run scripts/install, and the tests as root")
    return str(shutil.which("nft"))


def stand_in_k3s(folder: Path, nft: str) -> Path:
    """A k3s whose `kubectl` unpacks its data (with nft in bin/aux) the way k3s's does, and records that it ran."""
    k3s = folder / "k3s"
    k3s.write_text(
        "#!/bin/sh\n# STAND-IN for k3s's unpacking (cmd/k3s/main.go extract), nothing else\n"
        "[ \"$1\" = kubectl ] || exit 1\n"
        f"echo \"$*\" >> {folder}/k3s-ran\n"
        f"/bin/mkdir -p {folder}/data/abc123/bin/aux && /bin/ln -sf {nft} {folder}/data/abc123/bin/aux/nft && "
        f"/bin/ln -sfn {folder}/data/abc123 {folder}/data/current\n")
    k3s.chmod(0o755)
    return k3s


def find_nft(k3s: Path, data_dir: Path, mode: str, path: str) -> subprocess.CompletedProcess[str]:
    """find-nft.sh run as pods_on.yml runs it (sh -c SCRIPT find-nft.sh K3S DATA_DIR MODE), with ``path`` as PATH."""
    return subprocess.run(["/bin/sh", "-c", FIND_NFT.read_text(), "find-nft.sh", str(k3s), str(data_dir), mode],
                          capture_output=True, text=True, timeout=30, env={"PATH": path})


def test_a_rig_without_nft_uses_the_one_k3s_bundles_and_a_plan_unpacks_nothing(tmp_path):
    nft = host_nft()
    no_nft = str(tmp_path / "empty")  # a PATH with no nft on it, as on a HiveOS image without nftables
    k3s = stand_in_k3s(tmp_path, nft)
    bundled = f"{tmp_path}/data/current/bin/aux/nft"

    planned = find_nft(k3s, tmp_path, "look", no_nft)  # a plan: k3s has not unpacked yet, and is not asked to
    assert (planned.returncode, planned.stdout) == (
        1, "nft is not installed (nftables) and k3s has not unpacked its own yet (convert has it do so)\n")
    assert not (tmp_path / "data").exists() and not (tmp_path / "k3s-ran").exists()

    found = find_nft(k3s, tmp_path, "unpack", no_nft)
    assert (found.returncode, found.stdout) == (0, bundled + "\n"), found
    assert (tmp_path / "k3s-ran").read_text() == "kubectl version --client\n"
    again = find_nft(k3s, tmp_path, "look", no_nft)  # unpacked: a plan finds it too, and k3s is not run again
    assert (again.returncode, again.stdout) == (0, bundled + "\n")
    assert (tmp_path / "k3s-ran").read_text() == "kubectl version --client\n"

    own = find_nft(k3s, tmp_path, "unpack", str(Path(nft).parent))  # the rig's own nft comes first
    assert (own.returncode, own.stdout) == (0, nft + "\n")


def test_an_nft_the_kernel_refuses_is_no_nft(tmp_path):
    """An nft that cannot talk to the kernel (no nf_tables) would leave the unit failing at every boot: none."""
    host_nft()
    refused = tmp_path / "bin" / "nft"
    refused.parent.mkdir()
    refused.write_text("#!/bin/sh\necho 'Error: Could not process rule: Protocol not supported' >&2\nexit 1\n")
    refused.chmod(0o755)
    said = find_nft(tmp_path / "no-k3s", tmp_path, "unpack", str(refused.parent))
    assert (said.returncode, said.stdout) == (1, f"the kernel refuses nftables ({refused} list tables failed)\n")


def test_a_lan_rig_with_no_nft_at_all_converts_and_its_outcome_says_its_tenants_reach_metadata(tmp_path):
    """The role's own pods_on.yml on this machine (as a rig outside Tailscale mode), with no nft on PATH and a k3s
    that brings none: no filter is written, nothing fails, and m2p's runner puts one warning beside the rig's
    outcome, whether it changed or not.  Once k3s has unpacked its nft, a plan of the same tasks (check mode) would
    write the filter and its unit, writes nothing, and warns of nothing."""
    host_nft()
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "sh").symlink_to("/bin/sh")  # PATH: a shell and nothing else, so no nft
    unit = f"m2p-test-pods-{os.getpid()}"  # a unit name no machine has: pods_off finds nothing to take off
    filter_file = tmp_path / "m2p-pods.nft"
    playbook = tmp_path / "pods_on.yml"
    playbook.write_text(
        f"- hosts: all\n  gather_facts: false\n  environment:\n    PATH: {bare}\n  tasks:\n"
        "    - name: The pods' filter as role k3s loads it\n"
        "      ansible.builtin.include_role:\n        name: m2p.rigs.k3s\n        tasks_from: pods_on\n"
        f"      vars:\n        k3s_bin: {tmp_path}/k3s\n        k3s_data_dir: {tmp_path}\n"
        f"        k3s_pod_filter_unit: {unit}\n        k3s_pod_filter_file: {filter_file}\n")
    host = Host("rig1", "127.0.0.1", 22, None, None, None, None, ("all",),
                {"ansible_connection": "local", "ansible_python_interpreter": sys.executable})
    events: list[runner.Event] = []
    report = runner.run_playbook(playbook, [host], on_event=events.append)
    assert report.status == "successful", (report, events)
    said = ("nft is not installed (nftables) and k3s brings none: lease pods on rig1 can reach 169.254.0.0/16 (a "
            "VPS's metadata service, the node's link-local services) and 100.64.0.0/10 (a tailnet); install nftables "
            "(apt-get install nftables) and convert again")
    assert report.warnings == {"rig1": [said]}
    assert not filter_file.exists()
    assert pipeline.outcome_of("rig1", report, note="HiveOS: a note") == pipeline.RigOutcome(
        "rig1", "converged", message=f"{said}; HiveOS: a note")  # what the owner must act on first
    changed = runner.RunReport("successful", 0, {"rig1": runner.HostStats(ok=3, changed=1)}, warnings=report.warnings)
    assert pipeline.outcome_of("rig1", changed, why="drift: file").message == f"{said}; drift: file"

    assert find_nft(stand_in_k3s(tmp_path, host_nft()), tmp_path, "unpack", str(bare)).returncode == 0
    planned = runner.run_playbook(playbook, [host], check=True)
    assert planned.status == "successful" and planned.warnings == {}, planned
    assert planned.changed_tasks["rig1"] == ["Write the pods' filter (its unit loads it)",
                                             "Write the unit that loads it at every boot, before k3s"], planned
    assert not filter_file.exists() and not Path(f"/etc/systemd/system/{unit}.service").exists()
