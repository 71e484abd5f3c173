"""How a job looks from outside: the JSON view shared by the API, the CLI and the web pages."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from jobservice.db.tables import Job, JobStatus
from jobservice.errors import Malformed
from jobservice.jobs.queries import queue_position


class ErrorView(BaseModel):
    """A job's failure, in machine and human form."""

    code: str
    message: str


class ValidationView(BaseModel):
    """The output gate's verdict, summarised (the full findings are in the RunReport)."""

    verdict: str
    failed_checks: list[str] = Field(default_factory=list)
    summary: dict[str, Any] = Field(default_factory=dict)


class JobView(BaseModel):
    """The public view of a job (``GET /jobs/<id>``)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    object: str = "job"
    task: str
    model: str
    status: str
    stage: str
    progress: float
    queue_position: int | None = Field(
        default=None, description="Jobs ahead of this one (0 = next); queued only."
    )
    cancel_requested: bool = False
    params: dict[str, Any]
    inputs: dict[str, Any]
    source: str
    attempts: int
    worker_id: str | None = None
    created_at: datetime
    claimed_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None
    error: ErrorView | None = None
    validation: ValidationView | None = None
    warnings: list[str] = Field(
        default_factory=list,
        description="What the run did differently from the request (e.g. a preset the model's "
        "checkout did not honour); details in the report's extra.",
    )
    timings: dict[str, Any] = Field(default_factory=dict)
    cold_start: bool | None = None
    tenant: str = "default"
    expires_at: datetime | None = Field(
        default=None, description="When the job's files (inputs, video, report, log) will be deleted."
    )
    expired: bool = Field(default=False, description="The files were deleted by retention; the row stays.")
    links: dict[str, str]


def job_view(job: Job, *, session: Session | None = None, position: int | None = None) -> JobView:
    """Render ``job``; the queue position is computed when a session is given and the job is queued."""
    status = JobStatus(job.status)
    if position is None and session is not None and status == JobStatus.QUEUED:
        position = queue_position(session, job)
    links = {"self": f"/jobs/{job.id}", "events": f"/jobs/{job.id}/events"}
    if not status.is_terminal:
        links["cancel"] = f"/jobs/{job.id}/cancel"
    expired = job.expired_at is not None
    if job.output_key and not expired:
        links["video"] = f"/jobs/{job.id}/video"
    if job.report_key and not expired:
        links["report"] = f"/jobs/{job.id}/report"
        links["log"] = f"/jobs/{job.id}/log"  # stored with the report by every run that got that far
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
        timings=dict(job.timings or {}),
        cold_start=job.cold_start,
        tenant=job.tenant or "default",
        expires_at=job.expires_at,
        expired=expired,
        links=links,
    )


def encode_cursor(job: Job) -> str:
    """An opaque cursor pointing just after ``job`` in newest-first order."""
    raw = json.dumps([job.created_at.isoformat(), str(job.id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    """Parse a cursor made by ``encode_cursor``; a malformed one is a 400."""
    try:  # ours are ~100 characters of base64url holding [iso-time, uuid]; anything else is refused
        if len(cursor) > 200 or not cursor.isascii():
            raise ValueError("not ours")
        padded = cursor + "=" * (-len(cursor) % 4)
        created, job_id = json.loads(base64.b64decode(padded.encode(), altchars=b"-_", validate=True))
        if not (isinstance(created, str) and isinstance(job_id, str)):
            raise ValueError("not ours")
        return datetime.fromisoformat(created), uuid.UUID(job_id)
    except (ValueError, TypeError, binascii.Error, RecursionError):
        raise Malformed("invalid_cursor", "The cursor is not one this API produced.") from None


def list_jobs(
    session: Session,
    *,
    statuses: list[JobStatus] | None = None,
    model: str | None = None,
    limit: int = 20,
    cursor: str | None = None,
    tenant: str | None = None,
) -> tuple[list[Job], str | None]:
    """Jobs newest first with optional filters (``tenant``: only its jobs); the page and next cursor."""
    query = select(Job)
    if tenant is not None:
        query = query.where(Job.tenant == tenant)
    if statuses:
        query = query.where(Job.status.in_(statuses))
    if model:
        query = query.where(Job.model == model)
    if cursor:
        created, job_id = decode_cursor(cursor)
        query = query.where(or_(Job.created_at < created, and_(Job.created_at == created, Job.id < job_id)))
    rows = list(session.scalars(query.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit + 1)))
    next_cursor = encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return rows[:limit], next_cursor
