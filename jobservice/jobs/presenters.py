"""How a job looks from outside: the JSON view shared by the API, the CLI and the web pages, and the
filters of the lists of jobs (paged by ``jobservice.jobs.pages``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.db.tables import Job, JobStatus
from jobservice.fleet.eta import Eta, Stored, behind_of, eta_of, running_finish
from jobservice.jobs import retries
from jobservice.jobs.pages import JOB_KEYS, after_cursor, page_of
from jobservice.jobs.previews import preview_of, without_preview
from jobservice.jobs.views import ErrorView, EtaRevision, JobView, TryView, ValidationView


def job_view(job: Job, *, forecast: Stored | None = None, behind: int = 0) -> JobView:
    """Render ``job``; an unfinished job's ETA and a queued job's position come from the fleet's
    ``forecast`` (``jobservice.fleet.eta.latest``; ``behind``: ``eta.behind_of`` for a job submitted
    after it)."""
    status = JobStatus(job.status)
    eta = eta_of(forecast, job, behind=behind)
    position = eta.position if eta is not None else None
    links = {"self": f"/jobs/{job.id}", "events": f"/jobs/{job.id}/events"}
    if not status.is_terminal:
        links["cancel"] = f"/jobs/{job.id}/cancel"
    expired = job.expired_at is not None
    if job.output_key and not expired:
        links["video"] = f"/jobs/{job.id}/video"
    if job.report_key and not expired:
        links["report"] = f"/jobs/{job.id}/report"
        links["log"] = f"/jobs/{job.id}/log"  # stored with the report by every run that got that far
    preview = preview_of(job)
    if preview is not None and preview.state == "ready":
        links["preview"] = f"/jobs/{job.id}/preview?n={preview.number}"  # a URL per preview: caches
    error = ErrorView(code=job.error_code, message=job.error_message or "") if job.error_code else None
    validation = None
    warnings: list[str] = []
    if job.verdict:
        summary = dict(job.validation_summary or {})
        warnings = [str(w) for w in summary.pop("warnings", [])]
        validation = ValidationView(
            verdict=job.verdict, failed_checks=list(summary.pop("failed_checks", [])), summary=summary
        )
    return JobView(
        id=str(job.id),
        task=job.task,
        model=job.model,
        status=status.value,
        stage=job.stage,
        progress=round(float(job.progress or 0.0), 4),
        queue_position=position if status == JobStatus.QUEUED else None,
        cancel_requested=job.cancel_requested_at is not None and not status.is_terminal,
        params=dict(job.params or {}),
        inputs=dict(job.input_meta or {}),
        source=job.source,
        attempts=job.attempts,
        worker_id=job.worker_id,
        created_at=job.created_at,
        claimed_at=job.claimed_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        updated_at=job.updated_at,
        error=error,
        validation=validation,
        warnings=warnings,
        timings=without_preview(job.timings),
        cold_start=job.cold_start,
        tenant=job.tenant or "default",
        group_id=str(job.group_id) if job.group_id else None,
        group_row=job.group_row,
        expires_at=job.expires_at,
        expired=expired,
        usage=job.usage or None,
        retry_on_validation_failure=int(job.retry_on_validation_failure or 0),
        validation_attempts=_tries(job, expired),
        seed_used=retries.seed_of_try(dict(job.params or {}), len(retries.tries_of(job))),
        **(_eta(forecast, job, eta) if forecast is not None else {}),
        eta_revisions=[EtaRevision.model_validate(r) for r in job.eta_revisions or []],
        preview=preview,
        links=links,
    )


def _tries(job: Job, expired: bool) -> list[TryView]:
    """The tries the gate failed, each with links to its files (``?try=N`` of the job's own)."""
    views: list[TryView] = []
    for tried in retries.tries_of(job):
        number = int(tried.get("try", len(views) + 1))
        links: dict[str, str] = {}
        if not expired:
            if tried.get("output_key"):
                links["video"] = f"/jobs/{job.id}/video?try={number}"
            if tried.get("report_key"):
                links["report"] = f"/jobs/{job.id}/report?try={number}"
                links["log"] = f"/jobs/{job.id}/log?try={number}"
        views.append(
            TryView(
                number=number,
                attempt=int(tried.get("attempt") or 0),
                seed=tried.get("seed"),
                verdict=str(tried.get("verdict") or "failed"),
                failed_checks=list(tried.get("failed_checks") or []),
                message=str(tried.get("message") or ""),
                card_seconds=tried.get("card_seconds"),
                finished_at=tried.get("finished_at"),
                links=links,
            )
        )
    return views


def _eta(forecast: Stored, job: Job, eta: Eta | None) -> dict[str, Any]:
    if eta is None:
        return {}
    fields = eta.view()
    if JobStatus(job.status) == JobStatus.RUNNING:
        fields["estimated_start_at"] = None
        fields["estimated_finish_at"] = fields["estimated_finish_at"] or running_finish(forecast, job)
    return fields


class JobList(BaseModel):
    """A page of ``GET /jobs`` (and of a batch's jobs): serialized by pydantic in one pass."""

    object: str = "list"
    jobs: list[JobView]
    next_cursor: str | None = None


def job_views(session: Session, jobs: list[Job], *, forecast: Stored | None = None) -> list[JobView]:
    """Render a page of jobs; positions and ETAs come from ``forecast`` (a query only for a queued
    job submitted after it, ``behind_of``)."""
    return [job_view(job, forecast=forecast, behind=behind_of(session, forecast, job)) for job in jobs]


def list_jobs(
    session: Session,
    *,
    statuses: list[JobStatus] | None = None,
    model: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
    tenant: str | None = None,
) -> tuple[list[Job], str | None]:
    """Jobs newest first with optional filters (``tenant``: only its jobs); the page and next cursor
    (``jobservice.jobs.pages``); deleted jobs are left out."""
    query = select(Job).where(Job.deleted_at.is_(None))
    if tenant is not None:
        query = query.where(Job.tenant == tenant)
    if statuses:
        query = query.where(Job.status.in_(statuses))
    if model:
        query = query.where(Job.model == model)
    return page_of(session, query, JOB_KEYS, after=after_cursor(cursor), limit=limit, newest_first=True)
