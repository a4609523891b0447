"""``m2p schedule apply``: which schedule each rig gets, checked before any rig is touched.

A rig's ``m2p_schedule`` (a path relative to the inventory file, as Ansible reads key files)
overrides the file given on the command line.  Every schedule is validated first: a mistake
is one ScheduleError with file:line, and no rig changes.  The playbook gets absolute paths.
"""

from __future__ import annotations

from pathlib import Path

from miner2provider.errors import ScheduleError
from miner2provider.inventory import Host
from miner2provider.schedule import model


def schedule_files(hosts: list[Host], default_file: str | None, inventory_path: Path) -> dict[str, str]:
    """Each rig's schedule, absolute; raises ScheduleError for a rig without one or a bad file."""
    checked: set[Path] = set()
    chosen: dict[str, str] = {}
    for host in hosts:
        own = host.var("m2p_schedule")
        if own is None and default_file is None:
            raise ScheduleError(f"{host.name} has no schedule: give FILE or set m2p_schedule", where=host.where)
        path = (inventory_path.parent / Path(own).expanduser() if own is not None else Path(default_file or ""))
        path = path.resolve()
        if path not in checked:
            try:
                model.load(path)
            except ScheduleError as exc:
                if own is None:
                    raise
                raise ScheduleError(f"{exc.message} (m2p_schedule of {host.name}, {host.where})",
                                    where=exc.where) from None
            checked.add(path)
        chosen[host.name] = str(path)
    return chosen
