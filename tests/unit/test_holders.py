"""Who holds the GPUs (detect/facts/holders.py): miners named, supervisors found nearest first, anything else an
unknown GPU process; the detect line says it without a command line (wallets live there)."""

from __future__ import annotations

import dataclasses

from test_readiness import facts

from miner2provider.cli import render
from miner2provider.detect.facts.base import Output
from miner2provider.detect.facts.holders import Ancestor, Holder, HoldersFact

UUIDS = ("GPU-5b1e3c2a-9f4d-4e2b-8c7a-1d2e3f4a5b6c", "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d")


def test_a_known_miner_under_a_wrapper_in_screen_and_an_unknown_process_in_a_unit():
    trex = Holder(812, "t-rex", UUIDS, "", (Ancestor("bash", "h-run.sh"), Ancestor("screen")))
    other = Holder(90, "python3.11", UUIDS[:1], "render-farm.service", ())
    lease = Holder(77, "python3", UUIDS[1:], "cri-containerd-1.scope", (Ancestor("containerd-shim"),), True)
    assert (trex.miner, trex.supervisors) == ("t-rex", ("wrapper h-run.sh", "screen"))
    assert (other.miner, other.supervisors) == ("", ("unit render-farm.service",))
    by_hand = Holder(5, "lolMiner", UUIDS, "", (Ancestor("bash"), Ancestor("sshd")))
    assert (by_hand.miner, by_hand.supervisors) == ("lolminer", ())
    line = render.holders_line(dataclasses.replace(facts(), holders=(trex, other, lease, by_hand)))
    # T-Rex's API by its documented default (its arguments are never read: they hold wallets); lolMiner's is off
    # unless a flag turns it on, so none is said.
    assert (trex.api, by_hand.api, other.api) == ("127.0.0.1:4067", "", "")
    assert line == ("t-rex (pid 812, 2 GPUs; wrapper h-run.sh, screen; API 127.0.0.1:4067 (its default)); "
                    "unknown GPU process python3.11 (pid 90, 1 GPU; "
                    "unit render-farm.service); container python3 (pid 77, 1 GPU; unit cri-containerd-1.scope); "
                    "lolMiner (pid 5, 2 GPUs; started by hand)")


def test_what_a_rig_prints_cannot_forge_a_holder():
    """Lines a tampered rig could print: a non-numeric pid, a GPU id that is not a UUID, a unit path with
    slashes, a login session's scope (not a supervisor)."""
    text = (f"holder 12 {UUIDS[0]}\nholder x1 {UUIDS[0]}\nholder 13 not-a-uuid\nexe 12 t-rex\nexe 12 evil\n"
            "unit 12 ../../etc/passwd.service\nunit 13 session-4.scope\nparent 12 cron\t\n")
    (only,) = HoldersFact.parse(Output(text, 0))
    assert only == Holder(12, "t-rex", (UUIDS[0],), "", (Ancestor("cron"),))
    assert only.supervisors == ("cron",)


def test_the_captured_rigs_read_as_their_supervisors_say():
    """The golden outputs (tests/unit/facts/holders/): HiveOS's miner in its screen under hive.service; an owner's
    respawn loop, a shebang script named after itself; T-Rex started by hand in a login shell."""
    import json
    from pathlib import Path

    def holders(case: str) -> tuple[Holder, ...]:
        golden = json.loads((Path(__file__).parent / "facts" / "holders" / f"{case}.json").read_text())
        return HoldersFact.parse(Output(golden["output"], 0))

    assert [(h.miner, h.supervisors) for h in holders("hiveos-screen")] == [("", ("screen", "unit hive.service"))]
    assert [(h.miner, h.supervisors) for h in holders("plain-wrapper")] == [("", ("wrapper keep-mining.sh",))]
    assert [(h.miner, h.supervisors) for h in holders("t-rex-by-hand")] == [("t-rex", ())]
    assert holders("no-nvidia-smi") == ()
