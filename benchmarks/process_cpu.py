"""Where a command's CPU goes, by program: the kernel's process accounting around one command (the suite, a convert).

Run as root:  .venv/bin/python benchmarks/process_cpu.py [--top 20] -- COMMAND [ARGS...]
              e.g.  .venv/bin/python benchmarks/process_cpu.py -- bash .ci/run

BSD process accounting (``acct(2)``, switched on for the command's run and off after it) writes one record per
process that ends, anywhere on the machine, containers' included: its command name (the file it ran, so a rig's
module interpreter shows as ``python3.11`` or ``python3.8`` and the controller's as ``ansible-playboo``), user
and system CPU.  Printed: the machine's CPU-s (``/proc/stat``) and the processes' by name, most first.  What the
suite taught (docs/benchmarks.md): two thirds of its CPU was Ansible's own way of running a task.  Processes still
running when the command ends (daemons, a rig's systemd) are not counted; neither is anything else the machine
ran meanwhile, so run it on a quiet machine.  Needs a kernel with BSD_PROCESS_ACCT (/proc/sys/kernel/acct).
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (float), then
# comp_t utime, stime, mem, io, rw, minflt, majflt, swaps, and comm[16]: 64 bytes.
RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")
AHZ = 100  # the clock the kernel's comp_t CPU times count in (linux/acct.h)


def comp_t(value: int) -> int:
    """A comp_t as the number it stands for: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (((value >> 13) & 7) * 3)


def cpu_by_program(data: bytes) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """(CPU seconds, processes) by command name from acct v3 records."""
    seconds: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        if fields[1] != 3:  # not a v3 record
            continue
        name = fields[18].split(b"\0")[0].decode(errors="replace")
        seconds[name] += (comp_t(fields[10]) + comp_t(fields[11])) / AHZ
        count[name] += 1
    return seconds, count


def machine_cpu_s() -> float:
    """Every core's busy time so far (/proc/stat's first line, less idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


def set_accounting(path: str | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path.encode() if path else None) != 0:
        errno = ctypes.get_errno()
        sys.exit(f"acct({path!r}): {os.strerror(errno)} (run as root, on a kernel with process accounting)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the command to run after --")
    with tempfile.TemporaryDirectory(prefix="m2p-acct-") as folder:
        records = str(Path(folder) / "pacct")
        Path(records).touch(mode=0o600)
        before = machine_cpu_s()
        set_accounting(records)
        try:
            rc = subprocess.run(command, check=False).returncode
        finally:
            set_accounting(None)
        busy = machine_cpu_s() - before
        seconds, count = cpu_by_program(Path(records).read_bytes())
    total = sum(seconds.values())
    print(f"\n`{' '.join(command)}` exited {rc}: the machine {busy:.0f} CPU-s busy; ended processes "
          f"{total:.0f} CPU-s ({sum(count.values())} processes)")
    for name, used in seconds.most_common(args.top):
        print(f"{used:9.1f} CPU-s {100 * used / max(total, 1e-9):5.1f} % {count[name]:8d}  {name}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
