"""A running job's preview: what its run has rendered so far, as the job row records it.

A run whose model streams its frames (``ModelSpec.previews``) publishes the frames so far as an
MP4 in the object store every few seconds (``workers/run/preview.py``); the row points at the
latest through a small record under ``preview`` in its ``timings`` (no bytes, no extra column),
written by the run's heartbeat. The record names the attempt and try it belongs to, so a record
left by an earlier attempt is never shown for a later one, and it counts for the running job only:
once the job ends, its validated video (``links.video``) replaces the preview, and the final
transition writes ``timings`` anew.

States (the view's ``preview.state``): ``none`` (this model's back end hands over its video only once
it is finished, or previews are off on its worker: no preview will exist; ``message`` says which),
``waiting`` (no preview yet), ``ready`` (``links.preview`` plays it). A queued or ended job has no
``preview``.
"""

from __future__ import annotations

from typing import Any

from jobservice.db.tables import Job, JobStatus
from jobservice.jobs import retries
from jobservice.jobs.views import PreviewView

KEY = "preview"  # the record's key in the row's timings
KEPT = 3  # previews a run keeps while it runs: the latest and the two before it
NOT_VALIDATED = "A preview, not yet validated: the output gate checks the final video only."
NO_PREVIEW_BACKEND = (
    "This model's back end hands over its video only once it is finished: it publishes no preview."
)
NO_PREVIEW_OFF = "Previews are off on this model's workers (JOBSERVICE_PREVIEW_INTERVAL_SECONDS=0)."


def preview_timings(record: dict[str, Any]) -> dict[str, Any]:
    """The row's ``timings`` while the run holds ``record`` (nothing else is kept there while a job runs)."""
    return {KEY: record}


def current_try(job: Job) -> int:
    """The number of the job's current try (1 for the first; ``jobservice.jobs.retries``)."""
    return len(retries.tries_of(job)) + 1


def record_of(job: Job) -> dict[str, Any] | None:
    """The preview record of the job's current run, or None (not running, or none written yet)."""
    if JobStatus(job.status) != JobStatus.RUNNING:
        return None
    record = (job.timings or {}).get(KEY)
    if not isinstance(record, dict):
        return None
    if record.get("attempt") != job.attempts or record.get("try") != current_try(job):
        return None  # left by an earlier attempt or try
    return record


def preview_of(job: Job) -> PreviewView | None:
    """The view of the job's preview (None: queued or ended)."""
    if JobStatus(job.status) != JobStatus.RUNNING:
        return None
    record = record_of(job)
    if record is None:
        return PreviewView(state="waiting")
    state = record.get("state")
    if state == "none":
        return PreviewView(state="none", message=str(record.get("message") or NO_PREVIEW_BACKEND))
    if state != "ready":
        return PreviewView(state="waiting")
    return PreviewView(
        state="ready",
        number=int(record["number"]),
        frames=record.get("frames"),
        seconds=record.get("seconds"),
        published_at=record.get("published_at"),
        message=NOT_VALIDATED,
    )


def preview_number(job: Job) -> int:
    """The number of the job's latest preview (0: none yet), for live events."""
    record = record_of(job)
    return int(record.get("number") or 0) if record is not None and record.get("state") == "ready" else 0


def preview_key(job: Job, number: int | None = None) -> str | None:
    """The object key of the job's latest preview, or of preview ``number`` while it is still stored
    (the latest and the two before it, ``KEPT``); None when there is no such one."""
    record = record_of(job)
    if record is None or record.get("state") != "ready":
        return None
    latest = int(record["number"])
    key = str(record["key"])
    if number is None or number == latest:
        return key
    if max(0, latest - KEPT) < number < latest:
        return key.rsplit("/", 1)[0] + f"/preview-{number}.mp4"
    return None


def without_preview(timings: dict[str, Any] | None) -> dict[str, Any]:
    """The row's timings as a job view shows them (the preview record is shown as ``preview``)."""
    return {k: v for k, v in (timings or {}).items() if k != KEY}
