"""What convert left on the rig, and whether it is still there: the rig's fingerprint.

At the end of a convert the ``fingerprint`` role writes two files under /var/lib/m2p:

- ``fingerprint.watch``: what to watch, one ``<kind> <argument>`` per line
  (``file /etc/rancher/k3s/config.yaml``, ``stat /usr/local/bin/k3s``,
  ``unit k3s.service``, ``package nvidia-container-toolkit``);
- ``fingerprint.json``: ``inputs`` (the controller's digest of what was applied: roles,
  settings, bundle), ``gpus`` (the GPU signature the labels were made from) and
  ``state``: the output of ``STATE_LOOP`` over the watch list right after convert.

The detect probe runs the same loop and prints the record and today's state side by side,
so drift is a plain comparison of lines on the controller: a changed config file, a
stopped unit, a removed package, a swapped card.  The role records as root; the probe
reads as root too when the login user is root or has password-less sudo.  Otherwise root's
files read ``unreadable``, which differs from the record, so such rigs always get the full
playbook: a rig m2p cannot check is never skipped.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from miner2provider.detect.facts.base import Fact, Output
from miner2provider.detect.facts.gpu import Gpus

STATE_DIR = "/var/lib/m2p"
RECORD = f"{STATE_DIR}/fingerprint.json"
WATCH = f"{STATE_DIR}/fingerprint.watch"
STATE_MARK = "@@m2p-state"
NONE_MARK = "@@m2p-no-fingerprint"

# Reads watch lines on stdin; one state line per watch line.  A 70 MB binary is checked by
# size and mtime (``stat``), not hashed: weak rig CPUs and USB sticks pay for every read.
STATE_LOOP = r"""while read -r kind arg; do
  case "$kind" in
    file) if [ -r "$arg" ]; then s=$(sha256sum < "$arg" | cut -c1-64)
          elif [ -e "$arg" ]; then s=unreadable; else s=missing; fi ;;
    stat) s=$(stat -c '%s %Y' "$arg" 2>/dev/null || echo missing) ;;
    unit) s="$(systemctl is-active "$arg" 2>/dev/null) $(systemctl is-enabled "$arg" 2>/dev/null)" ;;
    package) s=$(dpkg-query -W -f '${Version} ${db:Status-Abbrev}' "$arg" 2>/dev/null || echo missing) ;;
    *) continue ;;
  esac
  echo "$kind $arg $s"
done"""


def state_script(watch: list[str]) -> str:
    """The loop over a given watch list (for the role, which records before the file is read back)."""
    body = "\n".join(line for line in watch if line.strip())
    return f"LC_ALL=C; export LC_ALL\n{STATE_LOOP} <<'M2P_WATCH'\n{body}\nM2P_WATCH\n"


def gpu_signature(gpus: Gpus) -> str:
    """The cards and driver the labels were made from: a swapped card or a new driver changes it."""
    if gpus.state != "ok":
        return gpus.state
    cards = sorted(f"{g.pci_bus_id} {g.pci_id} {g.memory_mib}MiB {g.name}" for g in gpus.gpus)
    return f"driver {gpus.driver_version}; " + "; ".join(cards)


@dataclass(frozen=True)
class Fingerprint:
    present: bool  # False: never converted by m2p, or reverted
    inputs: str = ""
    gpus: str = ""
    recorded: tuple[str, ...] = ()  # state lines right after convert
    current: tuple[str, ...] = ()  # state lines now
    error: str = ""  # the record could not be read


class FingerprintFact(Fact[Fingerprint]):
    """``@@m2p-no-fingerprint``, or fingerprint.json, ``@@m2p-state`` and today's state lines
    (``file /etc/rancher/k3s/config.yaml 3f2a...``, ``unit k3s.service active enabled``)."""

    name = "fingerprint"
    command = (f"if [ -r {WATCH} ] && [ -r {RECORD} ]; then cat {RECORD}; echo; echo '{STATE_MARK}'; "
               "S=; [ \"$(id -u)\" = 0 ] || ! sudo -n true 2>/dev/null || S='sudo -n'; "
               f"$S sh -c {shlex.quote(STATE_LOOP)} < {WATCH}; else echo '{NONE_MARK}'; fi")

    @staticmethod
    def parse(out: Output) -> Fingerprint:
        record, mark, state = out.text.partition(STATE_MARK)
        if not mark:
            if NONE_MARK in out.text:
                return Fingerprint(False)
            return Fingerprint(False, error=out.text.strip()[:200] or f"exit {out.rc}")
        try:
            data = json.loads(record)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            recorded = data.get("state", [])
            if not isinstance(recorded, list):
                raise ValueError("its state is not a list")
            # A file on the rig, writable by whoever owns the rig: any shape must read as "not valid".
            return Fingerprint(True, str(data.get("inputs", ""))[:200], str(data.get("gpus", ""))[:200],
                               state_lines(str(s)[:500] for s in recorded), state_lines(state.splitlines()))
        except (ValueError, RecursionError) as exc:
            reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)[:120]
            return Fingerprint(False, error=f"{RECORD} is not valid: {reason}")


def state_lines(lines: Iterable[str]) -> tuple[str, ...]:
    """Trailing blanks dropped (``unit x inactive `` when is-enabled prints nothing)."""
    return tuple(line.rstrip() for line in lines if line.strip())
