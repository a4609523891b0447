"""The one exception hierarchy of m2p.

Every error a user can cause or meet (bad inventory, unreachable rig, ...) is an
``M2PError`` subclass with a stable ``exit_code``; the CLI turns it into one red
line.  Anything else is a bug: the CLI writes its traceback to a debug log.
"""

from __future__ import annotations


class M2PError(Exception):
    """An expected failure, explained in one line."""

    exit_code = 1

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        # ``where`` is "file:line" (or a rig name) so the user can find the cause.
        self.where = where

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class ChangesPending(M2PError):
    """`m2p plan`: some rigs are not converged (exit 1, like `diff`)."""

    exit_code = 1


class UsageError(M2PError):
    """Bad command-line arguments or settings."""

    exit_code = 2


class InventoryError(M2PError):
    """The rig inventory file is unreadable or invalid."""

    exit_code = 3


class VaultError(InventoryError):
    """An Ansible Vault file could not be opened."""


class ConnectError(M2PError):
    """A rig could not be reached or logged into."""

    exit_code = 4


class RigFailures(M2PError):
    """Some rigs failed; the others were handled.  Exit code: 10 + failed count (capped)."""

    def __init__(self, failed: int, total: int) -> None:
        super().__init__(f"{failed} of {total} rigs failed")
        self.failed = failed
        self.total = total

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        # Stable and still readable by shells: 11 = one rig failed ... 99 = 89 or more.
        return 10 + min(self.failed, 89)


class BundleError(M2PError):
    """An offline bundle is missing, malformed, or a file's checksum does not match."""

    exit_code = 6


class SandboxError(M2PError):
    """The sandbox-rig harness (tests and `m2p demo`) could not do its job."""

    exit_code = 5


class ScheduleError(M2PError):
    """A time-share schedule file is invalid (file:line says where)."""

    exit_code = 7
