"""The harness's errors: one red line and exit 5 from the m2p command line (``m2p demo``) as from
``python -m m2p_sandbox``, like every M2PError."""

from __future__ import annotations

from miner2provider.core.errors import HARNESS_EXIT_CODE, M2PError


class SandboxError(M2PError):
    """The sandbox-rig harness (tests and `m2p demo`) could not do its job."""

    exit_code = HARNESS_EXIT_CODE
    meaning = "sandbox harness error (tests, `m2p demo`)"


class DemoFailed(SandboxError):
    """A step of `m2p demo` ended with another exit code than the one it shows (exit 5, as the harness)."""
