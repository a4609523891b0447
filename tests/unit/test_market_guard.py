"""The market guard (roles/timeshare_agent templates/market-guard.sh.j2): on a converted rig with no time-share
agent, the rig's node is cordoned while a process outside every container holds a GPU, or while nvidia-smi
cannot say; uncordoned once the GPUs are free, and only if the guard cordoned it.  Run as systemd runs it,
one pass (--once) at a time, against STAND-INS: an nvidia-smi that lists the pids a test names (or fails), and
a k3s kubectl that keeps the node's unschedulable flag in a file and logs each call."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import jinja2
import pytest

TEMPLATE = (Path(__file__).parents[2]
            / "ansible_collections/m2p/rigs/roles/timeshare_agent/templates/market-guard.sh.j2")


class Rig:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.holders = tmp / "holders"  # the pids the stand-in nvidia-smi lists; absent: it fails
        self.node = tmp / "unschedulable"  # "true" while the node is cordoned
        self.calls = tmp / "kubectl.log"
        self.kubeconfig = tmp / "kubelet.kubeconfig"
        self.kubeconfig.write_text("apiVersion: v1\n")
        self.api_down = tmp / "api-down"
        self.state = tmp / "state"
        smi = tmp / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\n[ -e {self.holders} ] || {{ echo 'NVIDIA-SMI has failed'; exit 9; }}\n"
                       f"cat {self.holders}\n")
        k3s = tmp / "k3s"
        k3s.write_text(f"""#!/bin/sh
echo "$*" >> {self.calls}
[ -e {self.api_down} ] && {{ echo 'Unable to connect to the server' >&2; exit 1; }}
case "$*" in
  *" get node "*) cat {self.node} 2>/dev/null || true ;;
  *" uncordon "*) rm -f {self.node}; echo "node/rig uncordoned" ;;
  *" cordon "*) echo -n true > {self.node}; echo "node/rig cordoned" ;;
esac
""")
        for tool in (smi, k3s):
            tool.chmod(0o755)
        self.script = tmp / "market-guard"
        env = jinja2.Environment(undefined=jinja2.StrictUndefined)
        env.filters["quote"] = shlex.quote
        self.script.write_text(env.from_string(TEMPLATE.read_text()).render(
            ansible_managed="test", timeshare_agent_node_name="rig 1", timeshare_agent_kubeconfig=str(self.kubeconfig),
            timeshare_agent_k3s_bin=str(k3s), timeshare_agent_nvidia_smi=str(smi),
            timeshare_agent_state_dir=str(self.state), timeshare_agent_guard_interval_s=30))

    def mining(self, pids: list[int] | None) -> None:
        if pids is None:
            self.holders.unlink(missing_ok=True)
        else:
            self.holders.write_text("".join(f"{p}\n" for p in pids))

    def guard(self) -> subprocess.CompletedProcess[str]:
        """One pass of the guard (a fresh process: what it remembers is only the mark on disk)."""
        return subprocess.run(["/bin/sh", str(self.script), "--once"], capture_output=True, text=True, timeout=30)

    @property
    def cordoned(self) -> bool:
        return self.node.exists() and self.node.read_text() == "true"

    def verbs(self) -> list[str]:
        calls = self.calls.read_text().splitlines() if self.calls.exists() else []
        return [c.split(" rig 1")[0].split()[-1] if " rig 1" in c else c for c in calls]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path)


def test_a_mining_rig_is_cordoned_and_marked_as_the_agent_marks_it(rig):
    rig.mining([os.getpid()])  # this test's process: outside every container, as a miner is
    done = rig.guard()
    assert done.returncode == 0, done.stderr
    assert rig.cordoned and (rig.state / "cordoned").read_text().strip().isdigit()
    assert rig.verbs() == ["node", "cordon"]  # read first (an owner's cordon is theirs), then cordoned
    rig.mining([])  # the miner is gone: the guard lifts its own cordon, and its mark
    assert rig.guard().returncode == 0
    assert not rig.cordoned and not (rig.state / "cordoned").exists()
    assert rig.verbs()[-1] == "uncordon"


def test_no_nvidia_smi_answer_counts_as_mining(rig):
    rig.mining(None)
    assert rig.guard().returncode == 0
    assert rig.cordoned


def test_a_rig_whose_gpus_are_free_stays_on_the_market_untouched(rig):
    rig.mining([])
    assert rig.guard().returncode == 0
    assert not rig.cordoned and rig.verbs() == []


def test_an_owners_cordon_stays_theirs(rig):
    rig.node.write_text("true")
    rig.mining([os.getpid()])
    assert rig.guard().returncode == 0
    assert not (rig.state / "cordoned").exists() and rig.verbs() == ["node"]  # read, not cordoned again
    rig.mining([])
    assert rig.guard().returncode == 0
    assert rig.cordoned and rig.verbs() == ["node"]  # never lifted by the guard


def test_no_credential_or_no_api_is_tried_again_soon(rig):
    rig.mining([os.getpid()])
    rig.kubeconfig.unlink()  # k3s writes it when the node registers
    first = rig.guard()
    assert first.returncode == 1 and rig.verbs() == []
    rig.kubeconfig.write_text("apiVersion: v1\n")
    rig.api_down.write_text("")
    second = rig.guard()
    assert second.returncode == 1 and "cannot read node rig 1" in second.stderr
    assert not rig.cordoned

