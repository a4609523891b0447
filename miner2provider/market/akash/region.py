"""Akash's region names: a provider's ``location-region`` attribute is a short name such as us-west or
eu-central, in a label value's characters (core/checks.py's ``is_region``).  Pure."""

from __future__ import annotations

from miner2provider.core import checks

WHAT = "letters, digits, '.', '_' and '-' only (such as eu-central)"


def problem(region: str) -> str:
    """Why ``region`` is no location-region Akash takes ("" : it is one)."""
    return "" if checks.is_region(region) else WHAT
