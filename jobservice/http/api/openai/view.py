"""How a job looks to an OpenAI Videos client: the ``video`` object, its list page and its errors.

A video is a job (same row, same id); this module only renders it with the field names, types and
status words of ``openai.types.Video``. Our statuses map as queued -> queued, running ->
in_progress, succeeded -> completed, failed -> failed, and canceled -> failed with the error code
``canceled`` (OpenAI has no canceled status; a client that polls must see the job end).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.catalog import Catalog
from jobservice.db.tables import Job, JobEvent, JobStatus
from jobservice.errors import DomainError
from jobservice.fleet.eta import Eta, Stored, eta_of, running_finish
from jobservice.jobs.pages import JOB_KEYS, page_of

STATUS = {
    JobStatus.QUEUED: "queued",
    JobStatus.RUNNING: "in_progress",
    JobStatus.SUCCEEDED: "completed",
    JobStatus.FAILED: "failed",
    JobStatus.CANCELED: "failed",
}
REMIX_DETAIL = "remix of "  # the job event that links a remix to its source video
# OpenAI's error types by HTTP status; the SDK picks its exception class from the status alone.
ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}


class VideoError(BaseModel):
    """Why a video failed (``openai.types.VideoCreateError``)."""

    code: str
    message: str


class VideoView(BaseModel):
    """The ``video`` object of the OpenAI Videos API, for one job."""

    id: str = Field(description="The job id (the same id works on /jobs).")
    object: Literal["video"] = "video"
    model: str
    status: Literal["queued", "in_progress", "completed", "failed"]
    progress: int = Field(ge=0, le=100)
    created_at: int = Field(description="Unix seconds.")
    completed_at: int | None = Field(default=None, description="Unix seconds; set once it ended.")
    expires_at: int | None = Field(default=None, description="Unix seconds; its files are deleted then.")
    prompt: str | None = None
    size: str = Field(description="WxH pixels ('' when not known before the run).")
    seconds: str = Field(description="Duration in seconds, as a string.")
    error: VideoError | None = None
    remixed_from_video_id: str | None = None
    # jobservice's own (an OpenAI SDK keeps them in the object's extra fields):
    estimated_start_at: int | None = Field(default=None, description="Unix seconds; a queued video's ETA.")
    estimated_completed_at: int | None = Field(default=None, description="Unix seconds; when it should end.")
    queue_position: int | None = Field(
        default=None,
        description="A queued video: how many jobs the dispatcher will start before it (as on /jobs).",
    )
    usage: dict[str, Any] | None = Field(default=None, description="Card-seconds used (as on /jobs).")


class VideoList(BaseModel):
    """A page of ``GET /v1/videos``."""

    object: Literal["list"] = "list"
    data: list[VideoView]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool


class VideoDeleted(BaseModel):
    """``DELETE /v1/videos/{id}``."""

    id: str
    object: Literal["video.deleted"] = "video.deleted"
    deleted: bool


def quoted(raw: Any, limit: int = 64) -> str:
    """A client's value as a refusal quotes it: cut short, so a refusal never echoes a large input, and
    lone surrogates (valid in JSON escapes, not in UTF-8) replaced."""
    text = str(raw).encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= limit else text[:limit] + "..."


def _unix(at: datetime | None) -> int | None:
    return int(at.timestamp()) if at is not None else None


def format_seconds(value: float) -> str:
    """A duration as OpenAI writes it: ``"4"``, or ``"2.5"`` when it is not whole (2 decimals)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return text or "0"


def clip_seconds(params: dict[str, Any], inputs: dict[str, Any]) -> str:
    """The clip's length: frames over fps (within one frame of a whole second it is that second,
    since Wan-style models make 4k+1 frames), else the speech's length for an audio-driven model."""
    frames, fps = params.get("num_frames"), params.get("fps")
    if isinstance(frames, int) and isinstance(fps, int | float) and fps > 0:
        exact = frames / fps
        whole = round(exact)
        return format_seconds(whole if whole > 0 and abs(exact - whole) * fps <= 1 else exact)
    duration = (inputs.get("audio") or {}).get("duration_s")
    if isinstance(duration, int | float):
        return format_seconds(float(duration))
    return "0"


def clip_size(params: dict[str, Any], inputs: dict[str, Any]) -> str:
    """``WxH``: the parameters' when the model takes them, else the portrait's framing with its longest
    side capped at ``max_size`` in multiples of 16 (as the talking-head models frame it)."""
    width, height = params.get("width"), params.get("height")
    if isinstance(width, int) and isinstance(height, int):
        return f"{width}x{height}"
    image = inputs.get("image") or {}
    width, height = image.get("width"), image.get("height")
    if not (isinstance(width, int) and isinstance(height, int)) or min(width, height) <= 0:
        return ""
    cap = params.get("max_size")
    if isinstance(cap, int) and cap > 0:
        scale = min(1.0, cap / max(width, height))
        width, height = (min(cap, max(16, round(v * scale / 16) * 16)) for v in (width, height))
    return f"{width}x{height}"


def video_view(
    job: Job, *, remixed_from: str | None = None, forecast: Stored | None = None, behind: int = 0
) -> VideoView:
    """Render ``job`` as an OpenAI ``video`` object (with its ETA when the fleet's ``forecast`` is given)."""
    status = JobStatus(job.status)
    params, inputs = dict(job.params or {}), dict(job.input_meta or {})
    error = None
    if status == JobStatus.CANCELED:
        error = VideoError(code="canceled", message=job.error_message or "The video was canceled.")
    elif status == JobStatus.FAILED:
        error = VideoError(code=job.error_code or "failed", message=job.error_message or "The run failed.")
    progress = 100 if status == JobStatus.SUCCEEDED else int(round(float(job.progress or 0.0) * 100))
    prompt = params.get("prompt")
    found = eta_of(forecast, job, behind=behind) if forecast is not None else None
    eta = _eta(job, forecast, found)
    return VideoView(
        id=str(job.id),
        model=job.model,
        status=STATUS[status],  # type: ignore[arg-type]
        progress=max(0, min(100, progress)),
        created_at=_unix(job.created_at) or 0,
        completed_at=_unix(job.finished_at) if status.is_terminal else None,
        expires_at=_unix(job.expired_at or job.expires_at),  # once deleted: when they went
        prompt=prompt if isinstance(prompt, str) else None,
        size=clip_size(params, inputs),
        seconds=clip_seconds(params, inputs),
        error=error,
        remixed_from_video_id=remixed_from,
        usage=job.usage or None,
        estimated_start_at=eta[0],
        estimated_completed_at=eta[1],
        queue_position=found.position if found is not None and status == JobStatus.QUEUED else None,
    )


def _eta(job: Job, forecast: Stored | None, eta: Eta | None) -> tuple[int | None, int | None]:
    if eta is None:
        return None, None
    finish = eta.finish or (
        running_finish(forecast, job) if JobStatus(job.status) == JobStatus.RUNNING else None
    )
    start = eta.start if JobStatus(job.status) == JobStatus.QUEUED else None
    return _unix(start), _unix(finish)


def remix_sources(session: Session, job_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The source video of each remix among ``job_ids`` (one query, from the remix's job event)."""
    if not job_ids:
        return {}
    rows = session.execute(
        select(JobEvent.job_id, JobEvent.detail).where(
            JobEvent.job_id.in_(job_ids), JobEvent.detail.startswith(REMIX_DETAIL)
        )
    )
    return {job_id: detail[len(REMIX_DETAIL) :] for job_id, detail in rows}


def allowed_models(catalog: Catalog) -> str:
    """The catalog ids, for a refusal that names them."""
    return ", ".join(catalog.ids())


def openai_error_body(error: DomainError, status: int) -> dict[str, Any]:
    """``error`` in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""
    param = error.field
    if param is None and error.details:
        param = str(error.details[0].get("field") or "") or None
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body: dict[str, Any] = {"message": error.message, "type": kind, "param": param, "code": error.code}
    if error.details:
        body["details"] = error.details
    return {"error": body}


def page_of_videos(
    session: Session, *, tenant: str | None, after: Job | None, limit: int, order: str
) -> tuple[list[Job], bool]:
    """One page of jobs by creation time (``order`` asc or desc), those after ``after``, without the
    deleted jobs; and whether more follow. ``tenant`` None: every tenant's (an admin). Paged as the
    native lists are (``jobservice.jobs.pages``)."""
    query = select(Job).where(Job.deleted_at.is_(None))
    if tenant is not None:
        query = query.where(Job.tenant == tenant)
    position = JOB_KEYS.of(after) if after is not None else None
    rows, next_cursor = page_of(
        session, query, JOB_KEYS, after=position, limit=limit, newest_first=order != "asc"
    )
    return rows, next_cursor is not None
