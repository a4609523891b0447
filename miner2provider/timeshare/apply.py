"""``m2p schedule apply``: which schedule (and economics file) each rig gets, checked before any rig is
touched.

A rig's ``m2p_schedule`` / ``m2p_economics`` (paths relative to the inventory file, as Ansible reads
key files) override the files given on the command line.  Every file is validated first: a mistake
is one ScheduleError or EconomicsError with file:line, and no rig changes.  A rig whose schedule's
policy is ``profit`` needs an economics file.  The playbook gets absolute paths.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from miner2provider.core.errors import EconomicsError, ScheduleError
from miner2provider.core.inventory import Host
from miner2provider.timeshare import economics, model


def schedule_files(hosts: list[Host], default_file: str | None, inventory_path: Path) -> dict[str, str]:
    """Each rig's schedule, absolute; raises ScheduleError for a rig without one or a bad file."""
    def missing(host: Host) -> None:
        raise ScheduleError(f"{host.name} has no schedule: give FILE or set m2p_schedule", where=host.where)
    return _per_rig(hosts, default_file, inventory_path, "m2p_schedule", model.load, ScheduleError, missing)


def economics_files(hosts: list[Host], default_file: str | None, inventory_path: Path,
                    schedules: dict[str, str]) -> dict[str, str]:
    """Each rig's economics file, absolute (rigs without one are left out); raises for a bad file, and
    for a rig on policy profit without one."""
    def missing(host: Host) -> None:
        if model.load(schedules[host.name]).policy == "profit":
            raise ScheduleError(f"{host.name}'s schedule has policy profit, which needs an economics file: "
                                "give --economics FILE or set m2p_economics", where=host.where)
    return _per_rig(hosts, default_file, inventory_path, "m2p_economics", economics.load, EconomicsError, missing)


def _per_rig(hosts: list[Host], default_file: str | None, inventory_path: Path, setting: str,
             load: Callable[[Path], object], error: type[ScheduleError] | type[EconomicsError],
             missing: Callable[[Host], None]) -> dict[str, str]:
    """Each rig's own ``setting`` (relative to the inventory) or else ``default_file``, resolved and loaded
    once per file; a rig with neither is ``missing``'s to refuse (or leave out)."""
    checked: set[Path] = set()
    chosen: dict[str, str] = {}
    for host in hosts:
        own = host.var(setting)
        if own is None and default_file is None:
            missing(host)
            continue
        path = (inventory_path.parent / Path(own).expanduser() if own is not None else Path(default_file or ""))
        path = path.resolve()
        if path not in checked:
            try:
                load(path)
            except error as exc:
                if own is None:
                    raise
                raise error(f"{exc.message} ({setting} of {host.name}, {host.where})", where=exc.where) from None
            checked.add(path)
        chosen[host.name] = str(path)
    return chosen
