"""The one exception hierarchy of m2p.

Every error a user can cause or meet (bad inventory, unreachable rig, ...) is an
``M2PError`` subclass with a stable ``exit_code``; the CLI turns it into one red
line.  Anything else is a bug: the CLI writes its traceback to a debug log.
"""

from __future__ import annotations

# Exit codes that are not an M2PError's: a bug (the traceback goes to the debug log) and Ctrl-C/"no".
INTERNAL_ERROR = 70
ABORTED = 130
RIG_FAILURES_LAST = 99  # 10 + N failed rigs, capped here
# The sandbox harness's errors (m2p_sandbox/errors.py: its own distribution, `m2p demo` among it) exit so.
HARNESS_EXIT_CODE = 5


class M2PError(Exception):
    """An expected failure, explained in one line."""

    exit_code = 1
    meaning: str = "failure; `plan` and `schedule apply --check`: changes pending"
    # With --json: False = the CLI prints {"error", "file", "line"} on stdout; True = the command's own
    # JSON already said it (failed rigs, pending changes), and stdout stays one JSON document.
    told_in_json = False

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
    told_in_json = True


class UsageError(M2PError):
    """Bad command-line arguments or settings."""

    exit_code = 2
    meaning = "bad usage"


class InventoryError(M2PError):
    """The rig inventory file is unreadable or invalid."""

    exit_code = 3
    meaning = "bad inventory (file:line)"


class InventoryProblems(InventoryError):
    """Several mistakes in one inventory: each said once with its file:line (``m2p inventory check`` lists them
    all; another command says the first and how many more)."""

    def __init__(self, problems: list[InventoryError]) -> None:
        first = problems[0]
        super().__init__(f"{first.message} (and {len(problems) - 1} more: `m2p inventory check` lists them all)",
                         where=first.where)
        self.problems = problems


class InventoryProblemsListed(InventoryError):
    """``m2p inventory check`` has shown each mistake on its own line (and in its --json): this is the count."""

    told_in_json = True


class VaultError(InventoryError):
    """An Ansible Vault file could not be opened."""


class RigFailures(M2PError):
    """Some rigs failed; the others were handled.  Exit code: 10 + failed count (capped)."""

    told_in_json = True

    def __init__(self, failed: int, total: int) -> None:
        super().__init__(f"{failed} of {total} rigs failed")
        self.failed = failed
        self.total = total

    @property
    def exit_code(self) -> int:  # type: ignore[override]
        # Stable and still readable by shells: 11 = one rig failed ... 99 = 89 or more.
        return min(10 + self.failed, RIG_FAILURES_LAST)


class BundleError(M2PError):
    """An offline bundle is missing, malformed, or a file's checksum does not match."""

    exit_code = 6
    meaning = "bad offline bundle or failed download"


class ScheduleError(M2PError):
    """A time-share schedule file is invalid (file:line says where)."""

    exit_code = 7
    meaning = "bad schedule or economics file (file:line)"


class ProviderError(M2PError):
    """The farm cannot become (or stop being) a marketplace provider as asked: a missing chart archive,
    an unreadable key file, an unset passphrase variable, a model without a price floor."""

    exit_code = 8
    meaning = "the provider cannot be installed, checked or removed as asked"


class ProviderNotReady(ProviderError):
    """`m2p provider check` (some verdicts failed) or `status` (the provider does not answer): the command's
    own output, --json included, already said what and why."""

    told_in_json = True


def exit_codes() -> list[tuple[str, str]]:
    """(code, meaning) for docs/errors.md's exit-code table, from the classes above (a test keeps them equal).
    A rig that could not be reached or logged into counts among the failed rigs (10 + N)."""
    rows = [("0", "success")]
    codes: dict[int, str] = {M2PError.exit_code: M2PError.meaning}
    for cls in _subclasses():
        code = vars(cls).get("exit_code")
        if isinstance(code, int):  # RigFailures' code is a property: its row comes below
            codes.setdefault(code, cls.meaning)
    codes.setdefault(HARNESS_EXIT_CODE, "sandbox harness error (tests, `m2p demo`)")
    rows += [(str(code), meaning) for code, meaning in sorted(codes.items())]
    rows.append(("10 + N", f"N rigs failed: unreachable, refused or a task failed; the others were handled "
                           f"(capped at {RIG_FAILURES_LAST}; e.g. 13: three rigs)"))
    rows.append((str(INTERNAL_ERROR), "a bug: the traceback is saved to the debug log "
                                      "(~/.cache/m2p/debug.log or $M2P_DEBUG_LOG) and the error line says where"))
    rows.append((str(ABORTED), "aborted (Ctrl-C, or no at a confirmation)"))
    return rows


def _subclasses(cls: type[M2PError] = M2PError) -> list[type[M2PError]]:
    found: list[type[M2PError]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


class EconomicsError(ScheduleError):
    """An economics file (prices, power and mining revenue) is invalid, or does not price the farm's cards
    (file:line says where; exit 7, as a schedule: the two files the time-share reads)."""


class ProviderFileError(UsageError):
    """A provider file (provider.yml: the farm as a marketplace provider) is invalid (file:line; exit 2)."""


class AlertsFileError(UsageError):
    """An alert file (``m2p dashboard --alerts``, ``m2p alerts test``) is invalid, or names an environment variable
    that is not set (file:line; exit 2)."""
