"""The ``m2p`` command line: the only part of m2p that prints.

- ``app``: the root group, verbosity, and ``main``: expected errors (``M2PError``) become one
  red line and their exit code (``miner2provider.core.errors.exit_codes``), bugs go to a debug log;
- ``options``: options shared by several commands, folded into ``SshOptions``/``FleetSettings``;
- ``render``: how rigs, fleet runs and schedules look, as text and JSON;
- one module per group of commands: ``rigs`` (init, inventory check, attributes, status), ``detect``,
  ``fleet`` (plan, convert, revert), ``schedule``, ``bundle``, ``dashboard``, ``provider``; ``harness`` adds
  what other distributions provide (``m2p demo``, from the sandbox harness).
"""

from __future__ import annotations

from .app import cli, entry, main  # each command's module is imported when it is asked for (app.COMMAND_MODULES)

__all__ = ["cli", "entry", "main"]
