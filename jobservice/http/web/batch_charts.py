"""Trend charts of a batch page: one small inline SVG per case and metric over the last N runs.

Geometry only (no HTML): each chart is a polyline of the runs' medians with a min-max band, the
points of regressed runs marked, in a fixed 0..W x 0..H coordinate space that the template scales
with ``viewBox``. Colours are presentation attributes, which the pages' CSP allows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobservice.db.tables import Batch
from jobservice.nightly.figures import METRICS

W, H = 220.0, 80.0
PAD_X, PAD_TOP, PAD_BOTTOM = 6.0, 14.0, 16.0


@dataclass(frozen=True)
class Point:
    """One run on a chart."""

    x: float
    y: float
    value: float
    label: str  # date of the run
    batch_id: str
    flagged: bool  # this run's comparison flagged the metric
    current: bool  # the batch the page is about


@dataclass(frozen=True)
class TrendChart:
    """One metric of one case over time."""

    metric: str
    title: str
    unit: str
    better: str
    points: list[Point]
    band: str  # polygon points of the min..max band
    line: str  # polyline points of the medians
    low: float
    high: float

    @property
    def last(self) -> Point | None:
        """The newest point."""
        return self.points[-1] if self.points else None


def _scale(value: float, low: float, high: float) -> float:
    span = (high - low) or abs(high) or 1.0
    top, bottom = PAD_TOP, H - PAD_BOTTOM
    return round(bottom - (value - low) / span * (bottom - top), 2)


def _flagged(batch: Batch, case: str, metric: str) -> bool:
    comparison = (batch.results or {}).get("comparison") or {}
    for entry in comparison.get("cases") or []:
        if entry["case"] == case:
            return any(
                m["metric"] == metric and m["verdict"] == "regression" for m in entry.get("metrics") or []
            )
    return False


def trend_chart(history: list[Batch], *, case: str, metric: str, current: Batch) -> TrendChart | None:
    """The chart of ``metric`` for ``case`` over ``history`` (oldest first); None without data."""
    rows: list[tuple[Batch, dict[str, Any]]] = []
    for batch in history:
        found = next((c for c in (batch.results or {}).get("cases") or [] if c["name"] == case), None)
        summary = ((found or {}).get("summary") or {}).get(metric)
        if summary and summary.get("median") is not None:
            rows.append((batch, summary))
    if not rows:
        return None
    lows = [float(s["minimum"] if s.get("minimum") is not None else s["median"]) for _, s in rows]
    highs = [float(s["maximum"] if s.get("maximum") is not None else s["median"]) for _, s in rows]
    low, high = min(lows), max(highs)
    margin = (high - low) * 0.1 or abs(high) * 0.05 or 1.0
    low, high = low - margin, high + margin
    step = (W - 2 * PAD_X) / max(1, len(rows) - 1)
    points = []
    for i, (batch, summary) in enumerate(rows):
        x = round(PAD_X + i * step if len(rows) > 1 else W / 2, 2)
        points.append(
            Point(
                x=x,
                y=_scale(float(summary["median"]), low, high),
                value=float(summary["median"]),
                label=batch.created_at.strftime("%m-%d %H:%M"),
                batch_id=str(batch.id),
                flagged=_flagged(batch, case, metric),
                current=batch.id == current.id,
            )
        )
    upper = [f"{p.x},{_scale(h, low, high)}" for p, h in zip(points, highs, strict=True)]
    lower = [f"{p.x},{_scale(lo, low, high)}" for p, lo in zip(points, lows, strict=True)]
    info = METRICS[metric]
    return TrendChart(
        metric=metric,
        title=info.label,
        unit=info.unit,
        better=info.better,
        points=points,
        band=" ".join(upper + list(reversed(lower))),
        line=" ".join(f"{p.x},{p.y}" for p in points),
        low=low,
        high=high,
    )


def case_charts(history: list[Batch], *, case: str, metrics: list[str], current: Batch) -> list[TrendChart]:
    """Every tracked metric's chart for one case (metrics without data are left out)."""
    charts = [trend_chart(history, case=case, metric=m, current=current) for m in metrics]
    return [c for c in charts if c is not None]
