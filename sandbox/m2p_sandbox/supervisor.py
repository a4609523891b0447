"""Supervisor of one sandbox rig: ``python -m m2p_sandbox.supervisor RIG_DIR``.

It runs ``systemd-nspawn --boot`` and
- boots it again when the rig reboots (nspawn exits 133), so ``ansible.builtin.reboot``
  works as on a real rig;
- powers the rig off cleanly on SIGTERM/SIGINT/SIGHUP (nspawn turns its own SIGTERM
  into a poweroff request to the rig's systemd), killing it after a grace period;
- kills it at once on SIGUSR1 (a test's teardown: no one reads a poweroff there, and a rig whose
  miner ignores stops, as real ones do, waited the whole grace);
- does the same when the rig's owner process dies, even by SIGKILL, so an
  interrupted test run leaves no rig behind;
- tears the rig down (processes, mount, veth, namespace, directory) when it ends.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from m2p_sandbox import processes
from m2p_sandbox.rig import AT_ONCE, Rig, console_tail, note_end, nspawn_command, teardown

REBOOT_EXIT = 133  # systemd-nspawn's exit status when the container asked to reboot
POWEROFF_GRACE = 20.0


def supervise(rig_dir: Path) -> int:
    try:
        rig = Rig.from_dir(rig_dir)
    except BaseException as exc:  # said where a waiting test reads why its rig ended
        note_end(rig_dir, f"the supervisor could not read its rig: {exc!r}")
        raise
    stopping = at_once = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping, at_once
        stopping = True
        at_once = at_once or signum == AT_ONCE

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, AT_ONCE):
        signal.signal(sig, request_stop)

    try:
        while True:
            # /proc/sys/net writable, as on a real rig: the rig has its own network namespace, so its sysctls
            # (a tunnel's forwarding) are its own; nspawn leaves them read-only under --network-namespace-path.
            child = subprocess.Popen(nspawn_command(rig), stdin=subprocess.DEVNULL,
                                     env={**os.environ, "SYSTEMD_NSPAWN_API_VFS_WRITABLE": "network"})
            asked_at: float | None = None
            while child.poll() is None:
                owner_gone = rig.owner_pid is not None and not processes.is_alive(
                    rig.owner_pid, rig.owner_start
                )
                if (stopping or owner_gone) and asked_at is None:
                    if owner_gone:
                        note_end(rig_dir, f"its owner, pid {rig.owner_pid}, is gone: powering off")
                    stopping = True
                    if at_once:
                        child.kill()
                    else:
                        child.send_signal(signal.SIGTERM)
                    asked_at = time.monotonic()
                elif asked_at is not None and (at_once or time.monotonic() - asked_at > POWEROFF_GRACE):
                    child.kill()
                try:
                    child.wait(timeout=0.25)
                except subprocess.TimeoutExpired:
                    pass
            if child.returncode == REBOOT_EXIT and not stopping:
                print(f"m2p-sandbox: rig {rig.name} rebooted; booting it again", flush=True)
                continue
            print(f"m2p-sandbox: rig {rig.name} stopped (nspawn exit {child.returncode})", flush=True)
            ended = ("as asked, at once" if at_once else "as asked") if stopping else "UNASKED"
            note_end(rig_dir, f"nspawn exit {child.returncode} ({ended}); console: {console_tail(rig_dir, 8)}")
            return 0
    except BaseException as exc:
        note_end(rig_dir, f"the supervisor failed: {exc!r}")
        raise
    finally:
        teardown(rig_dir)


if __name__ == "__main__":
    sys.exit(supervise(Path(sys.argv[1])))
