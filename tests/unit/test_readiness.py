"""Readiness verdicts: pure, from facts built in the test."""

import dataclasses
import re

import pytest

from miner2provider.detect.facts import FACTS_BY_NAME
from miner2provider.detect.facts.base import Output
from miner2provider.detect.facts.probe import RigFacts
from miner2provider.detect.facts.system import Mount
from miner2provider.detect.readiness import Finding, Thresholds, assess

GPU_ROW = ("0, NVIDIA GeForce RTX 3090, GPU-1, 00000000:01:00.0, 0x220410DE, 0x38801462, 24576, "
           "550.127.05\n")
BASE_OUTPUT = {
    "os_release": "ID=ubuntu\nVERSION_ID=\"22.04\"\nPRETTY_NAME=\"Ubuntu 22.04.5 LTS\"\n",
    "kernel": "6.6.0-hiveos x86_64\n",
    "cgroup": "cgroup2fs\n",
    "cpu": "4\nmodel name : Intel(R) Core(TM) i5\n",
    "memory": "MemTotal: 16000000 kB\nMemAvailable: 12000000 kB\n",
    "disks": "Filesystem Type 1024-blocks Used Available Capacity Mounted on\n"
             "/dev/sda2 ext4 250000000 1000 200000000 1% /\n",
    "python": "Python 3.10.12\n",
    "sudo": "nopasswd\n",
    "mining_os": "marker /hive/bin\nmarker /hive/etc/environment\ndpkg hive 0.6-229\n",
    "miner": "SCREEN -dmS miner /hive/miners/x\n",
    "gpus": GPU_ROW,
    "cuda": "CUDA Version: 12.4 |\n",
    "amd_gpus": "",
    "installed": "",
    "hostname": "rig01\n",
    "default_route": "default via 192.168.1.1 dev enp3s0 proto dhcp\n",
    "xid": "",
    "fingerprint": "@@m2p-no-fingerprint\n",
    "agent_status": "",
    "agent_ledger": "",
}


def facts(**overrides):
    outputs = {**BASE_OUTPUT, **overrides}
    rc = {"gpus": 0}
    return RigFacts(**{n: FACTS_BY_NAME[n].parse(Output(t, rc.get(n, 0))) for n, t in outputs.items()})


def test_a_healthy_hiveos_rig_is_ready():
    v = assess(facts())
    assert v.status == "ready" and v.blockers == () and v.warnings == ()


def test_small_usb_stick_needs_a_data_disk():
    small = facts(disks="Filesystem Type 1024-blocks Used Available Capacity Mounted on\n"
                        "/dev/sda2 ext4 7340032 5000000 2340032 70% /\n")
    v = assess(small)
    assert v.status == "not ready"
    assert v.blockers[0].sentence.startswith("7 GB disk, 2.2 GB free on /: k3s needs 40 GB")
    assert "add an SSD and set m2p_data_dir" in v.blockers[0].sentence


def test_a_disk_nearly_full_is_said_before_kubelet_evicts_and_the_stick_fills():
    """Issue 33: 85 % used warns (kubelet evicts at 90 %); the USB stick (/) is watched even when k3s's data is
    on another disk, since the OS, its logs and pod logs stay there."""
    full_stick = dataclasses.replace(facts(), disks=(Mount("/dev/sda2", "ext4", "/", 15, 1.5),
                                                     Mount("/dev/nvme0n1p1", "ext4", "/mnt/ssd", 233, 200)))
    verdict = assess(full_stick, Thresholds(data_dir="/mnt/ssd/k3s"))
    assert [f.code for f in verdict.blockers] == []
    said = [f.sentence for f in verdict.warnings if f.code == "disk-nearly-full"]
    assert said == ["/ is 90% full (1.5 GB free): kubelet evicts pods at 90 % (its nodefs and imagefs floors, 10 %), "
                    "and a stick that fills up stops logging and may go read-only; free space there (old miners, "
                    "logs) before it does"]
    roomy = dataclasses.replace(facts(), disks=(Mount("/dev/sda2", "ext4", "/", 250, 200),))
    assert "disk-nearly-full" not in {f.code for f in assess(roomy).warnings}


def test_data_dir_on_a_second_disk_makes_a_small_stick_fine():
    f = dataclasses.replace(facts(), disks=(Mount("/dev/sda2", "ext4", "/", 7, 2),
                                            Mount("/dev/nvme0n1p1", "ext4", "/mnt/ssd", 233, 221)))
    assert "suggest" not in " ".join(map(str, assess(f).blockers))
    assert "set m2p_data_dir to a folder on /mnt/ssd (221 GB free)" in assess(f).blockers[0].sentence
    assert assess(f, Thresholds(data_dir="/mnt/ssd/k3s")).status == "ready"


def test_old_python_no_python_no_sudo_no_gpu():
    assert "python3 3.6.9 is older than 3.8" in assess(facts(python="Python 3.6.9\n")).blockers[0].sentence
    assert assess(facts(python="absent\n")).blockers[0].sentence.startswith("no python3")
    assert assess(facts(sudo="absent\n")).blockers[0].sentence.startswith("no sudo")
    no_gpu = RigFacts(**{**facts().__dict__, "gpus": FACTS_BY_NAME["gpus"].parse(Output("", 127))})
    assert assess(no_gpu).blockers[0].sentence.startswith("no nvidia-smi")


def test_a_control_node_without_gpus_or_a_miner_is_ready_and_still_needs_its_disk():
    """m2p_control_node (a VPS: k3s's server and a farm's hub): no GPU, driver or miner-adapter findings; the rest
    (disk, RAM, python, sudo, route) as for any rig."""
    vps = RigFacts(**{**facts(os_release="ID=debian\nVERSION_ID=\"12\"\nPRETTY_NAME=\"Debian GNU/Linux 12\"\n",
                              mining_os="", miner="").__dict__,
                      "gpus": FACTS_BY_NAME["gpus"].parse(Output("", 127))})
    assert assess(vps).status == "not ready"  # as a rig: no nvidia-smi
    control = Thresholds(control_node=True)
    verdict = assess(vps, control)
    assert verdict.blockers == () and not {f.code for f in verdict.warnings} & {"no-miner-adapter", "old-cuda"}
    full = dataclasses.replace(vps, disks=(Mount("/dev/vda1", "ext4", "/", 25, 3),))
    assert [f.code for f in assess(full, control).blockers] == ["low-disk"]


def test_warnings_cgroup_v1_mixed_models_old_cuda_sudo_password():
    mixed = GPU_ROW + GPU_ROW.replace("0, NVIDIA GeForce RTX 3090", "1, NVIDIA GeForce RTX 3060")
    v = assess(facts(cgroup="tmpfs\n", gpus=mixed, cuda="CUDA Version: 11.4\n", sudo="password\n"))
    text = " | ".join(map(str, v.warnings))
    assert v.status == "ready with warnings"
    assert "cgroup v1" in text
    assert "mixed GPU models on one node (NVIDIA GeForce RTX 3090, NVIDIA GeForce RTX 3060)" in text
    assert "supports CUDA 11.4 only" in text
    assert "sudo asks for a password" in text
    assert "sudo" not in " ".join(map(str, assess(facts(sudo="password\n"), Thresholds(become_password_given=True)).warnings))


def test_low_ram_blocks():
    v = assess(facts(memory="MemTotal: 2000000 kB\nMemAvailable: 1000000 kB\n"))
    assert v.blockers == (Finding("low-ram", "1953 MB usable of about 2048 MB installed: k3s with GPU workloads "
                                             "needs at least 4096 MB installed"),)


@pytest.mark.parametrize("mem_total_kb,passes", [
    (3946496, True),   # a 4 GB board as the project's fixture shows it: 3854 MB usable
    (4194304, True),   # exactly 4 GiB
    (3145728, False),  # a 3 GB board
    (3670016, True),   # 3584 MB: a 4 GB board whose onboard GPU keeps 512 MB
    (8053040, True),
])
def test_the_ram_floor_is_installed_memory_not_memtotal(mem_total_kb, passes):
    v = assess(facts(memory=f"MemTotal: {mem_total_kb} kB\nMemAvailable: 1000000 kB\n"))
    assert ("low-ram" not in {b.code for b in v.blockers}) is passes, v.blockers


def test_no_default_route_blocks_and_xid_errors_warn():
    v = assess(facts(default_route="", xid="[ 1.0] NVRM: Xid (PCI:0000:03:00): 79, pid=1, GPU has fallen off the bus.\n"))
    assert any(b.code == "no-default-route" and "default route" in b.sentence for b in v.blockers)
    assert any(w.code == "xid-errors" and "Xid 79" in w.sentence and "riser" in w.sentence for w in v.warnings)


def test_a_kernel_log_the_login_user_cannot_read_says_xid_errors_are_unknown():
    v = assess(facts(xid="@@unreadable\n"))
    assert [w.code for w in v.warnings] == ["xid-unknown"] and "cannot read the kernel log" in v.warnings[0].sentence


def test_a_mining_os_without_an_adapter_is_named_and_ethos_and_nhos_are_refused():
    """Issue 15: a rig with mining markers never passes for plain Linux; RaveOS (no adapter) is named;
    ethOS and NiceHash OS are refused with their reasons."""
    v = assess(facts(mining_os="module /usr/lib/python3/dist-packages/ravinos\nosid ubuntu\n"))
    assert [(w.code, w.sentence.split(":")[0]) for w in v.warnings] == [("no-miner-adapter", "RaveOS")], v
    assert "`schedule apply` refuses the rig" in v.warnings[0].sentence and v.status == "ready with warnings"
    v = assess(facts(mining_os="marker /opt/ethos/etc/version\nethos 1.3.3\nosid ubuntu\n"))
    assert [b.code for b in v.blockers] == ["ethos-eol"] and v.blockers[0].sentence.startswith(
        "ethOS 1.3.3 is end of life (last release 1.3.3, on Ubuntu 16.04 with python3 3.5")
    for nhos in ("marker /var/log/nhos\n", "marker /mnt/nhos/configuration.txt\n", "label NHOS\n"):
        v = assess(facts(mining_os=nhos + "osid ubuntu\n"))
        assert [b.code for b in v.blockers] == ["nhos-in-ram"] and "runs from RAM" in v.blockers[0].sentence
    for adapted in ("osid ubuntu\n", "osid debian\n", "marker /hive/bin\nmarker /hive/etc/environment\n",
                    "marker /home/minerstat/minerstat-os\n", "marker /opt/mmp/bin/agent\n",
                    "marker /root/utils/stats_rig.sh\n"):
        assert not [w for w in assess(facts(mining_os=adapted)).warnings if w.code == "no-miner-adapter"]


def test_miner_control_says_how_sure_m2p_is():
    from miner2provider.detect.facts.base import Output
    from miner2provider.detect.facts.mining_os import MiningOsFact

    def control(out: str) -> str:
        return MiningOsFact.parse(Output(out, 0)).miner_control

    assert control("marker /hive/bin\nmarker /hive/etc/environment\n") == "verified"
    assert control("marker /home/minerstat/minerstat-os\n") == "verified"
    assert control("marker /opt/mmp/bin/agent\n") == control("marker /root/utils/stats_rig.sh\n") == \
        "generic (unverified)"
    assert control("module /usr/local/lib/python3.10/dist-packages/ravinos\n") == "none"
    assert control("osid ubuntu\n").startswith("the owner's systemd unit")


def test_amd_cards_are_named_and_refused_not_taken_for_a_rig_without_gpus():
    """Issue 15: an AMD rig is no NVIDIA rig without a driver: convert refuses it by name."""
    rx580 = "amd 0000:01:00.0 0x67df 0xe7 0x1da2 0xe366 8589934592\n"
    v = assess(facts(gpus="", amd_gpus=rx580 * 1 + rx580.replace("01:00", "02:00")))
    assert [(b.code, b.sentence) for b in v.blockers] == [
        ("amd-gpus", "AMD GPUs: not converted yet (2 x AMD Radeon RX 580 Series, 8 GiB): m2p installs "
                     "NVIDIA's stack only; `m2p attributes` lists them")]
    # AMD beside NVIDIA: the NVIDIA cards convert, the AMD ones are left out, and the owner is told.
    v = assess(facts(amd_gpus=rx580))
    assert [b.code for b in v.blockers] == [] and [w.code for w in v.warnings] == ["amd-gpus-left-out"]


def test_every_mining_os_is_one_record_and_adapted_ones_carry_their_commands():
    """The mining_os role's vars/<kind>.yml is the record: detect and the roles read the same file."""
    import yaml

    from miner2provider.detect import os_records

    kinds = {r.kind: r for r in os_records.records()}
    assert set(kinds) == {"hiveos", "msos", "ethos", "mmpos", "smos", "nhos", "raveos"}
    assert {k for k, r in kinds.items() if r.has_adapter} == {"hiveos", "msos", "mmpos", "smos"}
    assert {k for k, r in kinds.items() if r.refusal} == {"ethos", "nhos"}
    for kind, record in kinds.items():
        adapter = yaml.safe_load((os_records.folder() / f"{kind}.yml").read_text())
        assert all(key.startswith("mining_os_") for key in adapter), kind  # role variables, prefixed
        has_commands = bool(adapter["mining_os_miner_stop_cmd"] and adapter["mining_os_miner_start_cmd"])
        assert has_commands == record.has_adapter == (not adapter.get("mining_os_unadapted", False)), kind


THROWAWAY = """---
# A test's mining OS: recognised by its marker, its version from its own file.
mining_os_label: Throwaway OS
mining_os_detect_order: 0
mining_os_markers_any: [/opt/throwaway/agent]
mining_os_version_probes: ['[ -r /opt/throwaway/VERSION ] && echo "tw $(head -n1 /opt/throwaway/VERSION)"']
mining_os_version_from: [{line: tw, strip: "v"}]
mining_os_miner_control: %(control)s
mining_os_driver_upgrade: none
%(refusal)s
mining_os_miner_stop_cmd: %(stop)s
mining_os_miner_start_cmd: %(start)s
"""


@pytest.mark.parametrize("how", ["adapted", "refused", "unadapted"])
def test_adding_a_mining_os_is_one_record(tmp_path, monkeypatch, how):
    """A throwaway record beside the real ones is probed, recognised, named, refused or adapted: no other
    file is touched (the fact's command and parser, readiness and the adapter all come from records)."""
    import shutil

    from miner2provider.detect import os_records
    from miner2provider.detect.facts.base import Output
    from miner2provider.detect.facts.mining_os import probe_command, recognise

    folder = tmp_path / "vars"
    shutil.copytree(os_records.folder(), folder)
    (folder / "throwaway.yml").write_text(THROWAWAY % {
        "control": "verified" if how == "adapted" else "none",
        "refusal": "mining_os_refusal: {code: throwaway-eol, sentence: '{os} is gone: reflash it'}"
                   if how == "refused" else "",
        "stop": "/opt/throwaway/stop" if how == "adapted" else '""',
        "start": "/opt/throwaway/start" if how == "adapted" else '""'})
    monkeypatch.setattr(os_records, "folder", lambda: folder)
    records = os_records.records()
    assert "/opt/throwaway/agent" in probe_command(records) and "/opt/throwaway/VERSION" in probe_command(records)
    found = recognise(Output("marker /opt/throwaway/agent\ntw v2.1\nosid ubuntu\n", 0), records)
    assert (found.kind, found.version, found.label, found.markers) == (
        "throwaway", "2.1", "Throwaway OS", ("/opt/throwaway/agent",))
    verdict = assess(facts(mining_os="marker /opt/throwaway/agent\ntw v2.1\n"))
    blockers = [(b.code, b.sentence) for b in verdict.blockers]
    warnings = [w.code for w in verdict.warnings]
    if how == "refused":
        assert blockers == [("throwaway-eol", "Throwaway OS 2.1 is gone: reflash it")]
    elif how == "unadapted":
        assert blockers == [] and "no-miner-adapter" in warnings
    else:
        assert blockers == [] and "no-miner-adapter" not in warnings
        assert found.has_adapter and found.miner_control == "verified"


@pytest.mark.parametrize("broken, said", [
    ("mining_os_label: X\n", "not a mining-OS record (KeyError: 'detect_order')"),
    ("mining_os_label: X\nmining_os_detect_order: 1\n", "needs markers"),
    ("mining_os_label: X\nmining_os_detect_order: 1\nmining_os_markers_any: [relative]\n", "absolute paths"),
    ("mining_os_label: X\nmining_os_detect_order: 1\nmining_os_markers_any: [/x]\nmining_os_miner_control: maybe\n",
     "miner_control is one of"),
])
def test_a_broken_record_names_its_file(tmp_path, broken, said):
    from miner2provider.detect import os_records

    (tmp_path / "bad.yml").write_text(broken)
    with pytest.raises(os_records.RecordError, match=re.escape(said)) as caught:
        os_records.records(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'bad.yml'}: ")


def test_cgroup_v1_names_the_last_line_and_its_end_of_life_and_an_old_k3s_is_past_its_own():
    from datetime import date

    from miner2provider.detect.readiness import Thresholds

    v = assess(facts(cgroup="tmpfs\n"))
    (cg,) = [w for w in v.warnings if w.code == "cgroup-v1"]
    assert "Kubernetes 1.35 is the last line" in cg.sentence and "end of life 2027-02-28" in cg.sentence
    assert "systemd.unified_cgroup_hierarchy=1" in cg.sentence
    old = facts(installed="k3s k3s version v1.33.2+k3s1 (abc)\n")
    (eol,) = [w for w in assess(old, Thresholds(today=date(2026, 11, 23))).warnings if w.code == "k3s-eol"]
    assert "Kubernetes 1.33 reached end of life on 2026-06-28" in eol.sentence
    assert not [w for w in assess(old, Thresholds(today=date(2026, 6, 28))).warnings if w.code == "k3s-eol"]
