"""The Fleet page (``/ui/fleet``: what each card group holds and runs, and its last 24 hours as a
timeline coloured by ledger state, with loads and swaps marked) and the Usage page (``/ui/usage``:
card-seconds per tenant and model, for admins every tenant, for a key its own).

Both draw what the API answers (``jobservice.fleet.status``, ``jobservice.fleet.usage``); the
timeline is inline SVG laid out in percent of its width (``charts.py``'s way), so it needs no script.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from flask import render_template, request

from jobservice.db.tables import utcnow
from jobservice.fleet.status import fleet_status
from jobservice.fleet.usage import GROUPINGS, usage_report
from jobservice.fleet.views import CardGroupView, FleetView
from jobservice.http.api.native.jobs import services
from jobservice.http.api.policy.auth import current_principal
from jobservice.http.web.blueprint import bp

STATE_LABELS = {
    "generating": "generating",
    "loading": "loading a model",
    "finishing": "finishing (gate, upload)",
    "idle_warm": "idle, model held",
    "idle_empty": "idle, nothing held",
    "unhealthy": "unhealthy (takes no job)",
    "down": "down",
}


@dataclass(frozen=True)
class Bar:
    """One span of a group's timeline: where it starts and how wide it is, in % of the window."""

    state: str
    x_pct: float
    width_pct: float
    title: str


@dataclass(frozen=True)
class Mark:
    """A load or eviction on the timeline."""

    kind: str
    x_pct: float
    title: str


@dataclass(frozen=True)
class CardGroupChart:
    """A group with its timeline drawn."""

    group: CardGroupView
    bars: list[Bar]
    marks: list[Mark]
    shares: list[tuple[str, float]]  # (state, % of the window)


def _pct(moment: datetime, start: datetime, seconds: float) -> float:
    return round(max(0.0, min(100.0, (moment - start).total_seconds() / seconds * 100)), 3)


def chart(group: CardGroupView, *, start: datetime, end: datetime) -> CardGroupChart:
    """The group's timeline between ``start`` and ``end``."""
    seconds = max(1.0, (end - start).total_seconds())
    bars = []
    for span in group.timeline:
        x = _pct(span.start, start, seconds)
        width = max(0.15, _pct(span.end, start, seconds) - x)
        what = f"{STATE_LABELS.get(span.state, span.state)}{' ' + span.model if span.model else ''}"
        took = (span.end - span.start).total_seconds()
        title = f"{what}: {span.start:%H:%M:%S}–{span.end:%H:%M:%S} UTC ({took:.0f} s)"
        bars.append(Bar(span.state, x, width, title))
    marks = [
        Mark(
            "load",
            _pct(e.at, start, seconds),
            f"{e.at:%H:%M:%S} loaded {e.model} in {e.seconds or 0:.1f} s ({e.reason})",
        )
        for e in group.loads
        if e.kind == "load"
    ]
    marks += [
        Mark(
            "evict",
            _pct(e.at, start, seconds),
            f"{e.at:%H:%M:%S} evicted {e.model} after {(e.seconds or 0) / 60:.0f} min ({e.reason})",
        )
        for e in group.evictions
    ]
    total = sum(group.ledger_seconds.values()) or 1.0
    shares = [(state, round(v / total * 100, 1)) for state, v in group.ledger_seconds.items() if v > 0]
    return CardGroupChart(group, bars, marks, shares)


def _ticks(start: datetime, end: datetime) -> list[tuple[float, str]]:
    seconds = max(1.0, (end - start).total_seconds())
    step = (
        timedelta(hours=3)
        if seconds > 6 * 3600
        else timedelta(hours=1)
        if seconds > 3600
        else timedelta(minutes=10)
    )
    first = start.replace(minute=0, second=0, microsecond=0) + step
    ticks, at = [], first
    while at < end:
        x = _pct(at, start, seconds)
        if 3 <= x <= 97:  # a label at the very edge would be cut in half
            ticks.append((x, f"{at:%H:%M}"))
        at += step
    return ticks


WINDOWS = (1, 6, 24)  # hours the page offers


@bp.get("/ui/fleet")
def fleet_page() -> str:
    """Every card group: state, residency, and its last 24 hours (or 1 or 6)."""
    raw = request.args.get("hours", "24")
    hours = int(raw) if raw.isdecimal() and int(raw) in WINDOWS else 24
    svc = services()
    with svc.db.session() as session:
        fleet = FleetView.model_validate(fleet_status(session, svc.catalog, svc.settings, hours=float(hours)))
    start, end = fleet.since, fleet.at
    charts = [chart(g, start=start, end=end) for g in fleet.groups]
    return render_template(
        "web/fleet.html",
        nav="fleet",
        fleet=fleet,
        charts=charts,
        ticks=_ticks(start, end),
        labels=STATE_LABELS,
        show_jobs=current_principal().is_admin,
        hours=hours,
        windows=WINDOWS,
    )


@bp.get("/ui/usage")
def usage_page() -> str:
    """Card-seconds per day (or hour) and tenant and model; a key sees its own tenant."""
    principal = current_principal()
    days = request.args.get("days", "7")
    span = int(days) if days.isdecimal() and 1 <= int(days) <= 366 else 7
    bucket = "hour" if request.args.get("bucket") == "hour" else "day"
    end = utcnow()
    start = (end - timedelta(days=span)).replace(hour=0, minute=0, second=0, microsecond=0)
    tenant = None if principal.is_admin else principal.tenant
    with services().db.session() as session:
        rows = usage_report(
            session, group_by=("tenant", "model"), bucket=bucket, since=start, until=end, tenant=tenant
        )
    totals: dict[str, float] = {}
    for row in rows:
        totals[row.keys["tenant"]] = totals.get(row.keys["tenant"], 0.0) + row.card_seconds
    query: dict[str, Any] = {
        "group_by": "tenant,model",
        "bucket": bucket,
        "from": start.astimezone(UTC).isoformat(),
        "to": end.isoformat(),
    }
    return render_template(
        "web/usage.html",
        nav="usage",
        rows=rows,
        totals=sorted(totals.items(), key=lambda kv: -kv[1]),
        days=span,
        bucket=bucket,
        start=start,
        end=end,
        tenant=tenant,
        query=query,
        groupings=GROUPINGS,
    )
