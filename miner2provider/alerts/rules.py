"""The alert rules, judged purely: ``evaluate(state, snapshot, rules, now) -> (state, messages)``.

Each alert has a stable key, ``rule/rig/part`` (the part: a card's UUID, a lease's name, "" for the rig).  An
alert fires once when its condition has held for its rule's hold (0 but for the miner's grace), repeats at most
every ``repeat_every_s`` while it holds, and says when it recovers; a recovery is only ever said of an alert that
fired.  A condition the sweep could not judge (a silent rig's cards, a provider not asked) is left as it was:
neither repeated nor recovered.  A lease's start and end are notices (said once, nothing to recover).
No I/O, no clock: the dashboard keeps the state between sweeps (service.py) and the property tests drive it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from miner2provider.core.textfiles import printable

from .facts import Rig, Snapshot

RULES = ("silent", "card", "temperature", "miner", "reclaim", "provider", "wallet", "lease")
KINDS = ("firing", "repeat", "resolved", "notice", "test")
SAID = 160  # characters of a rig's own words (a card's reason, a lease's name) a message quotes


@dataclass(frozen=True)
class Rules:
    """The owner's thresholds (config.py reads them from the alert file)."""

    silent_after_s: float = 600.0
    repeat_every_s: float | None = 3600.0  # None: never repeated
    temperature_limit_c: float | None = None  # None: only the agent's own "hot" verdict
    miner_grace_s: float = 600.0
    wallet_low: float | None = None  # None: no wallet rule
    off: frozenset[str] = frozenset()  # RULES turned off ("lease": no notice of leases starting and ending)


@dataclass(frozen=True)
class Held:
    """An alert whose condition holds (or held when last judged)."""

    rule: str
    rig: str
    since: float  # when the condition was first seen
    sent: float | None  # when its last message went; None: within its hold, not fired yet
    text: str
    recovered: str  # what its recovery will say


@dataclass(frozen=True)
class State:
    started: float | None = None  # the first sweep judged: a rig never seen is silent from then on
    held: Mapping[str, Held] = field(default_factory=dict)
    leases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # rig -> its leases when last read


@dataclass(frozen=True)
class Message:
    kind: str  # KINDS
    key: str
    rule: str
    rig: str
    text: str
    at: float

    @property
    def line(self) -> str:
        """The message as every receiver sends it."""
        head = {"firing": "ALERT", "repeat": "STILL", "resolved": "RESOLVED", "notice": "NOTE", "test": "TEST"}
        return f"m2p {head.get(self.kind, self.kind.upper())}: {self.text}"


@dataclass(frozen=True)
class Condition:
    key: str
    rule: str
    rig: str
    text: str
    recovered: str
    hold_s: float = 0.0


def state_json(state: State) -> dict[str, Any]:
    """The state as JSON, for a store that outlives the dashboard (the history database: not wired yet)."""
    return {"started": state.started, "held": {key: dataclasses.asdict(h) for key, h in state.held.items()},
            "leases": {rig: list(pods) for rig, pods in state.leases.items()}}


def state_from_json(raw: Any) -> State:
    """``state_json``'s output read back; anything unreadable is a fresh state (alerts that hold fire again once)."""
    try:
        return State(None if raw["started"] is None else float(raw["started"]),
                     {str(key): Held(**h) for key, h in raw["held"].items()},
                     {str(rig): tuple(str(p) for p in pods) for rig, pods in raw["leases"].items()})
    except (KeyError, TypeError, ValueError, AttributeError):
        return State()


def evaluate(state: State, snapshot: Snapshot, rules: Rules, now: float) -> tuple[State, list[Message]]:
    started = state.started if state.started is not None else now
    found = {c.key: c for c in conditions(snapshot, rules, now, started) if c.rule not in rules.off}
    judged = judged_scopes(snapshot, rules)
    rigs = {rig.name for rig in snapshot.rigs}
    held: dict[str, Held] = {}
    messages: list[Message] = []
    for key, c in found.items():
        was = state.held.get(key)
        h = Held(c.rule, c.rig, now, None, c.text, c.recovered) if was is None else \
            replace(was, text=c.text, recovered=c.recovered)
        if h.sent is None and now - h.since >= c.hold_s:
            h = replace(h, sent=now)
            messages.append(Message("firing", key, c.rule, c.rig, c.text, now))
        elif h.sent is not None and rules.repeat_every_s is not None and now - h.sent >= rules.repeat_every_s:
            h = replace(h, sent=now)
            messages.append(Message("repeat", key, c.rule, c.rig, c.text, now))
        held[key] = h
    for key, h in state.held.items():
        if key in found:
            continue
        gone = h.rig != "" and h.rig not in rigs  # left the inventory: nothing more will be said of it
        if (h.rule, h.rig) in judged or gone or h.rule in rules.off:
            if h.sent is not None:
                messages.append(Message("resolved", key, h.rule, h.rig, h.recovered, now))
        else:
            held[key] = h  # not judged this sweep: as it was
    leases, notices = lease_notices(state.leases, snapshot, rules, now)
    return State(started, held, leases), messages + notices


def judged_scopes(snapshot: Snapshot, rules: Rules) -> set[tuple[str, str]]:
    """(rule, rig) pairs this sweep knows the truth of: an alert of another is left as it was."""
    out: set[tuple[str, str]] = set()
    for rig in snapshot.rigs:
        out.add(("silent", rig.name))
        if rig.read:
            out.add(("reclaim", rig.name))
            if rig.cards is not None:
                out |= {("card", rig.name), ("temperature", rig.name)}
            if rig.should_mine is not None and rig.mining is not None:
                out.add(("miner", rig.name))
    if snapshot.provider != "unknown":
        out.add(("provider", ""))
    if snapshot.wallet_balance is not None and rules.wallet_low is not None:
        out.add(("wallet", ""))
    return out


def conditions(snapshot: Snapshot, rules: Rules, now: float, started: float) -> Iterator[Condition]:
    for rig in snapshot.rigs:
        yield from rig_conditions(rig, rules, now, started)
    if snapshot.provider == "no":
        yield Condition("provider//", "provider", "", f"the provider does not answer: {said(snapshot.provider_why)}",
                        "the provider answers again")
    balance, low = snapshot.wallet_balance, rules.wallet_low
    if balance is not None and low is not None and balance < low:
        currency = said(snapshot.wallet_currency)
        yield Condition("wallet//", "wallet", "", f"the provider's wallet holds {balance:g} {currency}, below "
                        f"{low:g}: top it up before its deposits fail", f"the provider's wallet holds {balance:g} "
                        f"{currency} again, at or above {low:g}")


def rig_conditions(rig: Rig, rules: Rules, now: float, started: float) -> Iterator[Condition]:
    name = said(rig.name)
    quiet = now - (rig.last_seen if rig.last_seen is not None else started)
    if quiet >= rules.silent_after_s:
        heard = "has never answered" if rig.last_seen is None else f"has not answered for {minutes(quiet)}"
        yield Condition(f"silent/{rig.name}/", "silent", rig.name, f"{name} {heard}", f"{name} answers again")
    if not rig.read:
        return
    for card in rig.cards or ():
        card_said = f"{name}: {said(card.said)}"
        if card.health in ("lost", "xid"):
            what = "is lost" if card.health == "lost" else "reported an Xid error"
            yield Condition(f"card/{rig.name}/{card.key}", "card", rig.name,
                            f"{card_said} {what}" + (f": {said(card.why)}" if card.why else ""),
                            f"{card_said} is healthy again")
        limit = rules.temperature_limit_c
        over = card.temperature_c is not None and limit is not None and card.temperature_c >= limit
        if over or card.health == "hot":
            heat = f"at {card.temperature_c:.0f} °C" if card.temperature_c is not None else "hot"
            yield Condition(f"temperature/{rig.name}/{card.key}", "temperature", rig.name,
                            f"{card_said} {heat}" + (f", the limit is {limit:.0f} °C" if over and limit is not None
                                                     else f": {said(card.why)}" if card.why else ""),
                            f"{card_said} is below its temperature limit again")
    if rig.should_mine and rig.mining is False:
        yield Condition(f"miner/{rig.name}/", "miner", rig.name,
                        f"{name}: no miner runs, but the rig should mine (mode {said(rig.mode)})",
                        f"{name}: the miner runs again", rules.miner_grace_s)
    for lease in rig.reclaiming:
        yield Condition(f"reclaim/{rig.name}/{lease}", "reclaim", rig.name,
                        f"{name}: lease {said(lease)} is being reclaimed", f"{name}: lease {said(lease)} is no "
                        "longer being reclaimed")


def lease_notices(before: Mapping[str, tuple[str, ...]], snapshot: Snapshot, rules: Rules,
                  now: float) -> tuple[dict[str, tuple[str, ...]], list[Message]]:
    """Each lease that started or ended since the rig was last read: a rig first read gives its leases as they are
    (the dashboard just started: they are not news)."""
    leases: dict[str, tuple[str, ...]] = {}
    out: list[Message] = []
    for rig in snapshot.rigs:
        if not rig.read or rig.leases is None:
            if rig.name in before:
                leases[rig.name] = before[rig.name]
            continue
        leases[rig.name] = rig.leases
        if rig.name not in before or "lease" in rules.off:
            continue
        for pod in sorted(set(rig.leases) - set(before[rig.name])):
            out.append(Message("notice", f"lease/{rig.name}/{pod}", "lease", rig.name,
                               f"{said(rig.name)}: lease {said(pod)} started", now))
        for pod in sorted(set(before[rig.name]) - set(rig.leases)):
            out.append(Message("notice", f"lease/{rig.name}/{pod}", "lease", rig.name,
                               f"{said(rig.name)}: lease {said(pod)} ended", now))
    return leases, out


def said(text: str) -> str:
    """A rig's own words in a message: one printable line, cut."""
    line = printable(" ".join(text.split()))
    return line if len(line) <= SAID else line[: SAID - 3] + "..."


def minutes(seconds: float) -> str:
    whole = int(seconds // 60)
    return f"{whole} min" if whole < 120 else f"{whole // 60} h {whole % 60} min"
