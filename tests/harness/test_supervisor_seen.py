"""A rig's supervisor is seen while it is starting, not only once its exec has finished.

Popen returns while its child is still inside exec, and /proc/PID/cmdline reads empty until the kernel has set the
new command line (read right after Popen, 298 of 300 looks here were empty; a whole /proc scan usually reaches the
new pid late enough, but not on loaded cores).  A look that missed the supervisor made wait_ssh say "stopped while
booting: (empty end log)" of a rig that was only starting (issue 54's flake under load), and would make stop()
leave a supervisor that tears down the next rig of its slot.  Here the first look reads the command line empty,
as it does mid-exec.
"""

from __future__ import annotations

import subprocess
import sys

from m2p_sandbox import processes
from m2p_sandbox import rig as sandbox


def test_a_supervisor_whose_command_line_reads_empty_at_first_is_still_found(tmp_path, monkeypatch):
    rig_dir = tmp_path / "m2p00042"
    # A process with a supervisor's command line for rig_dir (it sleeps; it is no supervisor).
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", processes.SUPERVISOR_MODULE,
                             str(rig_dir)], stdin=subprocess.DEVNULL, start_new_session=True)
    real_cmdline = processes.cmdline
    looks: list[int] = []

    def mid_exec_at_first(pid: int) -> list[str]:
        if pid == proc.pid:
            looks.append(pid)
            if len(looks) == 1:
                return []  # what /proc/PID/cmdline gives between the exec's memory switch and its new arguments
        return real_cmdline(pid)

    monkeypatch.setattr(processes, "cmdline", mid_exec_at_first)
    try:
        assert sandbox._supervisors(rig_dir) == [proc.pid], "a supervisor in the middle of its exec was missed"
        assert len(looks) == 2
    finally:
        proc.kill()
        proc.wait()
