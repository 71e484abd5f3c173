"""The batch state machine: the only code that changes a batch's status.

Like ``jobservice.jobs.transitions`` for jobs, every move is a compare-and-swap ``UPDATE ... WHERE id = ? AND
status IN (...)``: the beat's tick, an API request and a CLI may race to finish, cancel or resume
the same batch, and only one of them moves it. Each function returns whether it made the move
(False: the batch was not in a state that move starts from; someone else moved it first).

    creating ──all slots submitted──> running ──last job ended──> finished
        │                               │  └──resume (a job was canceled)──> creating
        └───────────cancel──────────────┴──> canceled ──resume──> creating
"""

from __future__ import annotations

import enum
import uuid
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from jobservice.db.tables import Batch, utcnow
from jobservice.nightly.webhook_events import on_batch_move


class BatchStatus(enum.StrEnum):
    """Where a batch is in its life."""

    CREATING = "creating"  # its jobs are being queued (resumable if that stopped)
    RUNNING = "running"  # every job is queued; finished once the last one ends
    FINISHED = "finished"  # results, comparison and verdict recorded
    CANCELED = "canceled"  # stopped by someone, or abandoned (``Batch.error`` says why)

    @property
    def is_ended(self) -> bool:
        """True once nothing more happens to the batch unless someone resumes it."""
        return self in (BatchStatus.FINISHED, BatchStatus.CANCELED)


ALLOWED: dict[BatchStatus, frozenset[BatchStatus]] = {
    BatchStatus.CREATING: frozenset({BatchStatus.RUNNING, BatchStatus.CANCELED}),
    BatchStatus.RUNNING: frozenset({BatchStatus.FINISHED, BatchStatus.CANCELED, BatchStatus.CREATING}),
    BatchStatus.FINISHED: frozenset(),
    BatchStatus.CANCELED: frozenset({BatchStatus.CREATING}),
}


def _cas(
    session: Session,
    batch_id: uuid.UUID,
    *,
    sources: frozenset[BatchStatus],
    target: BatchStatus,
    values: dict[str, Any] | None = None,
) -> bool:
    for source in sources:
        assert target in ALLOWED[source] or source == target, f"{source} -> {target} is not a batch move"
    result = session.execute(
        update(Batch)
        .where(Batch.id == batch_id, Batch.status.in_([s.value for s in sources]))
        .values(status=target.value, updated_at=utcnow(), **(values or {}))
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def still_creating(session: Session, batch_id: uuid.UUID) -> bool:
    """Show that creation is alive (the tick resumes stale ones); False once it was canceled."""
    return _cas(session, batch_id, sources=frozenset({BatchStatus.CREATING}), target=BatchStatus.CREATING)


def still_running(session: Session, batch_id: uuid.UUID) -> bool:
    """Show that a running batch still is while runs are added to it; False once it was canceled."""
    return _cas(session, batch_id, sources=frozenset({BatchStatus.RUNNING}), target=BatchStatus.RUNNING)


def record_plan(session: Session, batch_id: uuid.UUID, plan: dict[str, Any]) -> bool:
    """Keep the runs a running batch adds before it is judged (jobservice/nightly/looks.py) in its
    ``results`` (``plan``), so that finishing, resuming and progress count them."""
    return _cas(
        session,
        batch_id,
        sources=frozenset({BatchStatus.RUNNING}),
        target=BatchStatus.RUNNING,
        values={"results": {"plan": plan}},
    )


def mark_running(session: Session, batch_id: uuid.UUID) -> bool:
    """Every slot has a job: the batch waits for them to end."""
    moved = _cas(
        session,
        batch_id,
        sources=frozenset({BatchStatus.CREATING}),
        target=BatchStatus.RUNNING,
        values={"submitted_at": utcnow()},
    )
    if moved:
        on_batch_move(session, batch_id, kind="start")  # the webhook outbox, same transaction
    return moved


def mark_finished(
    session: Session,
    batch_id: uuid.UUID,
    *,
    verdict: str,
    results: dict[str, Any],
    environment: dict[str, Any],
    baseline_id: uuid.UUID | None,
    error: str | None = None,
) -> bool:
    """Record a running batch's outcome, once (the tick, the API and the CLI may all try)."""
    moved = _cas(
        session,
        batch_id,
        sources=frozenset({BatchStatus.RUNNING}),
        target=BatchStatus.FINISHED,
        values={
            "verdict": verdict,
            "results": results,
            "environment": environment,
            "baseline_id": baseline_id,
            "error": error,
            "finished_at": utcnow(),
        },
    )
    if moved:
        on_batch_move(session, batch_id, kind="completed")
    return moved


def mark_canceled(session: Session, batch_id: uuid.UUID, *, error: str | None = None) -> bool:
    """Stop a batch that has not finished; ``error`` says why when nobody asked for it."""
    moved = _cas(
        session,
        batch_id,
        sources=frozenset({BatchStatus.CREATING, BatchStatus.RUNNING}),
        target=BatchStatus.CANCELED,
        values={"finished_at": utcnow(), "error": error},
    )
    if moved:
        on_batch_move(session, batch_id, kind="completed")
    return moved


def reopen(session: Session, batch_id: uuid.UUID) -> bool:
    """Resume: a canceled or running batch goes back to creating, to queue its missing slots."""
    return _cas(
        session,
        batch_id,
        sources=frozenset({BatchStatus.CANCELED, BatchStatus.RUNNING}),
        target=BatchStatus.CREATING,
        values={"finished_at": None, "error": None},
    )
