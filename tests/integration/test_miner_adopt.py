"""Issue 38 on a sandbox rig: a miner m2p has no adapter for, run by the owner's respawn wrapper from a login
(nohup; a shebang script looping over the miner), is named by detect, refused without the owner's --pid (m2p never
touches an unknown GPU process by itself), adopted into m2p-miner.service with the same program, arguments, folder
and environment (captured root-only, never shown), and released back to its wrapper.  The miner is the STAND-IN
(standin-cuda: resident memory, a CUDA context the stand-in nvidia-smi lists, seconds to exit), so it reads as an
unknown python3."""

from __future__ import annotations

import json

from m2p_sandbox import rig as sandbox

from .conftest import m2p, outcomes, rig_entry, run, ssh, wait_for

WALLET = "w-0xSECRETWALLET42"  # in the miner's environment
PASSWORD = "pool-pass-SECRET17"  # on the miner's command line
WRAPPER = f"""#!/bin/sh
# The owner's own respawn loop: the miner again two seconds after it ends.
while true; do
  /usr/bin/python3 /usr/lib/m2p-standin/standin-cuda --name trex --pool stratum+tcp://pool.invalid:4444 \\
    --pass {PASSWORD}
  sleep 2
done
"""


def _holders(client) -> list[tuple[int, str]]:
    """(pid, its systemd unit) of each process the stand-in nvidia-smi lists as holding a GPU."""
    rc, out = run(client, "for p in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do "
                          "echo \"$p $(sed -n 's#.*/##p' /proc/$p/cgroup | tail -n 1)\"; done")
    return [(int(line.split()[0]), (line.split() + [""])[1]) for line in out.splitlines() if line.strip()]


def test_a_hand_run_miner_under_a_wrapper_is_adopted_and_released_as_it_was(boot_rigs, tmp_path):
    (rig,) = boot_rigs(sandbox.RigSpec("ad-plain", "plain", ("rtx3060",)))
    wrapper = rig.path / "merged/opt/owner/keep-mining.sh"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text(WRAPPER)
    wrapper.chmod(0o755)
    with ssh(rig) as client:
        rc, out = run(client, f"sudo sh -c 'cd /opt/owner && MINER_WALLET={WALLET} nohup /opt/owner/keep-mining.sh "
                              "</dev/null >/dev/null 2>&1 &'")
        assert rc == 0, out
        first = wait_for("the miner on the GPU", lambda: _holders(client))[0]
    inv = tmp_path / "rigs.yml"
    inv.write_text(json.dumps({"all": {"hosts": {"ad-plain": rig_entry(rig)}}}))
    common = ["-i", str(inv), "--accept-new", "--known-hosts", str(tmp_path / "known_hosts")]

    seen = m2p("detect", *common)
    assert seen.returncode == 0 and "wrapper keep-mining.sh" in seen.stdout, seen.stdout[-2000:]
    blind = m2p("miner", "adopt", "ad-plain", *common, "--yes")
    assert blind.returncode == 2 and "never touches an unknown GPU process unless you name it" in blind.stderr
    with ssh(rig) as client:
        assert _holders(client)[0][0] == first[0]  # untouched

    adopted = m2p("miner", "adopt", "ad-plain", "--pid", str(first[0]), *common, "--yes", "--json")
    assert adopted.returncode == 0, adopted.stdout[-2000:] + adopted.stderr[-2000:]
    assert outcomes(adopted)["ad-plain"]["result"] == "changed"
    with ssh(rig) as client:
        pid, _ = wait_for("the miner in m2p's unit", lambda: [h for h in _holders(client)
                                                               if h[1] == "m2p-miner.service"])[0]
        rc, out = run(client, f"tr '\\0' ' ' < /proc/{pid}/cmdline; echo; sudo cat /proc/{pid}/environ | tr '\\0' '\\n'"
                              " | grep ^MINER_WALLET=; pgrep -x keep-mining.sh | wc -l; "
                              "sudo stat -c '%a %U' /etc/m2p/miner /etc/m2p/miner/adopted.json /etc/m2p/miner/run; "
                              "systemctl is-active m2p-miner.service; cat /etc/systemd/system/m2p-miner.service")
        lines = out.splitlines()
        assert lines[0].split()[1:] == ["/usr/lib/m2p-standin/standin-cuda", "--name", "trex", "--pool",
                                        "stratum+tcp://pool.invalid:4444", "--pass", PASSWORD], out
        assert lines[1] == f"MINER_WALLET={WALLET}" and lines[2] == "0", out  # same environment; the wrapper gone
        assert lines[3:7] == ["700 root", "600 root", "700 root", "active"], out
        assert PASSWORD not in "\n".join(lines[7:]) and WALLET not in "\n".join(lines[7:])  # the unit file: 0644
        record = json.loads(run(client, "sudo cat /etc/m2p/miner/adopted.json")[1])
        assert record["supervisor"] == "wrapper" and record["top"]["argv"][-1] == "/opt/owner/keep-mining.sh"
        assert len(record["sha256"]) == 64 and record["cwd"] == "/opt/owner"
    again = m2p("miner", "adopt", "ad-plain", "--pid", str(pid), *common, "--yes", "--json")
    assert outcomes(again)["ad-plain"]["result"] == "converged", again.stdout

    released = m2p("miner", "release", "ad-plain", *common, "--yes", "--json")
    assert released.returncode == 0 and outcomes(released)["ad-plain"]["result"] == "changed", released.stdout
    with ssh(rig) as client:
        back = wait_for("the miner under its wrapper again",
                     lambda: [h for h in _holders(client) if h[1] != "m2p-miner.service"])[0]
        rc, out = run(client, f"ps -o comm= -p $(ps -o ppid= -p {back[0]}); sudo cat /proc/{back[0]}/environ | "
                              "tr '\\0' '\\n' | grep ^MINER_WALLET=; sudo ls /etc/m2p/miner "
                              "/etc/systemd/system/m2p-miner.service 2>&1; systemctl is-active m2p-miner.service")
        assert out.splitlines()[0] == "keep-mining.sh" and f"MINER_WALLET={WALLET}" in out, out
        assert "'/etc/m2p/miner': No such file" in out and out.rstrip().endswith("inactive"), out
    said = "".join(p.stdout + p.stderr for p in (seen, blind, adopted, again, released))
    assert PASSWORD not in said and WALLET not in said
    off_again = m2p("miner", "release", "ad-plain", *common, "--yes", "--json")
    assert outcomes(off_again)["ad-plain"]["result"] == "converged", off_again.stdout
