"""Shared pytest setup."""

from __future__ import annotations

import os

from miner2provider.core.checks import STANDIN_PLAIN_HTTP

# The sandbox's STAND-IN Kubernetes API speaks plain HTTP; m2p refuses http:// API URLs unless this is
# set (tests/unit/test_secrets_in_messages.py checks the refusal with it unset).
os.environ[STANDIN_PLAIN_HTTP] = "1"
