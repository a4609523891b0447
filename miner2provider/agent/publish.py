"""Where the agent says what it does: ``status.json`` on the rig, and on its node the ``m2p.io/status``
annotation (the same text), the mode label and the GPU labels.  Each is written only when it changes
(many rigs run from USB sticks; the API is the farm's), and the labels the agent put on the node are
remembered (saved with its state) so that a label it no longer wants is removed, never someone else's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miner2provider.rigside import disk, kube
from miner2provider.rigside.status import STATUS_ANNOTATION


@dataclass
class Publisher:
    status_file: Path
    applied_labels: dict[str, str] = field(default_factory=dict)  # the labels last patched onto the node
    _written: str = ""  # status.json as last written
    _pushed: str = ""  # the status annotation as last patched onto the node

    def write(self, status: dict[str, Any]) -> str:
        """status.json, when it changed; returns its text (the annotation's too)."""
        text = json.dumps(status, sort_keys=True)
        if text != self._written:
            disk.write_json(self.status_file, status)
            self._written = text
        return text

    def push(self, client: kube.KubeClient, node: str, text: str, labels: dict[str, str],
             stale_extra: tuple[str, ...] = ()) -> bool:
        """The annotation and the labels onto the node when they changed; labels the agent applied before
        and wants no more (and ``stale_extra``, labels of an earlier design) are removed.  True when the
        labels were patched (the caller saves them).  Two patches, the status first: a label the API
        refuses (a 422 for a key it finds illegal) then fails alone and the status still says why."""
        if text != self._pushed:
            client.patch_node(node, {"metadata": {"annotations": {STATUS_ANNOTATION: text}}})
            self._pushed = text
        stale = {k: None for k in self.applied_labels if k not in labels}
        stale.update({k: None for k in stale_extra})
        if labels == self.applied_labels and not stale:
            return False
        client.patch_node(node, {"metadata": {"labels": {**labels, **stale}}})
        self.applied_labels = labels
        return True
