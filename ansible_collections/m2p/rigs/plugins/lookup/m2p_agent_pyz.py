"""Lookup ``m2p_agent_pyz``: the path of the time-share agent zipapp, built on the controller
(miner2provider.fleet.agent_zipapp; same code, same bytes, so a re-run copies nothing)."""

from __future__ import annotations

from typing import Any

from ansible.plugins.lookup import LookupBase

from miner2provider.fleet.agent_zipapp import write


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[str]:
        return [str(write())]
