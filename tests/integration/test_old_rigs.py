"""Rigs as old as real farms run them (HiveOS on Ubuntu 20.04 and 18.04), on the bare base:
no python3-apt, no package mirror, no newer python3 to fall back on.

- python3 3.6 (HiveOS 0.6-222): refused before anything changes, with the way out.
- python3 3.6 with a 3.10 the owner built beside it: m2p_python_interpreter makes it work: convert, a second
  convert that changes nothing, revert.

python3 3.8 (HiveOS 0.6-227) is molecule/convert's conv-hive: convert, idempotence, revert, and no newer python3
after them (a rig of its own here repeated that).
"""

from __future__ import annotations

import json

import pytest
import yaml

from m2p_sandbox import flavours
from m2p_sandbox import rig as sandbox
from m2p_sandbox.bundle import build_test_bundle

from .conftest import infra_host, m2p, outcomes, rig_entry, run, ssh, wait_for

pytestmark = pytest.mark.integration

BESIDE = "/opt/python3.10/bin/python3"


def rig_state(r: sandbox.Rig) -> dict[str, str]:
    with ssh(r) as client:
        return {
            "miner": str(run(client, f"sudo {flavours.MINING['hiveos'][1]}")[0] == 0),
            "m2p state": str(run(client, "test -e /var/lib/m2p")[0] == 0),
            "k3s": str(run(client, "test -e /usr/local/bin/k3s")[0] == 0),
            "toolkit": run(client, "dpkg-query -W -f '${Package} ' 'nvidia-container*' 'libnvidia-container*' "
                                   "2>/dev/null")[1].strip(),
            "python3-apt": str(run(client, "dpkg -s python3-apt")[0] == 0),
        }


def test_old_pythons_convert_refuse_and_revert(boot_rigs, tmp_path):
    old36, beside = boot_rigs(sandbox.RigSpec("old36", "hiveos", ("rtx3060",), ("3.6",)),
                              sandbox.RigSpec("beside36", "hiveos", ("rtx3060",), ("3.6", "3.10")))
    bundle = tmp_path / "bundle"
    build_test_bundle(bundle)
    inv = tmp_path / "rigs.yml"
    inv.write_text(yaml.safe_dump({"all": {"vars": {"m2p_min_free_disk_gb": 5}, "hosts": {
        "old36": rig_entry(old36),
        "beside36": rig_entry(beside, m2p_python_interpreter=BESIDE)}}}))
    common = ["-i", str(inv), "--bundle", str(bundle), "--accept-new", "--known-hosts", str(tmp_path / "kh")]
    with ssh(old36) as client:
        assert run(client, "python3 -V")[1].startswith("Python 3.6.")
    # HiveOS's boot starts the miner late, after sshd answers (the stand-in's hive.service): on loaded cores a CI
    # run read the rig a moment before it did.
    wait_for("the miner HiveOS's boot starts", lambda: rig_state(old36)["miner"] == "True", timeout=60)
    before = rig_state(old36)
    assert before == {"miner": "True", "m2p state": "False", "k3s": "False", "toolkit": "", "python3-apt": "False"}

    detected = m2p("detect", *[a for a in common if "bundle" not in a], "--json")
    rows = {r["name"]: r for r in json.loads(detected.stdout)}
    assert rows["beside36"]["facts"]["python"]["version"].startswith("3.10."), rows["beside36"]["facts"]["python"]
    assert rows["old36"]["status"] == "not ready"

    first = m2p("convert", *common, "--yes", "--json")
    result = outcomes(first)
    assert first.returncode == 11, first.stdout[-3000:] + first.stderr[-3000:]
    assert result["beside36"]["result"] == "changed", result
    refused = result["old36"]
    assert refused["result"] == "failed" and refused["changed"] == 0, refused
    assert refused["message"].startswith("Refuse a rig whose python3 Ansible cannot drive: old36: python3 3.6.15 is "
                                         "older than 3.8"), refused
    assert "m2p_python_interpreter" in refused["message"]
    assert rig_state(old36) == before  # nothing changed, the miner still runs
    for r in (old36, beside):
        with ssh(r) as client:
            assert run(client, f"sudo {flavours.MINING['hiveos'][1]}")[0] == 0, f"{r.name}: the miner stopped"

    second = outcomes(m2p("convert", *common, "--limit", "beside36", "--yes", "--json", "--full"))
    assert second["beside36"]["changed"] == 0, second

    # revert (like schedule apply) refuses the 3.6 rig the same way, before any module runs.
    refused = outcomes(m2p("revert", *common, "--limit", "old36", "--yes", "--json"))["old36"]
    assert refused["result"] == "failed" and refused["changed"] == 0, refused
    assert "python3 3.6.15 is older than 3.8" in refused["message"], refused
    assert rig_state(old36) == before

    reverted = m2p("revert", *common, "--limit", "beside36", "--yes", "--json")
    assert reverted.returncode == 0, reverted.stdout[-3000:] + reverted.stderr[-3000:]
    assert rig_state(beside) == before  # mining, and nothing of m2p's left: no package, no k3s
    for r in (old36, beside):
        assert flavours.config_changes(infra_host(r), "hiveos") == [], r.name
    with ssh(beside) as client:  # m2p installed no python3 of its own: the owner's 3.10 is off PATH, as it was
        assert run(client, "bash -c 'compgen -c python3. | sort -u'")[1].split() == ["python3.6"]
