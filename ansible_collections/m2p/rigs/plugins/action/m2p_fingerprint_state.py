"""Action plugin ``m2p_fingerprint_state``: the watched state of a rig, read the way detect reads it.

Runs ``miner2provider.detect.facts.fingerprint.state_script`` over the watch list given as
``watch`` and returns ``state`` (one line per watched item).  The fingerprint role records
it; the detect probe runs the same loop later, so drift is a comparison of lines.  Given
``recorded`` (the state lines of fingerprint.json) it also returns ``drift``: the sentences
``m2p status`` shows (plan.drift).  Read-only, so it runs in check mode too.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from miner2provider.detect.drift import drift
from miner2provider.detect.facts.fingerprint import state_lines, state_script
from miner2provider.detect.facts.probe import inline_command


class ActionModule(ActionBase):
    _supports_check_mode = True
    _VALID_ARGS = frozenset({"watch", "recorded"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        watch = self._task.args.get("watch")
        if not isinstance(watch, list) or not all(isinstance(w, str) for w in watch):
            raise AnsibleActionFail("m2p_fingerprint_state: watch must be a list of '<kind> <argument>' strings")
        res = self._low_level_execute_command(inline_command(state_script(watch)), sudoable=True)
        if res.get("rc") != 0:
            raise AnsibleActionFail(f"reading the watched state failed (exit {res.get('rc')}): "
                                    f"{res.get('stderr', '')[-300:]}")
        state = list(state_lines(res.get("stdout", "").splitlines()))
        result.update(changed=False, state=state)
        recorded = self._task.args.get("recorded")
        if recorded is not None:
            result["drift"] = drift(state_lines(str(line) for line in recorded), state)
        return result
