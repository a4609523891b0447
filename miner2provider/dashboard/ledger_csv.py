"""The owner's books as CSV (issue 57): one row per ledger span of every rig and one per lease payment, with
the hours, the GPU-hours, the rate each was valued at and where that rate came from.

Pure: rigs come in as views.RigInput (the history's ledger, read by the caller), payments as PaymentRow (the
chain reader's), text goes out.  Spans are rig_spans' (the line in force counts up to the rig's last read) and
are valued by views.earnings, the dashboard's own valuation, so the file and the page never disagree: a lease
at the economics file's price per GPU-hour, mining at its revenue per GPU-day (or the agent's measured
hashrate) / 24.  Amounts are rounded to cents as the page shows them; hours keep six decimals, so a
spreadsheet's sum of the hours column is the ledger's seconds.

The file is RFC 4180 (Python's csv: a header row, CRLF line ends, fields quoted where they must be).  Text
that came from a rig or the chain (a rig's lease names, its mode, a payment's basis) could start a formula
in the spreadsheet that opens the file (CSV injection: ``=HYPERLINK(...)``); every text cell that starts with
one of = + - @ tab CR LF NUL is prefixed with a single quote, as OWASP's CSV Injection page and ASVS 5.0
requirement 1.2.10 advise, so it reads as text.  Control and bidi characters in such text are replaced
(U+FFFD): ``m2p history --csv -`` prints the file, and what a rig wrote must not drive the terminal.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from miner2provider.core import textfiles
from miner2provider.core.errors import ProviderError
from miner2provider.timeshare.economics import Economics

from . import views

COLUMNS = ("record", "start", "end", "rig", "mode", "leases", "cards_leased", "cards_mined", "hours",
           "gpu_hours_leased", "gpu_hours_mined", "lease_rate", "mining_rate", "rate_unit", "amount", "currency",
           "basis")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\0")  # OWASP's list, with ASVS's NUL and LF
# C0 and C1 controls, DEL, and the bidi marks and overrides (Unicode TR9) that reverse what a terminal shows
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
ESTIMATED = "estimated: economics file"
MEASURED = "measured hashrate"
PER_GPU_HOUR = "per GPU-hour"
PER_HOUR = "per lease-hour"
UNKNOWN = "unknown: the economics file has no figure for these cards"
NO_FILE = "unknown: no economics file"
CHUNK_ROWS = 256  # rows of the file in one chunk of the download (~45 KB)


@dataclass(frozen=True)
class PaymentRow:
    """One payment a lease made to the provider (the chain reader's): when, on which rig, for how many hours, how
    much, and the lease's rate per hour with where that rate came from (such as the chain's escrow)."""

    paid_at: float  # epoch seconds
    rig: str
    lease: str
    hours: float
    amount: float
    currency: str
    rate: float  # per hour of the lease, in ``currency``
    basis: str

    def __post_init__(self) -> None:
        for name in ("paid_at", "hours", "amount", "rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ProviderError(f"lease payment {textfiles.shown(self.lease)}: {name} is "
                                    f"{textfiles.shown(value)}, not a number")
        try:
            _iso(self.paid_at)
        except (OverflowError, OSError, ValueError):
            raise ProviderError(f"lease payment {textfiles.shown(self.lease)}: paid_at {self.paid_at:g} is no "
                                "date") from None


def window(days: int, now: float) -> tuple[float, float]:
    """The last ``days`` UTC calendar days, today included (``m2p history``'s table's days), up to ``now``."""
    first = datetime.fromtimestamp(now, UTC).date() - timedelta(days=days - 1)
    return datetime(first.year, first.month, first.day, tzinfo=UTC).timestamp(), now


def chunks(rows: Iterable[list[str]], rows_per_chunk: int = CHUNK_ROWS) -> Iterator[str]:
    """``rows`` as the file's text, ``rows_per_chunk`` rows at a time (the last chunk may hold fewer): the page's
    download sends each as it comes and ``m2p history --csv`` writes each, so neither holds 1,000 rigs' year."""
    left = iter(rows)
    while True:
        out = io.StringIO(newline="")
        # a row at a time into the text (a chunk's rows as lists of cells take several times its text's memory)
        csv.writer(out).writerows(itertools.islice(left, rows_per_chunk))  # the excel dialect: RFC 4180, CRLF
        if not out.tell():  # no row left (a row, even an empty one, writes its line end)
            return
        yield out.getvalue()


def rows(rigs: Iterable[views.RigInput], economics: Economics, since: float, until: float,
         payments: Iterable[PaymentRow] = ()) -> Iterator[list[str]]:
    """The header, every rig's spans in [since, until) oldest first, then the payments read in it, in the order they
    come (History.lease_payments': by time, then lease).  ``payments`` is read only once the last rig's rows are
    out, so it may be a generator of what reading the rigs found (the download names each payment's rig from the
    leases of the rigs' ledgers)."""
    yield list(COLUMNS)
    for rig in rigs:
        yield from ledger_rows(rig, economics, since, until)
    yield from (payment_row(p) for p in payments if since <= p.paid_at < until)


def ledger_rows(rig: views.RigInput, economics: Economics, since: float, until: float) -> Iterator[list[str]]:
    models = [model for model, _ in views.gpu_models(rig.report)]
    measured = views.economy(views.agent_of(rig)[0], economics)["measured_per_gpu_day"]
    rate = views.rates(models, economics, measured)  # the page's own: the mean of the cards' figures, or measured
    lease_rate = rate.lease_per_gpu_hour
    mining_rate = None if rate.mining_per_gpu_day is None else rate.mining_per_gpu_day / 24
    for span in views.rig_spans(rig, since, until):
        totals = views.span_totals([span], len(models))
        valued = views.earnings(totals, models, economics, measured)
        leased_h, mined_h = totals.gpu_seconds_leased / 3600, totals.gpu_seconds_mined / 3600
        parts = [valued[part] for part, hours in (("lease", leased_h), ("mining", mined_h)) if hours > 0]
        amount = None if any(p is None for p in parts) else sum(parts)
        yield ["ledger", _iso(span.start), _iso(span.end), safe(rig.name), safe(span.mode), safe(" ".join(span.leases)),
               str(span.leased), str(round(totals.gpu_seconds_mined / span.seconds)), _hours(span.seconds / 3600),
               _hours(leased_h), _hours(mined_h), _number(lease_rate if leased_h > 0 else None),
               _number(mining_rate if mined_h > 0 else None), PER_GPU_HOUR if leased_h > 0 or mined_h > 0 else "",
               "" if amount is None else f"{amount:.2f}", safe(economics.currency),
               basis(leased_h, mined_h, measured is not None, amount is None, bool(economics.source))]


def basis(leased_h: float, mined_h: float, measured: bool, unknown: bool, with_file: bool = True) -> str:
    if unknown:
        return UNKNOWN if with_file else NO_FILE
    if not measured or mined_h <= 0:
        return ESTIMATED if leased_h > 0 or mined_h > 0 else ""
    return f"lease {ESTIMATED}; mining {MEASURED}" if leased_h > 0 else MEASURED


def payment_row(p: PaymentRow) -> list[str]:
    return ["payment", _iso(p.paid_at), "", safe(p.rig), "payment", safe(p.lease), "", "", _hours(p.hours), "", "",
            _number(p.rate), "", PER_HOUR, _number(p.amount), safe(p.currency), safe(p.basis)]


def safe(cell: str) -> str:
    """A text cell a spreadsheet shows as text (one that would start a formula gets a leading single quote) and a
    terminal shows as written."""
    return CONTROLS.sub("\ufffd", "'" + cell if cell.startswith(FORMULA_STARTS) else cell)


def _iso(at: float) -> str:
    """ISO 8601 in UTC to the millisecond (the ledger's own precision)."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")


def _hours(value: float) -> str:
    return f"{value:.6f}"


def _number(value: float | None) -> str:
    return "" if value is None else format(value, ".10g")
