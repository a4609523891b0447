"""The generic miner adapter (issue 15): m2p ends the processes running from a mining OS's miner folder
itself, TERM then KILL, after the OS's own hold command.  Real processes, started here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from miner2provider.agent import gate, nvml, rig, shell
from miner2provider.agent.clocks import Clocks
from miner2provider.agent.rig import Miner, _programs


def start(folder: Path, name: str, *, ignore_term: bool, relative: bool) -> subprocess.Popen[bytes]:
    """A stand-in miner: a python script in ``folder`` (run as ./name from there when relative)."""
    script = folder / name
    script.write_text("import signal, time\n"
                      + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
                      + "print('ready', flush=True)\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, f"./{name}" if relative else str(script)], cwd=folder,
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


@pytest.fixture
def miners(tmp_path):
    folder = tmp_path / "opt/mmp/miners/standin"
    folder.mkdir(parents=True)
    started: list[subprocess.Popen[bytes]] = []
    yield folder, started
    for proc in started:
        proc.kill()
        proc.wait()


def test_stop_runs_the_hold_then_ends_the_miners_term_first_then_kill(miners, tmp_path):
    folder, started = miners
    polite = start(folder, "polite-miner", ignore_term=False, relative=True)
    stubborn = start(folder, "stubborn-miner", ignore_term=True, relative=False)
    elsewhere = start(tmp_path, "not-a-miner", ignore_term=False, relative=True)
    started += [polite, stubborn, elsewhere]
    hold = tmp_path / "held"
    miner = Miner(running_cmd="", start_cmd="", stop_cmd=f"touch {hold}",
                  processes=(str(tmp_path / "opt/mmp/miners"),), grace_s=0.5)
    assert sorted(miner.miner_pids()) == sorted([polite.pid, stubborn.pid])
    assert miner.running()
    t0 = time.monotonic()
    miner.stop()
    assert hold.exists()  # the OS's own hold ran first
    assert polite.wait(5) == -15 and stubborn.wait(5) == -9  # TERM ended one; the other needed KILL
    assert time.monotonic() - t0 >= 0.5  # KILL only after the grace
    assert not miner.running() and elsewhere.poll() is None  # a process outside the folder is left alone


def test_a_failing_hold_stops_nothing_and_says_so(miners, tmp_path):
    folder, started = miners
    started.append(start(folder, "m", ignore_term=False, relative=True))
    miner = Miner(running_cmd="", start_cmd="", stop_cmd="echo no dashboard >&2; exit 3",
                  processes=(str(tmp_path / "opt/mmp/miners"),))
    with pytest.raises(RuntimeError, match="exited 3: no dashboard"):
        miner.stop()
    assert started[0].poll() is None


def test_programs_resolve_an_interpreters_relative_script_against_its_cwd(miners):
    folder, started = miners
    proc = start(folder, "rel-miner", ignore_term=False, relative=True)
    started.append(proc)
    assert dict(_programs("/proc"))[proc.pid] == str(folder / "rel-miner")


def test_without_processes_nothing_is_swept():
    assert Miner(running_cmd="", start_cmd="", stop_cmd="").miner_pids() == []
    assert not Miner(running_cmd="", start_cmd="", stop_cmd="").running()


class FakeNvml:
    """NVML as pynvml exposes it, for two cards; the second cannot lock clocks (a Pascal card)."""

    NVML_ERROR_NOT_SUPPORTED = 3

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(f"NVML error {value}")
            self.value = value

    def __init__(self, fail_power: bool = False, old_driver: bool = False) -> None:
        self.calls: list[tuple[str, int, tuple[object, ...]]] = []
        self.fail_power = fail_power
        self.old_driver = old_driver  # an NVML without the offset calls (before driver 470)

    def nvmlInit(self) -> None:
        self.calls.append(("init", -1, ()))

    def nvmlShutdown(self) -> None:
        self.calls.append(("shutdown", -1, ()))

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: int) -> int:
        return (350_000, 180_000)[handle]  # milliwatts

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return (b"GPU-aaa", b"GPU-bbb")[handle]  # bytes, as older pynvml returns it

    def _call(name: str):  # type: ignore[misc]
        def call(self, handle: int, *args: object) -> None:
            if self.old_driver and "VfOffset" in name:
                raise self.NVMLError(13)  # NVML_ERROR_FUNCTION_NOT_FOUND
            if handle == 1 and "Locked" in name:
                raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
            if self.fail_power and name == "nvmlDeviceSetPowerManagementLimit":
                raise self.NVMLError(4)  # NO_PERMISSION
            self.calls.append((name, handle, args))
        return call

    nvmlDeviceResetGpuLockedClocks = _call("nvmlDeviceResetGpuLockedClocks")
    nvmlDeviceResetMemoryLockedClocks = _call("nvmlDeviceResetMemoryLockedClocks")
    nvmlDeviceSetGpcClkVfOffset = _call("nvmlDeviceSetGpcClkVfOffset")
    nvmlDeviceSetMemClkVfOffset = _call("nvmlDeviceSetMemClkVfOffset")
    nvmlDeviceSetPowerManagementLimit = _call("nvmlDeviceSetPowerManagementLimit")


def test_clocks_reset_through_nvml_puts_every_card_on_its_defaults():
    nvml = FakeNvml()
    Clocks().reset(nvml=nvml)
    assert nvml.calls == [
        ("init", -1, ()),
        ("nvmlDeviceResetGpuLockedClocks", 0, ()), ("nvmlDeviceResetMemoryLockedClocks", 0, ()),
        ("nvmlDeviceSetGpcClkVfOffset", 0, (0,)), ("nvmlDeviceSetMemClkVfOffset", 0, (0,)),
        ("nvmlDeviceSetPowerManagementLimit", 0, (350_000,)),
        # card 1 cannot lock clocks: nothing there to reset, the rest is
        ("nvmlDeviceSetGpcClkVfOffset", 1, (0,)), ("nvmlDeviceSetMemClkVfOffset", 1, (0,)),
        ("nvmlDeviceSetPowerManagementLimit", 1, (180_000,)),
        ("shutdown", -1, ()),
    ]
    with pytest.raises(RuntimeError, match="GPU 0: nvmlDeviceSetPowerManagementLimit: NVML error 4"):
        Clocks().reset(nvml=FakeNvml(fail_power=True))


def test_clocks_reset_only_the_cards_handed_over_and_say_what_an_old_driver_cannot_reset():
    nvml = FakeNvml(old_driver=True)
    left = Clocks().reset(nvml=nvml, cards=frozenset({"GPU-bbb"}))
    # Card 0 mines on beside the lease, on the owner's tuning: untouched.  Card 1's offsets: this NVML lacks the
    # calls; the rest is reset and what was not is said.
    assert [call for call in nvml.calls if call[1] == 0] == []
    assert nvml.calls[1:-1] == [("nvmlDeviceSetPowerManagementLimit", 1, (180_000,))]
    assert left == ["GPU 1: nvmlDeviceSetGpcClkVfOffset", "GPU 1: nvmlDeviceSetMemClkVfOffset"]
    assert Clocks().reset(nvml=FakeNvml(), cards=frozenset()) == []  # no card asked: nothing touched


def test_clocks_reset_without_nvml_asks_nvidia_smi_and_skips_what_a_card_cannot_do():
    class NoNvml:
        def nvmlInit(self) -> None:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    asked: list[list[str]] = []

    def run(argv, **_):
        asked.append(argv[1:])
        if argv[1] == "-rmc":
            return subprocess.CompletedProcess(argv, 3, "Setting memory locked clocks is not supported for GPU 1.\n", "")
        if argv[1].startswith("--query-gpu"):
            return subprocess.CompletedProcess(argv, 0, "0, GPU-aaa, 350.00\n1, GPU-bbb, [N/A]\n2, GPU-ccc, 200.00\n", "")
        return subprocess.CompletedProcess(argv, 0, "All done.\n", "")

    query = ["--query-gpu=index,uuid,power.default_limit", "--format=csv,noheader,nounits"]
    Clocks().reset(nvml=NoNvml(), run=run)
    assert asked == [["-rgc"], ["-rmc"], query, ["-i", "0", "-pl", "350.00"], ["-i", "2", "-pl", "200.00"]]
    asked.clear()  # the cards a lease gets, by UUID: only those
    Clocks().reset(nvml=NoNvml(), run=run, cards=frozenset({"GPU-ccc"}))
    assert asked == [["-i", "GPU-ccc", "-rgc"], ["-i", "GPU-ccc", "-rmc"], query, ["-i", "2", "-pl", "200.00"]]

    def denied(argv, **_):
        return subprocess.CompletedProcess(argv, 4, "", "Unable to reset GPU clocks: Insufficient Permissions\n")

    with pytest.raises(RuntimeError, match="nvidia-smi -rgc exited 4: Unable to reset GPU clocks"):
        Clocks().reset(nvml=NoNvml(), run=denied)


def test_clocks_reapply_runs_the_mining_oss_own_command(tmp_path):
    Clocks().reapply()  # none known: nothing to run
    Clocks(apply_cmd=f"echo applied > {tmp_path / 'oc'}").reapply()
    assert (tmp_path / "oc").read_text() == "applied\n"
    with pytest.raises(RuntimeError, match="exited 2: no X"):
        Clocks(apply_cmd="echo no X >&2; exit 2").reapply()


def test_a_start_is_judged_by_the_miner_running_not_by_the_scripts_exit(tmp_path):
    """HiveOS's real `miner start` exits 1 whenever its watchdog is off (hiveos-linux hive/bin/miner ends with
    ``[[ $WD_ENABLED == 1 ]] && wd start``): the miner runs, so the start worked."""
    running = tmp_path / "running"
    hive_like = Miner(f"test -e {running}", f"touch {running}; false", "", start_settle_s=1)
    hive_like.start()
    assert running.exists()
    broken = Miner(f"test -e {tmp_path / 'never'}", "echo 'No miner is set in rig.conf'; exit 1", "",
                   start_settle_s=0.3)
    with pytest.raises(RuntimeError, match="exited 1 and no miner runs: No miner is set in rig.conf"):
        broken.start()


def test_a_stop_is_judged_by_the_miner_stopping_not_by_the_scripts_exit(tmp_path):
    """msOS's real core/stop ends with `exit 1` (minerstat-os core/stop): the miner stopped, so the stop worked;
    a stop after which the miner still runs fails, saying what the script said."""
    running = tmp_path / "running"
    running.touch()
    Miner(f"test -e {running}", "", f"rm {running}; exit 1", grace_s=0.3).stop()
    running.touch()
    with pytest.raises(RuntimeError, match="the miner still runs after echo busy; exit 1 .it exited 1: busy"):
        Miner(f"test -e {running}", "", "echo busy; exit 1", grace_s=0.3).stop()


def test_what_still_holds_the_gpus_after_a_stop_is_ended_after_the_grace_term_then_kill(miners, tmp_path):
    """A miner that ignores the first stop and hang-up survives its screen (the OS says it stopped): it still
    holds the GPUs (NVML), so it is ended, TERM first, KILL after the grace; nothing else is touched."""
    folder, started = miners
    survivor = start(folder, "survivor", ignore_term=True, relative=False)
    bystander = start(tmp_path, "bystander", ignore_term=False, relative=True)
    started += [survivor, bystander]
    holders = [survivor.pid]
    t0 = time.monotonic()
    Miner("", "", "true", grace_s=0.5).stop(lambda: [pid for pid in holders if survivor.poll() is None])
    assert survivor.wait(5) == -9 and time.monotonic() - t0 >= 1.0  # the grace, TERM ignored, another grace
    assert bystander.poll() is None


def test_the_miner_starts_in_a_scope_of_its_own_where_systemd_runs_the_host(monkeypatch, tmp_path):
    from miner2provider.agent import shell

    monkeypatch.setattr(shell.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(shell, "Path", lambda p: tmp_path if p == "/run/systemd/system" else Path(p))
    argv = shell.in_own_scope(["/bin/sh", "-c", "/hive/bin/miner start"])
    assert argv[:2] == ["systemd-run", "--scope"] and argv[2].startswith("--unit=m2p-miner-")
    assert argv[-3:] == ["/bin/sh", "-c", "/hive/bin/miner start"]
    monkeypatch.setattr(shell, "Path", lambda p: tmp_path / "absent" if p == "/run/systemd/system" else Path(p))
    assert shell.in_own_scope(["/bin/sh", "-c", "x"]) == ["/bin/sh", "-c", "x"]  # no systemd: as it is


def test_a_plain_check_runs_without_a_shell_and_shell_syntax_still_gets_one(tmp_path):
    """The tick's `running` check: plain words start one process (no sh in between); quotes, variables, pipes,
    redirections and shell builtins still go to sh; a program that is not there answers 127 as sh does."""
    marker = tmp_path / "miner.running"
    plain = rig.Miner(running_cmd=f"test -e {marker}", start_cmd="", stop_cmd="")
    assert plain.running() is False
    marker.touch()
    assert plain.running() is True
    assert shell._probe(f"test -e {marker}", 5).args == ["test", "-e", str(marker)]
    for shell_syntax in (f"test -e '{marker}'", f"M={marker}; test -e $M", f"ls {tmp_path} | grep -q running",
                         f"test -e {tmp_path}/*.running", f"test -e {marker} 2>/dev/null"):
        probe = shell._probe(shell_syntax, 5)
        assert probe.args[:2] == ["/bin/sh", "-c"] and probe.returncode == 0, shell_syntax
    missing = shell._probe("no-such-program-m2p --flag", 5)
    assert missing.returncode == 127 and "no-such-program-m2p" in missing.stderr
    builtin = shell._probe("command -v sh", 5)  # no program of that name: sh's builtin answers
    assert builtin.args[:2] == ["/bin/sh", "-c"] and builtin.returncode == 0
    assert rig.Miner(running_cmd="no-such-program-m2p", start_cmd="", stop_cmd="").running() is False


# -- per card ------------------------------------------------------------------------------------------------
def test_a_miner_started_on_some_cards_sees_only_them_and_one_started_on_all_sees_what_the_agent_sees(tmp_path):
    seen = tmp_path / "seen"
    miner = Miner(running_cmd="", start_cmd=f'echo "${{CUDA_DEVICE_ORDER-}}|${{CUDA_VISIBLE_DEVICES-unset}}" > {seen}',
                  stop_cmd="", own_scope=False, start_settle_s=0)  # no miner runs here: no wait for one
    miner.start(("GPU-a", "GPU-b"))
    assert seen.read_text().strip() == "PCI_BUS_ID|GPU-a,GPU-b"
    os.environ["CUDA_VISIBLE_DEVICES"] = "GPU-stale"
    try:
        miner.start(("GPU-c",))
        assert seen.read_text().strip() == "PCI_BUS_ID|GPU-c"  # never the agent's own, appended to
        miner.start()
        assert seen.read_text().strip() == "|GPU-stale"  # every card: the agent's environment as it is
    finally:
        del os.environ["CUDA_VISIBLE_DEVICES"]


def test_the_drivers_cards_are_read_by_device_minor_and_odd_entries_are_skipped(tmp_path):
    folder = tmp_path / "gpus"
    for pci, text in {
        "0000:01:00.0": "Model: \t\t NVIDIA GeForce RTX 3070\nGPU UUID: \t GPU-aaa\nBus Location: \t 0000:01:00.0\n"
                        "Device Minor: \t 3\n",
        "0000:02:00.0": "Model: \t\t NVIDIA GeForce RTX 3070\nGPU UUID: \t GPU-bbb\nDevice Minor: \t 0\n",
        "0000:03:00.0": "Model: \t\t NVIDIA GeForce RTX 3070\nGPU UUID: \t ???\nDevice Minor: \t 1\n",  # no UUID
        "0000:04:00.0": "GPU UUID: \t GPU-ddd\nDevice Minor: \t -1\n",  # no minor
    }.items():
        (folder / pci).mkdir(parents=True)
        (folder / pci / "information").write_text(text)
    (folder / "0000:05:00.0").mkdir()  # a card whose file cannot be read
    assert nvml.card_uuids(str(folder)) == {3: "GPU-aaa", 0: "GPU-bbb"}
    assert list(nvml.card_uuids(str(folder)).values()) == ["GPU-aaa", "GPU-bbb"]  # PCI bus order, not the minors'
    assert nvml.card_uuids(str(tmp_path / "absent")) == {}


@pytest.mark.parametrize(("devices", "minors"), [
    ([{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1},
      {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}], [1]),
    ([{"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3},
      {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}], [0, 3]),
    ([{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}], None),  # no card: the whole rig
    ([{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": "1"}], None),  # not the runtime's shape
    ([{"path": "/dev/nvidia1", "type": "b", "major": 8, "minor": 1}], []),  # a block device of that name
    ("devices", None),
])
def test_a_containers_cards_are_the_card_nodes_of_its_oci_spec(tmp_path, devices, minors):
    (tmp_path / "config.json").write_text(json.dumps({"linux": {"devices": devices}}))
    assert gate.gpu_minors({"bundle": str(tmp_path)}) == (minors or None)


def test_a_container_without_a_readable_spec_has_unknown_cards(tmp_path):
    assert gate.gpu_minors({}) is None
    assert gate.gpu_minors({"bundle": str(tmp_path / "gone")}) is None
    (tmp_path / "config.json").write_text("{not json")
    assert gate.gpu_minors({"bundle": str(tmp_path)}) is None


def test_a_miner_whose_start_takes_no_environment_gets_its_cards_through_its_units_file(tmp_path):
    """m2p's own unit (m2p-miner.service) reads EnvironmentFile=-/run/m2p/miner-cards.env at each start: the
    agent writes the cards there before a start on some and removes it before a start on every card.  The
    start command here reads the file as systemd does (KEY=VALUE lines)."""
    env_file, seen, unit = tmp_path / "run/m2p/miner-cards.env", tmp_path / "seen", tmp_path / "m2p-miner.service"
    miner = Miner(running_cmd="", stop_cmd="", own_scope=False, per_card=True, cards_env_file=str(env_file),
                  cards_env_unit=str(unit), start_settle_s=0,
                  start_cmd=f"env -i sh -c 'if [ -e {env_file} ]; then set -a; . {env_file}; fi; "
                            f"echo \"${{CUDA_VISIBLE_DEVICES-every card}}\"' > {seen}")
    miner.start(("GPU-a", "GPU-b"))
    assert env_file.read_text() == "CUDA_DEVICE_ORDER=PCI_BUS_ID\nCUDA_VISIBLE_DEVICES=GPU-a,GPU-b\n"
    assert seen.read_text().strip() == "GPU-a,GPU-b"
    miner.start()
    assert not env_file.exists() and seen.read_text().strip() == "every card"
    # Only a unit that reads the file takes cards: one adopted before it did (or none) means a whole-rig hand-over.
    assert not miner.takes_cards()
    unit.write_text("[Service]\nExecStart=/etc/m2p/miner/run\n")
    assert not miner.takes_cards()
    unit.write_text(f"[Service]\nExecStart=/etc/m2p/miner/run\nEnvironmentFile=-{env_file}\n")
    assert miner.takes_cards()
    assert Miner(running_cmd="", start_cmd="", stop_cmd="", per_card=True).takes_cards()
    assert not Miner(running_cmd="", start_cmd="", stop_cmd="").takes_cards()


def test_the_adopted_units_cards_file_is_the_one_the_mining_os_record_names():
    import yaml

    from miner2provider.fleet import adopt_on_rig

    record = yaml.safe_load((Path(__file__).parents[2] / "ansible_collections/m2p/rigs/roles/mining_os/vars"
                             / "default.yml").read_text())
    assert f"'{adopt_on_rig.CARDS_ENV}'" in record["mining_os_miner_cards_env_file"]
    assert f"== '{adopt_on_rig.UNIT_NAME}'" in record["mining_os_miner_per_card"]
    assert f"'{adopt_on_rig.UNIT}'" in record["mining_os_miner_cards_env_unit"]
    revert = (Path(__file__).parents[2] / "ansible_collections/m2p/rigs/roles/timeshare_agent/tasks/revert.yml")
    assert f" {adopt_on_rig.CARDS_ENV}]" in revert.read_text()  # revert removes what the agent wrote
    unit = adopt_on_rig.UNIT_TEXT.format(run=adopt_on_rig.RUN, cards_env=adopt_on_rig.CARDS_ENV)
    assert f"\nEnvironmentFile=-{adopt_on_rig.CARDS_ENV}\n" in unit


# -- the mining OS's environment (issue 51) ------------------------------------------------------------------
def test_the_mining_oss_commands_get_its_environment_file_as_its_own_boot_script_does(tmp_path):
    """HiveOS's commands find colors, miner-run and gpu-detect through the PATH its /etc/environment sets, which
    systemd never reads: the agent gives it to every command of the OS it runs (start, stop, watchdog, clocks),
    keeps its own choice of cards over it, and reads it only where root alone can write it."""
    bin_dir = tmp_path / "hive/bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "colors").write_text("#!/bin/sh\necho colors\n")
    (bin_dir / "colors").chmod(0o755)
    environment = tmp_path / "environment"
    environment.write_text(f'# HiveOS\nPATH="{bin_dir}:/usr/bin:/bin"\nRIG_CONF=/hive-config/rig.conf\n'
                           "export WALLET_CONF='/hive-config/wallet.conf'\nnot a line\n"
                           "CUDA_VISIBLE_DEVICES=GPU-everything\n")
    environment.chmod(0o644)
    seen = tmp_path / "seen"
    probe = f'{{ colors; echo "$RIG_CONF|$WALLET_CONF|${{CUDA_VISIBLE_DEVICES-}}"; }} > {seen}'
    Miner(running_cmd="", start_cmd=probe, stop_cmd="", own_scope=False, environment_file=str(environment),
          start_settle_s=0).start(("GPU-a",))
    assert seen.read_text().split() == ["colors", "/hive-config/rig.conf|/hive-config/wallet.conf|GPU-a"]
    Miner(running_cmd="", start_cmd="true", stop_cmd=probe, environment_file=str(environment)).stop()
    assert seen.read_text().split()[0] == "colors"
    Clocks(apply_cmd=probe, environment_file=str(environment)).reapply()
    assert seen.read_text().split()[0] == "colors"
    # Without it (what systemd gives a unit): no colors on PATH, as on a real rig.
    with pytest.raises(RuntimeError, match="colors: not found"):
        Clocks(apply_cmd=f"colors > {seen}").reapply()
    environment.chmod(0o666)  # anyone may write it: never read as root
    with pytest.raises(RuntimeError, match="is not root's alone"):
        Clocks(apply_cmd="true", environment_file=str(environment)).reapply()
    with pytest.raises(RuntimeError, match="the mining OS's environment .*absent"):
        Miner(running_cmd="", start_cmd="true", stop_cmd="", environment_file=str(tmp_path / "absent")).start()


def test_a_start_is_judged_by_a_miner_holding_the_cards_not_by_its_exit_code(tmp_path):
    """HiveOS's `miner start` exits 0 having started nothing (no environment, no miner set); a start is a miner
    process on the cards it was started on within start_hold_s, whatever the script exited.  Only an OS that
    really starts its miner later (msOS's console: start_believed) is believed on exit 0."""
    held = tmp_path / "held"
    nothing = Miner(running_cmd="", start_cmd="echo Miner started", stop_cmd="", own_scope=False, start_hold_s=0.5)
    with pytest.raises(RuntimeError, match=r"exited 0 but no miner process holds a GPU after 0.5 s: Miner started"):
        nothing.start(holding=held.exists)
    with pytest.raises(RuntimeError, match="holds its cards"):
        nothing.start(("GPU-a",), holding=held.exists)
    Miner(running_cmd="", start_cmd="true", stop_cmd="", own_scope=False, start_believed=True,
          start_settle_s=0).start(holding=held.exists)
    # An old HiveOS exits 1 with its watchdog off although the miner started: the miner on the cards decides.
    Miner(running_cmd="", start_cmd=f"touch {held}; exit 1", stop_cmd="", own_scope=False).start(holding=held.exists)


def test_a_leftover_the_os_takes_for_a_running_miner_is_cleared_by_its_own_stop_before_a_start(tmp_path):
    """A `miner` screen session holding only a bash (HiveOS's start with no miner set): its next `miner start`
    says "Miner screen is already running" and starts nothing, unless the OS's own stop clears it first."""
    session, miner_run = tmp_path / "session", tmp_path / "miner-run"
    start = (f"if test -e {session}; then echo Miner screen is already running; "
             f"else touch {session} {miner_run}; fi")
    kwargs = {"running_cmd": f"test -e {miner_run}", "start_cmd": start, "stop_cmd": f"rm -f {session} {miner_run}",
              "own_scope": False, "start_hold_s": 0.5}
    session.touch()  # the leftover: a session, no miner in it
    with pytest.raises(RuntimeError, match="already running"):
        Miner(**kwargs).start(holding=miner_run.exists)
    Miner(**kwargs, leftover_cmd=f"test -e {session}").start(holding=miner_run.exists)
    assert miner_run.exists()
    stopped = tmp_path / "stopped"  # a miner that runs is never stopped for a leftover check
    Miner(**{**kwargs, "stop_cmd": f"touch {stopped}"}, leftover_cmd=f"test -e {session}").start(
        holding=miner_run.exists)
    assert not stopped.exists()


def test_the_watchdog_is_given_back_as_it_was(tmp_path):
    log = tmp_path / "log"
    miner = Miner(running_cmd="", start_cmd="", stop_cmd="", watchdog_running_cmd="false",
                  watchdog_stop_cmd=f"echo stop >> {log}", watchdog_release_cmd=f"echo release >> {log}",
                  watchdog_start_cmd=f"echo start >> {log}")
    assert not miner.watchdog_running()
    miner.hold_watchdog()
    miner.release_watchdog(was_running=False)  # it did not run before: released, not started
    miner.release_watchdog(was_running=True)
    assert log.read_text().split() == ["stop", "release", "release", "start"]


def test_a_card_off_its_defaults_is_found_through_nvml_or_nvidia_smi():
    """A leased card tuned again (a power limit other than the default, a clock offset) is found; a card or an NVML
    that cannot say counts as on its defaults."""
    class Tuned(FakeNvml):
        def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
            return (350_000, 140_000)[handle]  # card 1: nvidia-oc's 140 W

        def nvmlDeviceGetGpcClkVfOffset(self, handle: int) -> int:
            raise self.NVMLError(13)  # this NVML has no offsets

    assert Clocks().tuned(nvml=Tuned()) == {"GPU-bbb"}
    assert Clocks().tuned(frozenset({"GPU-aaa"}), nvml=Tuned()) == frozenset()

    class NoNvml:
        def nvmlInit(self) -> None:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    def smi(argv, **_):
        assert argv[1] == "--query-gpu=uuid,power.limit,power.default_limit"
        return subprocess.CompletedProcess(argv, 0, "GPU-aaa, 240.00, 350.00\nGPU-bbb, 350.00, 350.00\n"
                                                    "GPU-ccc, [N/A], [N/A]\n", "")
    assert Clocks().tuned(nvml=NoNvml(), run=smi) == {"GPU-aaa"}
    assert Clocks().tuned(frozenset({"GPU-bbb"}), nvml=NoNvml(), run=smi) == frozenset()
