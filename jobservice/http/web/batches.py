"""Batch pages of the web UI: ``/ui/batches`` (the runs) and ``/ui/batches/<id>`` (one report).

A report page puts what needs attention first (regressed and failed cases with the reason, and the
button that accepts the run as the new normal), then what could not tell and the episodes (nights
that add up), then the table of the seed benchmark documents, then trend charts of every tracked
metric over the last ``JOBSERVICE_BATCH_HISTORY`` runs of the same spec (inline SVG: no JavaScript
needed), then the environment. Pages reuse the web UI's layout, error pages, security headers and CSRF tokens.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, flash, redirect, render_template, request, url_for

from jobservice.http.api.native.batches import load_batch
from jobservice.http.api.native.jobs import services
from jobservice.http.api.policy.auth import current_principal
from jobservice.http.web.batch_charts import H, W, case_charts
from jobservice.http.web.blueprint import register_page_handlers
from jobservice.http.web.security import check_csrf
from jobservice.nightly.pins import pin_batch
from jobservice.nightly.presenters import batch_view, history, list_batches, list_views, spec_names
from jobservice.nightly.render import (
    SECTIONS,
    episode_line,
    fmt,
    fmt_change,
    metric_heading,
    report_data,
    shown_metrics,
)
from jobservice.nightly.service import BATCH_STATUSES
from jobservice.nightly.states import BatchStatus

bp = Blueprint("batches_web", __name__, static_folder="static", static_url_path="/ui/batches/static")
register_page_handlers(bp)

REFRESH_SECONDS = 5


@bp.app_template_global("batch_fmt")
def batch_fmt(value: Any, unit: str = "") -> str:
    """A metric value for a batch page."""
    return fmt(value, unit)


@bp.app_template_global("batch_change")
def batch_change(value: float | None) -> str:
    """A relative change for a batch page."""
    return fmt_change(value)


@bp.app_template_global("episode_text")
def episode_text(episode: dict[str, Any]) -> str:
    """An episode in words for a batch page."""
    return episode_line(episode)


@bp.get("/ui/batches")
def batches() -> str:
    """Runs newest first, optionally of one spec."""
    name = request.args.get("name") or None
    status = request.args.get("status") if request.args.get("status") in BATCH_STATUSES else None
    with services().db.session() as session:
        tenant = current_principal().scope()
        rows = list_views(session, list_batches(session, name=name, status=status, limit=100, tenant=tenant))
        names = spec_names(session, tenant)
    running = any(not BatchStatus(b.status).is_ended for b in rows)
    return render_template(
        "batches/list.html",
        rows=rows,
        names=names,
        name=name,
        status=status,
        statuses=BATCH_STATUSES,
        refresh=REFRESH_SECONDS if running else None,
        nav="batches",
    )


@bp.get("/ui/batches/<batch_id>")
def batch_page(batch_id: str) -> str:
    """One batch: progress while it runs; verdicts, table, trends and environment once finished."""
    svc = services()
    batch = load_batch(batch_id)
    with svc.db.session() as session:
        view = batch_view(session, batch)
        finished = batch.status == BatchStatus.FINISHED
        runs = history(session, batch, limit=svc.settings.batch_history) if finished else []
    data = report_data(batch) if finished else None
    tracked = shown_metrics(data) if data else []
    charts = {}
    if data is not None:
        for case in data["cases"]:
            charts[case["case"]] = case_charts(runs, case=case["case"], metrics=tracked, current=batch)
    return render_template(
        "batches/report.html",
        batch=batch,
        view=view,
        data=data,
        table_metrics=tracked,
        charts=charts,
        runs=len(runs),
        chart_w=W,
        chart_h=H,
        metric_labels={m: metric_heading(m) for m in tracked},
        sections=SECTIONS,
        refresh=None if BatchStatus(batch.status).is_ended else REFRESH_SECONDS,
        nav="batches",
    )


@bp.post("/ui/batches/<batch_id>/pin")
def pin(batch_id: str) -> Response:
    """Pin (or, with ``unpin=1``, unpin) this batch as its spec's baseline."""
    check_csrf()
    unpin = request.form.get("unpin") == "1"
    batch = pin_batch(services(), load_batch(batch_id).id, pinned=not unpin)
    flash(
        "No longer the new normal: the history reaches back past it."
        if unpin
        else "Accepted as the new normal: later nights are judged against it and the runs after it.",
        "success",
    )
    return redirect(url_for("batches_web.batch_page", batch_id=str(batch.id)), code=303)  # type: ignore[return-value]
