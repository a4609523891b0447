"""Lookup ``m2p_bundle``: role variables that make convert install from an offline bundle.

``lookup('m2p_bundle', DIR)`` validates DIR's manifest and re-hashes every file
(miner2provider.fleet.bundle.manifest, the code behind ``m2p bundle``); a damaged bundle stops
the run on the controller before any rig is touched.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from miner2provider.core.errors import BundleError
from miner2provider.fleet.bundle.manifest import load_bundle


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
        if len(terms) != 1:
            raise AnsibleLookupError("m2p_bundle takes one bundle directory")
        try:
            return [load_bundle(str(terms[0])).role_vars()]
        except BundleError as exc:
            raise AnsibleLookupError(f"offline bundle: {exc}") from None
