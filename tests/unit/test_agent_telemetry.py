"""The agent's per-card telemetry and health (agent/telemetry.py, issue 56): nvidia-smi's CSV parsed into typed
cards (``[N/A]`` and ``[Not Supported]`` as None), read once an interval and never per tick, a lost card and a
failed call as health facts (never an exception), Xids from the kernel log read once each, and the agent that
takes a rig with an unhealthy card off the market, refuses the card at the gate and says a leased card's heat.
nvidia-smi here is the sandbox's STAND-IN (its fidelity: test_gpu_standin_telemetry.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_agent_service import LEASE_FIRST, api, at_the_gate, container, cordoned, make_agent, wait_waiting

from m2p_sandbox import gpu_standin
from miner2provider.agent import telemetry
from miner2provider.agent.card_read import parse, pci_key
from miner2provider.agent.config import Config
from miner2provider.agent.telemetry import CardWatch, KernelLog
from miner2provider.rigside.status import agent_status_from

__all__ = ["api"]  # the fixture, used by name
SCRIPT = Path(gpu_standin.__file__).parent / "nvidia-smi"


def standin(tmp_path: Path, **cards: dict[str, object]) -> Path:
    """gpus.json of two RTX 3090s (card N's row changed by ``cards["cardN"]``), its kernel log in tmp_path."""
    config = gpu_standin.rig_config("r1", ["rtx3090", "rtx3090"])
    for index, row in enumerate(config["gpus"]):  # type: ignore[arg-type]
        row.update(cards.get(f"card{index}", {}))
    config["kmsg"] = str(tmp_path / "kmsg")
    (tmp_path / "gpus.json").write_text(json.dumps(config))
    return tmp_path / "gpus.json"


def change(path: Path, index: int, **row: object) -> None:
    config = json.loads(path.read_text())
    config["gpus"][index].update(row)
    path.write_text(json.dumps(config))


def watch(tmp_path: Path, config: Path, limit: float | None = 85.0, calls: list | None = None) -> CardWatch:
    env = {"M2P_STANDIN_GPUS": str(config), "M2P_STANDIN_GPU_LOG": os.devnull, "PATH": os.environ["PATH"],
           "M2P_STANDIN_MINER": "no-miner-in-this-test"}

    def run(argv, **kwargs):
        (calls if calls is not None else []).append(argv)
        return subprocess.run([sys.executable, str(SCRIPT), *argv[1:]], env=env, **kwargs)

    return CardWatch(30.0, limit, KernelLog(str(tmp_path / "kmsg")), str(tmp_path / "no-driver"), run=run)


def test_rows_are_typed_and_what_a_card_does_not_say_is_none():
    rows = parse("0, GPU-a, NVIDIA GeForce RTX 3090, 00000000:01:00.0, 91, 100, 331.27, 350.00, 1695, 9501, 100, "
                 "5034, 24576, 4, 1, 0x0000000000000024, [N/A]\n"
                 "1, GPU-b, NVIDIA CMP 90HX, 00000000:02:00.0, 60, [N/A], [Not Supported], 320.00, 1500, 9000, 99, "
                 "4000, 10240, 1, 1, [Not Supported], 0\n"
                 "garbled, row\n")
    assert len(rows) == 2
    hot, cmp = rows
    assert (hot.temperature_c, hot.power_w, hot.sm_mhz, hot.pcie_width, hot.throttle, hot.ecc_uncorrected) == (
        91.0, 331.27, 1695.0, 1, 0x24, None)
    assert (cmp.fan_percent, cmp.power_w, cmp.throttle, cmp.ecc_uncorrected) == (None, None, None, 0)
    assert pci_key("00000000:01:00.0") == pci_key("PCI:0000:01:00") == pci_key("0000:01:00.0") == "0000:01:00"


def test_a_hot_card_is_said_and_comes_back_once_well_under_the_limit_read_once_an_interval(tmp_path):
    config = standin(tmp_path, card0={"temperature.gpu": "91"})
    calls: list = []
    cards = watch(tmp_path, config, calls=calls)
    cards.read(100.0, 1_800_000_000.0)
    hot, other = cards.cards
    assert (hot.health, other.health) == ("hot", "ok") and hot.temperature_c == 91.0
    assert cards.unhealthy() == {hot.uuid}
    assert cards.said() == (f"card 0 ({hot.uuid}) hot: 91 °C, over the owner's limit of 85 °C",)
    status = cards.status()
    assert status is not None and status.read_at == "2027-01-15T08:00:00+00:00" and status.cards == cards.cards
    change(config, 0, **{"temperature.gpu": "83"})
    cards.read(159.0, 1_800_000_029.0)  # within the fallback's interval (SMI_EVERY x 30 s): not read again
    assert len(calls) == 1 and cards.cards[0].temperature_c == 91.0
    cards.read(160.0, 1_800_000_030.0)
    assert len(calls) == 2 and cards.cards[0].health == "hot"  # 83 °C: not yet HOT_BACK_C under the limit
    assert cards.status() == status  # the same health: the status keeps its figures (a write saved)
    change(config, 0, **{"temperature.gpu": "79"})
    cards.read(220.0, 1_800_000_060.0)
    assert cards.cards[0].health == "ok" and cards.unhealthy() == frozenset()
    shown = cards.status()
    assert shown is not None and shown.read_at == "2027-01-15T08:01:00+00:00"  # a change of health: at once
    cards.read(280.0, 1_800_000_090.0)
    assert cards.status() == shown
    cards.read(220.0 + telemetry.PUBLISH_S, 1_800_000_360.0)
    assert cards.status() is not None and cards.status().read_at == "2027-01-15T08:06:00+00:00"  # type: ignore[union-attr]
    assert all(c.health == "ok" for c in watch(tmp_path, standin(tmp_path, card0={"temperature.gpu": "99"}),
                                               limit=None).cards)  # no limit: no temperature rule


def test_a_lost_card_is_a_health_fact_and_the_others_keep_their_last_figures(tmp_path):
    config = standin(tmp_path)
    cards = watch(tmp_path, config)
    cards.read(100.0, 1_800_000_000.0)
    change(config, 1, lost=True)
    cards.read(160.0, 1_800_000_030.0)
    assert [c.health for c in cards.cards] == ["ok", "lost"] and cards.cards[0].temperature_c == 38.0
    assert cards.unhealthy() == {cards.cards[1].uuid}
    assert cards.error == ("nvidia-smi: Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost.  "
                           "Reboot the system to recover this GPU")
    # Lost before the agent ever listed it: a card of unknown UUID, which the gate cannot tell from another.
    fresh = watch(tmp_path, config)
    fresh.read(100.0, 1_800_000_000.0)
    assert [(c.uuid, c.pci, c.health) for c in fresh.cards] == [("?", "0000:02:00", "lost")]
    assert fresh.at_gate([{"pod": "lease/job", "gpus": [0]}], [], None) != ""


def test_a_failed_call_never_raises_and_is_said(tmp_path):
    def hangs(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    cards = CardWatch(30.0, 85.0, KernelLog(str(tmp_path / "none")), run=hangs)
    cards.read(0.0, 1_800_000_000.0)
    assert cards.cards == () and cards.error == "nvidia-smi: no answer in 10 s"
    assert cards.status() is not None and "kernel log" in cards.status().error  # type: ignore[union-attr]


def test_an_xid_is_read_once_from_the_kernel_log_and_holds_its_card_for_an_hour(tmp_path):
    config = standin(tmp_path, card0={"xid": [48]})  # 48: an uncorrectable (double-bit) ECC error
    cards = watch(tmp_path, config)
    now = __import__("time").monotonic()  # the stand-in stamps its record with the monotonic clock, as the kernel
    cards.read(now, 1_800_000_000.0)  # nvidia-smi logs the Xid; the kernel log is read after it
    assert [c.health for c in cards.cards] == ["xid", "ok"] and cards.cards[0].why.startswith("Xid 48 in the kernel")
    assert cards.kernel.xids() == []  # each record once
    cards.read(now + telemetry.XID_HOLD_S + 1, 1_800_004_000.0)
    assert [c.health for c in cards.cards] == ["ok", "ok"]
    old = tmp_path / "old-kmsg"  # an Xid of long ago (the buffer since boot, at the first read) is no news
    old.write_text("3,7,1000000,-;NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.\n")
    stale = CardWatch(30.0, 85.0, KernelLog(str(old)), run=cards.run)
    stale.read(telemetry.XID_HOLD_S + 10.0, 1_800_000_000.0)
    assert [c.health for c in stale.cards] == ["ok", "ok"]


def test_the_gate_refuses_an_unhealthy_card_to_a_new_lease_only(tmp_path):
    config = standin(tmp_path, card1={"temperature.gpu": "90"})
    cards = watch(tmp_path, config)
    cards.read(0.0, 1_800_000_000.0)
    hot = cards.cards[1].uuid
    cards.card_map = {0: cards.cards[0].uuid, 1: hot}  # the driver's device minors
    assert cards.at_gate([{"pod": "lease/a", "gpus": [0]}], [], None) == ""
    assert "hands it to no lease" in cards.at_gate([{"pod": "lease/b", "gpus": [1]}], [], None)
    assert "hands it to no lease" in cards.at_gate([{"pod": "lease/b", "gpus": [1]}], [], None)  # asked again
    assert "hands it to no lease" in cards.at_gate([{"pod": "lease/c"}], [], None)  # its cards unknown
    # A lease's container that ran on the card through the gate restarts: it keeps its card (never cut) while the
    # API lists its pod; gone from the API, the pod is forgotten.
    assert cards.at_gate([], [{"pod": "lease/d", "gpus": [1]}], {"lease/d"}) == ""
    assert cards.at_gate([{"pod": "lease/d", "gpus": [1]}], [], {"lease/d"}) == ""
    assert "hands it to no lease" in cards.at_gate([{"pod": "lease/d", "gpus": [1]}], [], set())


def test_a_lease_asking_for_the_hot_card_is_refused_alone_and_one_asking_for_a_healthy_card_waits_on(tmp_path):
    """Two leases at the gate at once: only the one that would get the unhealthy card is refused (its place in
    the waiting list), with the reason; the one asking for the healthy card is not held back by it."""
    config = standin(tmp_path, card1={"temperature.gpu": "90"})
    cards = watch(tmp_path, config)
    cards.read(0.0, 1_800_000_000.0)
    cards.card_map = {0: cards.cards[0].uuid, 1: cards.cards[1].uuid}
    waiting = [{"pod": "lease/hot", "gpus": [1]}, {"pod": "lease/cool", "gpus": [0]}, {"pod": "lease/both", "gpus": [0, 1]}]
    why, refused = cards.refusals(waiting, [], None)
    assert refused == (0, 2) and "hands it to no lease" in why and "90" in why
    assert cards.refusals(waiting[1:2], [], None) == ("", ())
    assert cards.at_gate(waiting, [], None) == why


def test_the_config_reads_the_limit_and_the_interval(tmp_path):
    raw = {"node": "n", "schedule": "s", "gpu_count": 2, "miner": {"running_cmd": "true", "start_cmd": "true",
                                                                    "stop_cmd": "true"}}
    (tmp_path / "a.json").write_text(json.dumps({**raw, "temperature_limit_c": "85", "telemetry_interval_s": 60}))
    (tmp_path / "b.json").write_text(json.dumps({**raw, "temperature_limit_c": ""}))
    loaded = Config.load(str(tmp_path / "a.json"))
    assert (loaded.temperature_limit_c, loaded.telemetry_interval_s) == (85.0, 60.0)
    assert Config.load(str(tmp_path / "b.json")).temperature_limit_c is None


def test_a_hot_card_takes_the_rig_off_the_market_refuses_a_lease_keeps_mining_and_comes_back(api, tmp_path):
    clock = [1_800_000_000.0]
    agent = make_agent(api, tmp_path, LEASE_FIRST, clock=lambda: clock[0])
    config = standin(tmp_path)
    agent.gpus.health = watch(tmp_path, config)
    assert agent.tick() == ["offer"] and agent.tick() == ["start-miner"] and not cordoned(api)
    change(config, 1, **{"temperature.gpu": "92"})
    clock[0] += 30 * telemetry.SMI_EVERY  # the stand-in's nvidia-smi: the fallback's interval
    assert agent.tick() == ["unoffer"] and cordoned(api) and agent.state.mode == "idle-mining"
    assert (tmp_path / "miner.running").exists()  # mining goes on: health stops no miner
    status = agent_status_from(json.loads((tmp_path / "state/status.json").read_text()))
    assert status.telemetry is not None and [c.health for c in status.telemetry.cards] == ["ok", "hot"]
    assert "card 1 (GPU-" in status.last_error and "hot: 92 °C" in status.last_error
    # A lease's container at the gate (its pod, bound before the cordon, not yet listed): refused, with why; the
    # miner stays.
    proc, state = container(tmp_path)
    try:
        thread, result = at_the_gate(tmp_path, state)
        wait_waiting(agent, thread)
        assert agent.tick() == []
        thread.join(5)
        assert result["answer"][0] is False and "hands it to no lease" in result["answer"][1]
    finally:
        proc.kill()
        proc.wait()
    change(config, 1, **{"temperature.gpu": "70"})
    clock[0] += 30 * telemetry.SMI_EVERY
    assert agent.tick() == ["offer"] and not cordoned(api) and (tmp_path / "miner.running").exists()
    assert agent_status_from(json.loads((tmp_path / "state/status.json").read_text())).last_error == ""


def test_a_programs_own_fault_holds_no_card_so_a_tenant_cannot_take_the_rig_off_the_market(tmp_path):
    """A tenant's kernel that faults raises Xid 13, 31 or 43 (and 45 as its process is cleaned up): the card is
    fine, and holding it would let any lease cordon the rig for an hour."""
    config = standin(tmp_path, card0={"xid": sorted(telemetry.PROGRAM_XIDS)}, card1={"xid": [31, 48]})
    cards = watch(tmp_path, config)
    cards.read(__import__("time").monotonic(), 1_800_000_000.0)
    assert [c.health for c in cards.cards] == ["ok", "xid"] and cards.cards[1].why.startswith("Xid 48"), cards.cards
