"""The jobs list (``/ui/jobs``), a job's page (``/ui/jobs/<id>``) and its cancel/resubmit buttons.

Pages are complete without JavaScript (an unfinished job's page refreshes itself through a
``<noscript>`` meta refresh); with it, ``static/app.js`` follows the job's event stream
(``GET /jobs/<id>/stream``; it polls ``GET /jobs/<id>`` where the stream is unavailable) or polls
the list's rows fragment, and updates progress in place.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from flask import flash, redirect, render_template, request, send_file, url_for
from pydantic import ValidationError
from werkzeug.datastructures import MultiDict

from jobservice.db.tables import Job, JobStatus
from jobservice.errors import DomainError, NotFound
from jobservice.fleet.eta import behind_of
from jobservice.fleet.eta import latest as latest_forecast
from jobservice.http.api.native.jobs import files_of, load_job, services
from jobservice.http.api.policy.auth import current_principal
from jobservice.http.web.blueprint import bp
from jobservice.http.web.charts import failed_first, stage_bar, timeline
from jobservice.http.web.security import check_csrf
from jobservice.http.web.wording import eta_text, failure_text, queue_text, stage_text
from jobservice.jobs.presenters import job_view, job_views, list_jobs
from jobservice.jobs.queries import events_of
from jobservice.jobs.submit import resubmit_job
from jobservice.jobs.transitions import InvalidTransition, request_cancel
from jobservice.media.types import TYPE_BY_EXTENSION
from jobservice.reports.run_report import RunReport
from jobservice.storage import ObjectNotFound, StoreUnavailable

log = logging.getLogger(__name__)

PAGE_SIZES = (20, 50, 100)
REFRESH_SECONDS = 3


@dataclass(frozen=True)
class ListQuery:
    """The jobs list's filters and page, read leniently from the query string."""

    statuses: list[JobStatus]
    model: str | None
    limit: int
    cursor: str | None

    @classmethod
    def from_args(cls, args: MultiDict[str, str]) -> ListQuery:
        """Unknown statuses are ignored; the page size is one of PAGE_SIZES."""
        statuses: list[JobStatus] = []
        for raw in args.getlist("status"):
            for value in filter(None, (s.strip() for s in raw.split(","))):
                if value in JobStatus.__members__.values() and JobStatus(value) not in statuses:
                    statuses.append(JobStatus(value))
        raw_limit = args.get("limit", "")
        # Compared as text: int() raises on digits such as "²" that str.isdigit() accepts.
        limit = int(raw_limit) if raw_limit in {str(size) for size in PAGE_SIZES} else PAGE_SIZES[0]
        return cls(statuses, args.get("model") or None, limit, args.get("cursor") or None)

    def args(self, **changes: Any) -> dict[str, Any]:
        """Query arguments for a link to this list, with ``changes``."""
        out: dict[str, Any] = {"status": [s.value for s in self.statuses], "model": self.model}
        if self.limit != PAGE_SIZES[0]:
            out["limit"] = self.limit
        out["cursor"] = self.cursor
        out.update(changes)
        return {k: v for k, v in out.items() if v not in (None, [], "")}


def _rows(query: ListQuery) -> tuple[list[dict[str, Any]], str | None]:
    with services().db.session() as session:
        jobs, next_cursor = list_jobs(
            session,
            statuses=query.statuses,
            model=query.model,
            limit=query.limit,
            cursor=query.cursor,
            tenant=current_principal().scope(),
        )
        views = job_views(session, jobs, forecast=latest_forecast(services()))
        rows = [_row(job, view.model_dump()) for job, view in zip(jobs, views, strict=True)]
    return rows, next_cursor


def _row(job: Job, view: dict[str, Any]) -> dict[str, Any]:
    view["created"] = job.created_at
    view["stage_text"] = stage_text(view["status"], view["stage"], view["cancel_requested"])
    view["queue_text"] = queue_text(view["queue_position"])
    view["eta_text"] = eta_text(SimpleNamespace(**view))
    view["terminal"] = JobStatus(view["status"]).is_terminal
    return view


@bp.get("/ui/jobs")
def jobs() -> str:
    """Jobs newest first, filtered by status and model, a page at a time."""
    query = ListQuery.from_args(request.args)
    rows, next_cursor = _rows(query)
    return render_template(
        "web/jobs.html",
        nav="jobs",
        rows=rows,
        query=query,
        next_cursor=next_cursor,
        statuses=[s.value for s in JobStatus],
        models=services().catalog.ids(),
        page_sizes=PAGE_SIZES,
    )


@bp.get("/ui/jobs/rows")
def job_rows() -> str:
    """The list's table body alone, for the list page's script to refresh progress in place."""
    query = ListQuery.from_args(request.args)
    rows, _ = _rows(query)
    return render_template("web/_job_rows.html", rows=rows, query=query)


def _report(job: Job) -> tuple[RunReport | None, str | None, str | None]:
    """The job's RunReport (parsed), its pretty JSON, and a problem reading it, if any."""
    if job.expired_at is not None:
        return (
            None,
            None,
            f"This job's files were deleted on {job.expired_at:%Y-%m-%d %H:%M} UTC (retention).",
        )
    if not job.report_key:
        return None, None, None
    try:
        raw = services().store.get_bytes(job.report_key)
    except ObjectNotFound:
        return None, None, "The report is recorded but missing from the object store."
    except StoreUnavailable as exc:
        return None, None, f"The object store is unavailable: {exc}"
    try:
        data = json.loads(raw)
    except ValueError:
        return None, None, "The stored report is not valid JSON."
    pretty = json.dumps(data, indent=2)
    try:
        return RunReport.model_validate(data), pretty, None
    except ValidationError:
        return None, pretty, "The report has a shape this page does not know; it is shown as stored."


@bp.get("/ui/jobs/<job_id>")
def job_page(job_id: str) -> str:
    """One job: live progress while it runs; then its video, validation, timings and report."""
    job = load_job(job_id)
    with services().db.session() as session:
        forecast = latest_forecast(services())
        view = job_view(job, forecast=forecast, behind=behind_of(session, forecast, job))
        events = events_of(session, job.id)
    report, report_json, report_problem = _report(job)
    validation = report.validation if report else None
    return render_template(
        "web/job.html",
        nav="jobs",
        job=job,
        view=view,
        spec=services().catalog.get(job.model),
        terminal=JobStatus(job.status).is_terminal,
        stage_text=stage_text(view.status, view.stage, view.cancel_requested),
        queue_text=queue_text(view.queue_position),
        eta_text=eta_text(view),
        failure=failure_text(view.error.code) if view.error else None,
        events=events,
        report=report,
        report_json=report_json,
        report_problem=report_problem,
        validation=validation,
        checks=failed_first(validation.checks) if validation else [],
        timeline=timeline(validation.probe.duration_s, validation.black_segments, validation.freeze_segments)
        if validation
        else None,
        stages=stage_bar(
            report.timings if report else dict(job.timings or {}),
            stopped_in=job.stage if job.status in (JobStatus.FAILED, JobStatus.CANCELED) else None,
        ),
        refresh_seconds=REFRESH_SECONDS,
    )


@bp.post("/ui/jobs/<job_id>/cancel")
def cancel(job_id: str) -> Any:
    """Cancel the job (queued: at once; running: at its next step), then back to its page."""
    check_csrf()
    job = load_job(job_id)
    try:
        with services().db.session() as session:
            status = request_cancel(session, job.id, actor=current_principal().actor)
    except InvalidTransition as exc:
        state = exc.current.value if exc.current else "gone"
        flash(f"The job is already {state}; there is nothing to cancel.", "error")
    else:
        if status == JobStatus.CANCELED:
            flash("The job was canceled.", "success")
        else:
            flash("Cancel requested: the job stops at its next step.", "success")
    return redirect(url_for("web.job_page", job_id=str(job.id)), code=303)


@bp.post("/ui/jobs/<job_id>/resubmit")
def resubmit(job_id: str) -> Any:
    """Run the job again as a new job with the same model, parameters (seed kept) and inputs."""
    check_csrf()
    job = load_job(job_id)
    try:
        new_job = resubmit_job(services(), job, source="web", principal=current_principal())
    except DomainError as exc:
        flash(f"Could not resubmit: {exc.message}", "error")
        return redirect(url_for("web.job_page", job_id=str(job.id)), code=303)
    flash(f"Resubmitted job {str(job.id)[:8]} as this new job.", "success")
    return redirect(url_for("web.job_page", job_id=str(new_job.id)), code=303)


@bp.get("/ui/jobs/<job_id>/inputs/<name>")
def job_input(job_id: str, name: str) -> Any:
    """An input the job was submitted with (its portrait or speech), for the job's page."""
    job = files_of(load_job(job_id))
    key = (job.input_keys or {}).get(name)
    if not key:
        raise NotFound("input_not_found", f"Job {job.id} has no input '{name}'.")
    store = services().store
    path = store.local_path(key)
    if path is not None:
        if not path.exists():
            raise NotFound("input_missing", "The input is recorded but missing from the object store.")
        mimetype = TYPE_BY_EXTENSION.get(path.suffix.lower(), "application/octet-stream")
        return send_file(path, mimetype=mimetype, conditional=True, max_age=3600)
    url = store.presigned_url(key)
    if url is None:
        raise NotFound("input_missing", "The object store cannot hand out this input.")
    return redirect(url, code=302)
