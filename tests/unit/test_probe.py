"""The probe script's framing, run for real with sh against canned commands."""

import subprocess

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
