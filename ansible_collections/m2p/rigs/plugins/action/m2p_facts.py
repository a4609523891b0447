"""Action plugin ``m2p_facts``: m2p's detect probe, run over Ansible's own connection.

The probe script and its parsers are the ones ``m2p detect`` uses (miner2provider.detect.facts,
golden-tested), so roles never parse ``nvidia-smi`` in Jinja.  The script runs on the
rig in one round trip; parsing, the readiness verdict and the GPU labels happen here on
the controller.  Read-only, so it runs in check mode too.

Sets ``ansible_facts.m2p``: the rig's facts as plain data plus ``readiness``
(blockers and warnings as sentences, their stable codes in ``blocker_codes`` and
``warning_codes`` for playbooks to test, ``hardware_blockers``), ``cards`` (database entry
of each GPU), ``gpu_labels`` and ``gpu_signature`` (what the fingerprint records).

The marketplace is the rig's own (``m2p_marketplace``; unset: the setting's default): its labels and rules.  On
``m2p_marketplace: none`` the labels are m2p's own only and no marketplace rule applies (``market_warnings`` empty).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from miner2provider.core.inventory import python_of
from miner2provider.detect.facts import probe
from miner2provider.detect.facts.fingerprint import gpu_signature
from miner2provider.detect.readiness import HARDWARE_CODES, Thresholds, assess
from miner2provider.market import of_rig
from miner2provider.market.cards import cards_of
from miner2provider.market.labels import own_labels


def plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


class ActionModule(ActionBase):
    _supports_check_mode = True
    _VALID_ARGS = frozenset({"min_free_disk_gb", "min_ram_mb", "data_dir", "label_extra", "control_node"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        script = probe.script(python_of(task_vars or {}))  # the python3 Ansible's modules use (role_vars)
        res = self._low_level_execute_command(probe.inline_command(script), sudoable=True)
        try:
            facts = probe.gather(res.get("stdout", ""))
        except (probe.ProbeIncomplete, probe.ProbeUnreadable) as exc:
            raise AnsibleActionFail(f"m2p probe failed (exit {res.get('rc')}): {exc}; "
                                    f"stderr: {res.get('stderr', '')[-300:]}") from None
        market = of_rig(task_vars or {})  # the rig's m2p_marketplace; None: its owner's own workloads only
        settings = Thresholds(
            min_free_disk_gb=int(args.get("min_free_disk_gb", Thresholds.min_free_disk_gb)),
            min_ram_mb=int(args.get("min_ram_mb", Thresholds.min_ram_mb)),
            data_dir=args.get("data_dir") or None,
            become_password_given=True,  # Ansible got this far with become
            control_node=str(args.get("control_node", False)).lower() in {"true", "1", "yes"},
            one_model_per_node=market.one_model_per_node if market else "",
        )
        verdict = assess(facts, settings)
        data = plain(facts)
        # Roles test codes (``blocker_codes``), people read sentences (``blockers``).
        data["readiness"] = {"status": verdict.status,
                             "blockers": [f.sentence for f in verdict.blockers],
                             "blocker_codes": [f.code for f in verdict.blockers],
                             "warnings": [f.sentence for f in verdict.warnings],
                             "warning_codes": [f.code for f in verdict.warnings],
                             # what no setting fixes (wrong CPU, no GPU or driver): refused even when warn-only
                             "hardware_blockers": [f.sentence for f in verdict.blockers if f.code in HARDWARE_CODES]}
        # From the OS's record (detect/os_records.py): roles name the OS in their sentences, preflight
        # refuses what m2p does not convert, nvidia_driver upgrades the OS's way.
        mos = facts.mining_os
        refusal = mos.refusal
        data["mining_os"].update(label=mos.label, miner_control=mos.miner_control, driver_upgrade=mos.driver_upgrade,
                                 refusal=refusal[1] if refusal else "",
                                 supported=refusal is None and mos.kind != "unknown")
        cards = cards_of(facts.gpus)
        data["cards"] = [plain(c) for c in cards]
        data["gpu_signature"] = gpu_signature(facts.gpus)
        extra = args.get("label_extra") or None
        data["gpu_labels"] = (market.node_labels(facts.gpus, facts.cuda, extra) if market
                              else own_labels(facts.gpus, facts.cuda, extra))
        # What the marketplace will not sell as it is, for the owner to read (cards its own list lacks).
        data["market_warnings"] = ([market.unlisted_card(pci_id) for pci_id in dict.fromkeys(
            c.pci_id for c in cards if not c.listed)] if market else [])
        result.update(changed=False, ansible_facts={"m2p": data})
        return result
