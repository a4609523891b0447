"""Role fingerprint: what it records is what the detect probe reads back on an unchanged rig."""

import json

from miner2provider.detect.facts.base import Output
from miner2provider.detect.facts.fingerprint import FingerprintFact


def probe(host):
    with host.sudo():
        result = host.run(FingerprintFact.command)
    return FingerprintFact.parse(Output(result.stdout + result.stderr, result.rc))


def test_probe_reads_back_the_recorded_state_unchanged(host):
    fp = probe(host)
    assert fp.present and not fp.error
    assert fp.inputs == "molecule-inputs-digest"
    assert fp.gpus.startswith("driver 550.127.05; ") and "GeForce RTX 3060" in fp.gpus
    assert fp.current == fp.recorded
    # Nothing of k3s is on this rig: the watched units and files are recorded as absent.
    assert "file /etc/rancher/k3s/config.yaml missing" in fp.recorded


def test_a_change_on_the_rig_is_drift(host):
    with host.sudo():
        host.run("cp /etc/cdi/nvidia.yaml /root/cdi.bak 2>/dev/null; mkdir -p /etc/cdi && echo x >> /etc/cdi/nvidia.yaml")
        try:
            fp = probe(host)
        finally:
            host.run("if [ -e /root/cdi.bak ]; then mv /root/cdi.bak /etc/cdi/nvidia.yaml; else rm -f /etc/cdi/nvidia.yaml; fi")
    changed = set(fp.current) ^ set(fp.recorded)
    assert {line.split()[1] for line in changed} == {"/etc/cdi/nvidia.yaml"}
    assert json.loads(host.file("/var/lib/m2p/fingerprint.json").content_string)["inputs"] == "molecule-inputs-digest"
