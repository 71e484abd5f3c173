"""Geometry for the job page's server-rendered charts (inline SVG, so they work without JavaScript).

Positions are percentages of the chart width: the SVG has no viewBox and a fixed pixel height, so
text keeps its size at phone width while the bars stretch. Nothing here touches HTML; the
templates draw what these functions compute.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from jobservice.reports.run_report import Check, Segment

STAGES = ("fetch", "load", "generate", "encode", "validate", "upload")
STAGE_LABELS = {
    "fetch": "fetch inputs",
    "load": "load model",
    "generate": "generate",
    "encode": "encode",
    "validate": "validate",
    "upload": "upload",
    "other": "outside the named stages",
}


@dataclass(frozen=True)
class Span:
    """One coloured stretch of a bar: where it starts and how wide it is, in % of the width."""

    key: str
    label: str
    x_pct: float
    width_pct: float
    value: float  # ms for stage bars, seconds for segments
    title: str


@dataclass(frozen=True)
class Tick:
    """An axis tick: position in %, its label and the text anchor that keeps it inside the chart."""

    x_pct: float
    label: str
    anchor: str


@dataclass(frozen=True)
class Timeline:
    """Black and frozen stretches over the video's duration, with an axis."""

    duration_s: float
    black: list[Span]
    freeze: list[Span]
    ticks: list[Tick]


@dataclass(frozen=True)
class StageBar:
    """A run's stage timings as one stacked bar."""

    total_ms: float
    spans: list[Span]


def _pct(value: float, whole: float) -> float:
    return round(max(0.0, min(100.0, value / whole * 100)), 3) if whole > 0 else 0.0


def _nice_step(duration: float, max_ticks: int = 8) -> float:
    raw = duration / max_ticks
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for factor in (1, 2, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def _fmt_seconds(value: float) -> str:
    return f"{value:g} s" if value >= 1 or value == 0 else f"{value:.2g} s"


def timeline(duration_s: float | None, black: list[Segment], freeze: list[Segment]) -> Timeline | None:
    """The validation timeline, or None when the video's duration is unknown."""
    if not duration_s or duration_s <= 0:
        return None

    def spans(kind: str, segments: list[Segment]) -> list[Span]:
        out = []
        for seg in segments:
            start = max(0.0, seg.start_s)
            end = min(duration_s, max(seg.end_s, start))
            label = "black" if kind == "black" else "frozen"
            title = f"{label} {start:.2f}–{end:.2f} s ({seg.duration_s:.2f} s)"
            out.append(
                Span(
                    key=kind,
                    label=label,
                    x_pct=_pct(start, duration_s),
                    # At least a sliver, so a short stretch stays visible.
                    width_pct=max(0.4, _pct(end - start, duration_s)),
                    value=seg.duration_s,
                    title=title,
                )
            )
        return out

    step = _nice_step(duration_s)
    ticks: list[Tick] = []
    count = int(duration_s / step + 1e-9)
    for i in range(count + 1):
        at = round(i * step, 6)
        if at > duration_s:
            break
        ticks.append(Tick(x_pct=_pct(at, duration_s), label=_fmt_seconds(at), anchor="middle"))
    if ticks:
        ticks[0] = Tick(ticks[0].x_pct, ticks[0].label, "start")
        if ticks[-1].x_pct > 92:
            ticks[-1] = Tick(ticks[-1].x_pct, ticks[-1].label, "end")
    return Timeline(
        duration_s=duration_s, black=spans("black", black), freeze=spans("freeze", freeze), ticks=ticks
    )


# A job's ``stage`` column (what it was doing last) -> the timing it would have recorded.
STAGE_OF_JOB = {
    "fetching": "fetch",
    "loading": "load",
    "generating": "generate",
    "encoding": "encode",
    "validating": "validate",
    "uploading": "upload",
}


def stage_bar(timings: dict[str, Any], *, stopped_in: str | None = None) -> StageBar | None:
    """The run's stages as one bar; time not covered by a stage becomes "other".

    A run that stopped part-way (canceled, crashed) never timed the stage it was in; when
    ``stopped_in`` names that stage, the uncovered time is drawn as that stage, marked stopped.
    """
    values = {s: float(timings.get(f"{s}_ms") or 0.0) for s in STAGES}
    covered = sum(values.values())
    total = float(timings.get("total_ms") or 0.0)
    if total < covered:
        total = covered
    if total <= 0:
        return None
    labels = dict(STAGE_LABELS)
    rest = total - covered
    interrupted = STAGE_OF_JOB.get(stopped_in or "")
    if interrupted and not values[interrupted] and rest > 0:
        values[interrupted] = rest
        labels[interrupted] = f"{labels[interrupted]} (stopped)"
    elif rest > total * 0.005:
        values["other"] = rest
    spans: list[Span] = []
    x = 0.0
    for key, ms in values.items():
        if ms <= 0:
            continue
        width = _pct(ms, total)
        label = labels[key]
        spans.append(
            Span(
                key=key,
                label=label,
                x_pct=round(x, 3),
                width_pct=width,
                value=round(ms, 1),
                title=f"{label}: {format_ms(ms)} ({width:.0f}%)",
            )
        )
        x += width
    return StageBar(total_ms=round(total, 1), spans=spans)


def format_ms(ms: float | None) -> str:
    """A duration in ms for people: 850 ms, 2.4 s, 3 min 05 s."""
    if ms is None:
        return "–"
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s"


def format_value(value: Any) -> str:
    """An expected or actual value of a check, compact and readable."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):
        return ", ".join(format_value(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def failed_first(checks: list[Check]) -> list[Check]:
    """Checks with the failed ones first, otherwise in the gate's order."""
    return sorted(checks, key=lambda c: c.passed)
