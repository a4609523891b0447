"""Each card of a rig as the dashboard shows it (issue 56): the agent's telemetry (rigside/status.py Telemetry) as
the rig page's table, the fleet page's worst temperature and unhealthy cards, and the day charts of temperature
and power drawn as SVG geometry from the history's card samples (no I/O, no script: the page's CSP allows none).

Throttle reasons are NVML's ``nvmlClocksThrottleReasons`` bits, which nvidia-smi's
``clocks_throttle_reasons.active`` prints as the same mask [docs: docs.nvidia.com/deploy/nvml-api/
group__nvmlClocksThrottleReasons.html].  The miner's hashrate per card comes from AgentStatus.measured, whose
``mhs`` lists one figure per GPU in the miner's order and names no card: it is shown beside the card of the
same position only when the counts agree ("not reported" otherwise).
"""

from __future__ import annotations

from typing import Any

from miner2provider.rigside.status import AgentStatus, Card, Telemetry

# NVML's nvmlClocksThrottleReason* constants (nvml.h; DCGM's DCGM_CLOCKS_THROTTLE_REASON_* are the same bits).
THROTTLE_REASONS = (
    (0x1, "GPU idle"),
    (0x2, "application clocks setting"),
    (0x4, "software power cap"),
    (0x8, "hardware slowdown"),
    (0x10, "sync boost"),
    (0x20, "software thermal slowdown"),
    (0x40, "hardware thermal slowdown"),
    (0x80, "hardware power brake"),
    (0x100, "display clock setting"),
)
CHART_W, CHART_H = 720, 160  # the plot area of one day chart, in SVG units
DAY_S = 86_400.0
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def throttle_said(mask: int | None) -> list[str]:
    """The reasons a throttle mask holds, said; a bit NVML has not defined is said as its hex value."""
    if mask is None:
        return []
    said = [name for bit, name in THROTTLE_REASONS if mask & bit]
    known = sum(bit for bit, _ in THROTTLE_REASONS)
    return said + ([f"other (0x{mask & ~known:x})"] if mask & ~known else [])


def age_s(telemetry: Telemetry, now: float) -> int | None:
    """Seconds from the agent's reading to ``now`` (None: unreadable; negative: the rig's clock is ahead)."""
    at = telemetry.read_at_s()
    return None if at is None else round(now - at)


def card_table(agent: AgentStatus, now: float) -> dict[str, Any] | None:
    """The rig page's per-card table (None: the agent published no telemetry)."""
    telemetry = agent.telemetry
    if telemetry is None:
        return None
    measured = agent.measured
    rates = measured.mhs if measured is not None and len(measured.mhs) == len(telemetry.cards) else None
    return {"read_at": telemetry.read_at, "age_s": age_s(telemetry, now), "error": telemetry.error,
            "algo": measured.algo if rates is not None and measured is not None else "",
            "cards": [_row(card, None if rates is None else rates[n]) for n, card in enumerate(telemetry.cards)]}


def _row(card: Card, mhs: float | None) -> dict[str, Any]:
    return {"index": card.index, "uuid": card.uuid, "name": card.name, "health": card.health, "why": card.why,
            "temperature_c": card.temperature_c, "fan_percent": card.fan_percent, "power_w": card.power_w,
            "power_limit_w": card.power_limit_w, "sm_mhz": card.sm_mhz, "memory_mhz": card.memory_mhz,
            "utilization_percent": card.utilization_percent, "memory_used_mib": card.memory_used_mib,
            "memory_total_mib": card.memory_total_mib, "pcie_gen": card.pcie_gen, "pcie_width": card.pcie_width,
            "throttle": throttle_said(card.throttle), "ecc_uncorrected": card.ecc_uncorrected, "mhs": mhs}


def health(telemetry: Telemetry | None) -> dict[str, Any] | None:
    """The fleet page's glance at a rig's cards: the hottest (°C and which card) and every card not ok."""
    if telemetry is None:
        return None
    read = [c for c in telemetry.cards if c.temperature_c is not None]
    hottest = max(read, key=lambda c: c.temperature_c or 0.0) if read else None
    return {"worst_c": hottest.temperature_c if hottest else None, "worst_card": hottest.index if hottest else None,
            "unhealthy": [{"index": c.index, "health": c.health, "why": c.why}
                          for c in telemetry.cards if c.health != "ok"],
            "error": telemetry.error}


def day_charts(samples: dict[int, list[tuple[float, float | None, float | None]]], now: float) -> dict[str, Any]:
    """Two charts over the day up to ``now``, temperature and power: a polyline per card (a gap where a reading
    lacks the figure splits it), on a scale from 0 to the day's highest figure."""
    since = now - DAY_S
    return {"width": CHART_W, "height": CHART_H, "from": since, "to": now,
            "temperature": _chart(samples, 1, since, "°C"), "power": _chart(samples, 2, since, "W"),
            "colours": {card: PALETTE[n % len(PALETTE)] for n, card in enumerate(sorted(samples))}}


def _chart(samples: dict[int, list[tuple[float, float | None, float | None]]], field: int, since: float,
           unit: str) -> dict[str, Any]:
    values = [v for rows in samples.values() for s in rows if s[0] >= since and (v := s[field]) is not None]
    top = _nice(max(values)) if values else 1.0
    lines = []
    for n, card in enumerate(sorted(samples)):
        pieces: list[list[str]] = [[]]
        for at, *figures in samples[card]:
            value = figures[field - 1]
            if at < since:
                continue
            if value is None:
                pieces.append([])
                continue
            x, y = (at - since) / DAY_S * CHART_W, CHART_H - value / top * CHART_H
            pieces[-1].append(f"{x:.1f},{y:.1f}")
        last = next((s[field] for s in reversed(samples[card]) if s[field] is not None), None)
        lines.append({"card": card, "colour": PALETTE[n % len(PALETTE)], "last": last,
                      "points": [" ".join(p) for p in pieces if p]})
    return {"unit": unit, "top": top, "lines": lines, "empty": not values}


def _nice(value: float) -> float:
    """The chart's top: the highest figure rounded up to a multiple of 10 (°C) or 50 (W), at least 10."""
    step = 10.0 if value <= 150 else 50.0
    return max(step, -(-value // step) * step)
