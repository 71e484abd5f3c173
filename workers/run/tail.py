"""The run's tail: its video into the store, then its last database write, retried for as long
as the run holds its lease.

The upload is retried with backoff by the store itself (jobservice/storage/retry.py); a store
that is full, or still failing after those tries, fails the job with ``storage_full`` or
``storage_unavailable`` and nothing half-stored (the local store writes a temp file and renames
it; S3 aborts an unfinished multipart upload).

A run that has made its video must not lose it to a database restart: the final transition is
retried with backoff while the heartbeat says the lease is still ours (``Heartbeat.lease_held``),
not for a fixed number of seconds. Once the lease is gone the reaper may have handed the job to
another attempt, so the run gives up and leaves the job to it.

A commit can succeed on the server while its answer is lost with the connection; the retry then
finds the job already moved. ``already_done`` tells that apart from a job taken by someone else,
so a run never deletes the files of its own success.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session

from jobservice.catalog import ModelSpec
from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobStatus
from jobservice.jobs.transitions import InvalidTransition, Owner
from jobservice.reports.run_report import RunReport
from jobservice.storage import ObjectStore, StoreFull, StoreUnavailable
from workers.adapters.base import AdapterError, RunOutput
from workers.run.context import PipelineContext
from workers.validation import Expectation

log = logging.getLogger(__name__)

Outcome = Literal["written", "lost", "unknown"]
"""``written``: committed; ``lost``: the job is someone else's now (refused); ``unknown``: the lease
ran out while the database was away (the reaper decides; this run's files are left in place)."""

FIRST_RETRY_SECONDS = 0.25
MAX_RETRY_SECONDS = 4.0


def is_outage(exc: BaseException) -> bool:
    """Whether a database error is worth retrying (the server or the connection went away)."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def already_done(session: Session, job_id: uuid.UUID, owner: Owner, target: JobStatus) -> bool:
    """Whether the job already stands where this run's final write was taking it, by this run (a
    job queued again for a retry with the next seed lists this run's attempt among its tries)."""
    row = session.execute(
        select(Job.status, Job.worker_id, Job.attempts, Job.validation_attempts).where(Job.id == job_id)
    ).one_or_none()
    if row is None or row.status != target:
        return False
    if target == JobStatus.QUEUED:
        return any(t.get("attempt") == owner.attempt for t in row.validation_attempts or [])
    return row.worker_id == owner.worker_id and row.attempts == owner.attempt


def write_final(
    db: Database,
    transition: Callable[[Session], None],
    *,
    job_id: uuid.UUID,
    owner: Owner,
    target: JobStatus,
    lease_held: Callable[[], bool],
) -> Outcome:
    """Run ``transition`` in its own session until it commits, is refused, or the lease runs out."""
    delay = FIRST_RETRY_SECONDS
    failures = 0
    while True:
        try:
            with db.session() as session:
                transition(session)
            if failures:
                log.info("job %s: final write done after %d database failure(s)", job_id, failures)
            return "written"
        except InvalidTransition:
            if not failures:
                return "lost"
            return _done_before(db, job_id, owner, target)  # an earlier try may have committed
        except Exception as exc:
            if not is_outage(exc):
                raise
            failures += 1
            if not lease_held():
                log.error("job %s: database unavailable and the lease ran out; leaving the job", job_id)
                return "unknown"
            log.warning("job %s: database unavailable for the final write (%s); retrying", job_id, exc)
            time.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_SECONDS)


def _done_before(db: Database, job_id: uuid.UUID, owner: Owner, target: JobStatus) -> Outcome:
    try:
        with db.session() as session:
            return "written" if already_done(session, job_id, owner, target) else "lost"
    except Exception:  # noqa: BLE001 - cannot tell: keep this run's files, the reaper sorts it out
        log.warning("job %s: could not read back the final write", job_id, exc_info=True)
        return "unknown"


def store_output(store: ObjectStore, key: str, path: Path) -> None:
    """Upload the run's video; a store that cannot take it fails the job with a clear code."""
    try:
        store.put_file(key, path, content_type="video/mp4")
    except StoreFull as exc:
        raise AdapterError(
            "storage_full",
            "The object store has no room for the video, so nothing was stored; "
            "free some space and submit the job again.",
        ) from exc
    except StoreUnavailable as exc:
        raise AdapterError(
            "storage_unavailable", "The object store did not accept the video after several tries."
        ) from exc


def summary_timings(report: RunReport) -> dict[str, Any]:
    """The figures kept in the jobs table (the full breakdown is in the report)."""
    summary: dict[str, Any] = {k: v for k, v in report.timings.items() if k.endswith("_ms")}
    summary["queue_wait_ms"] = report.queue_wait_ms
    for name in ("render_fps", "rtf", "media_duration_s"):
        value = getattr(report, name)
        if value is not None:
            summary[name] = value
    if report.last_frame_at is not None:
        summary["last_frame_at"] = report.last_frame_at.isoformat()
    return summary


def expectation_of(job: Job, spec: ModelSpec, output: RunOutput, ctx: PipelineContext) -> Expectation:
    """What the output gate checks a run's video against: the adapter's format (else the context's)
    and a duration from the adapter, else the input speech, else frames / fps."""
    fmt = output.expected or ctx.format
    needs_audio = spec.task == "audio2video"
    duration: float | None = None
    if fmt is not None and fmt.expected_duration_s is not None:
        duration = fmt.expected_duration_s
    elif needs_audio:
        duration = ((job.input_meta or {}).get("audio") or {}).get("duration_s")
    elif fmt is not None:
        duration = fmt.num_frames / fmt.fps
    return Expectation(
        width=fmt.width if fmt else None,
        height=fmt.height if fmt else None,
        fps=fmt.fps if fmt else None,
        num_frames=fmt.num_frames if fmt else None,
        duration_s=duration,
        require_audio=needs_audio,
    )
