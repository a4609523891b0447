"""The probe script's framing, run for real with sh against canned commands."""

import base64
import shutil
import subprocess
import time

import pytest

from miner2provider.detect.facts import probe
from miner2provider.detect.facts.base import Output


def test_split_keeps_each_facts_output_and_status():
    text = ("@@m2p-fact a\nline1\nline2\n@@m2p-rc 0\n"
            "@@m2p-fact b\n@@m2p-rc 127\n")
    assert probe.split(text) == {"a": Output("line1\nline2\n", 0), "b": Output("", 127)}


def test_script_runs_under_posix_sh_and_yields_every_fact():
    out = subprocess.run(["sh", "-s"], input=probe.script(), capture_output=True, text=True, timeout=60)
    facts = probe.gather(out.stdout)
    assert facts.python.version is not None
    assert facts.kernel.machine


def test_cut_output_is_reported_not_misread():
    out = subprocess.run(["sh", "-s"], input=probe.script(), capture_output=True, text=True, timeout=60)
    with pytest.raises(probe.ProbeIncomplete, match="lacks"):
        probe.gather(out.stdout[: len(out.stdout) // 2])


def test_output_without_a_final_newline_keeps_the_rest_of_the_probe():
    """`cat status.json` of a file without a final newline glues the rc mark to its last line."""
    text = ("@@m2p-fact hostname\nrig1\n@@m2p-rc 0\n@@m2p-fact agent_status\n{\"mode\": \"mining\"}@@m2p-rc 0\n"
            "@@m2p-fact xid\n@@m2p-rc 0\n")
    outputs = probe.split(text)
    assert outputs["agent_status"] == Output('{"mode": "mining"}\n', 0)
    assert outputs["xid"] == Output("", 0) and outputs["hostname"] == Output("rig1\n", 0)


@pytest.mark.parametrize("with_dd", [True, False])
def test_the_report_leaves_the_rig_unchanged_in_one_write_with_dd_or_without(tmp_path, with_dd):
    """The probe's last line gathers its output into one write (dd), or passes it on (cat) where dd is missing."""
    batch = probe.script().splitlines()[-1]
    assert batch.startswith("} | ")
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("base64", "cat", "dd")[: 3 if with_dd else 2]:
        (tools / tool).symlink_to(shutil.which(tool))
    data = b"@@m2p-fact a\n\x00\xff line\r\n" * 5000 + b"no final newline"
    out = subprocess.run(["/bin/sh", "-c", f"base64 -d | {batch[len('} | '):]}"], input=base64.b64encode(data),
                         capture_output=True, timeout=60, env={"PATH": str(tools)})
    assert out.stdout == data


def test_a_fan_out_parses_an_output_once_and_every_rig_gets_the_same_facts():
    out = subprocess.run(["sh", "-s"], input=probe.script(), capture_output=True, text=True, timeout=60).stdout
    seen: dict = {}
    first, second = probe.gather(out, seen), probe.gather(out, seen)
    assert first == second == probe.gather(out)
    assert seen and all(len(o.text) <= probe.SHARED_OUTPUT for _, o in seen)
    assert second.os_release is first.os_release  # parsed once


# Five stand-in miners, a screensaver (a candidate ps shows and grep drops) and a grep's own words.
NAMES = ("/tmp/x/xmrig --pool p", "SCREEN -dmS miner bash", "bash /hive/bin/miner-run t-rex 1",
         "python3 /opt/mmp/miners/x/run.py", "/usr/bin/gnome-screensaver", "T-Rex -a x", "grep -iE [s]creen")


def test_the_miner_fact_keeps_the_lines_ps_and_grep_kept():
    """The fact reads ps only for processes whose command line holds a miner's word: same lines, same order, as
    `ps -eo args= | grep` over every process (MINER_LINES), run for real against stand-in miners."""
    from miner2provider.detect.facts.mining_os import MINER_LINES, MinerFact

    started = [subprocess.Popen(["bash", "-c", f'exec -a "{argv0}" sleep 60']) for argv0 in NAMES]
    try:
        time.sleep(0.3)  # each has exec'd sleep under its name
        whole = f"ps -eo args= | grep -iE '{MINER_LINES}'; true"
        outputs = [subprocess.run(["sh", "-c", f"LC_ALL=C; export LC_ALL; ( {c} ) 2>&1 </dev/null"],
                                  capture_output=True, text=True, timeout=60).stdout for c in (whole, MinerFact.command)]
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
    # Only this test's processes: others on this machine may come and go between the two reads.
    ours = [[line for line in out.splitlines() if line.startswith(NAMES)] for out in outputs]
    assert ours[0] == ours[1] and len(ours[1]) == 5
    found = MinerFact.parse(Output(outputs[1], 0))
    assert {"xmrig", "screen:miner", "miner-run t-rex", "run.py", "t-rex"} <= set(found.sessions)


XID_LINE = "[ 9.1] NVRM: Xid (PCI:0000:03:00): 79, pid=1, GPU has fallen off the bus."


@pytest.mark.parametrize(("who", "expect"), [
    # Ubuntu's dmesg_restrict=1 for a user without sudo and outside the journal's groups: journalctl exits 0 with
    # nothing (it shows such a user only their own journal), which must not read as "no Xid".
    ({"dmesg": "exit 1", "sudo": "exit 1", "id": "[ \"$1\" = -u ] && echo 1000 || echo user",
      "journalctl": "exit 0"}, (False, 0)),
    ({"dmesg": "exit 1", "sudo": f"[ \"$2\" = dmesg ] && echo '{XID_LINE}'", "id": "echo 1000",
      "journalctl": "exit 1"}, (True, 1)),  # password-less sudo reads the ring buffer
    ({"dmesg": "exit 1", "sudo": "exit 1", "id": "[ \"$1\" = -u ] && echo 1000 || echo 'user adm'",
      "journalctl": f"echo '{XID_LINE}'"}, (True, 1)),  # adm may read the system journal
    ({"dmesg": "echo '[ 0.0] Linux version 6.1'", "sudo": "exit 99", "id": "exit 99", "journalctl": "exit 99"},
     (True, 0)),  # a readable ring buffer without Xid: clean
])
def test_the_xid_fact_says_unreadable_where_the_login_user_cannot_read_the_kernel_log(tmp_path, who, expect):
    """The fact's command run for real by sh, with stand-ins for dmesg, sudo, id and journalctl acting as each
    kind of login user would see them."""
    from miner2provider.detect.facts.health import XidFact

    for name, body in who.items():
        tool = tmp_path / name
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    path = f"{tmp_path}:{'/usr/bin:/bin'}"
    out = subprocess.run(["sh", "-c", f"PATH={path}; ( {XidFact.command} ) 2>&1 </dev/null"],
                         capture_output=True, text=True, timeout=60)
    found = XidFact.parse(Output(out.stdout, out.returncode))
    assert (found.readable, found.count) == expect, out.stdout
