"""The batch state machine: the only code that changes a batch's status.

Like ``jobservice.jobs.transitions`` for jobs, every move is a compare-and-swap ``UPDATE ... WHERE id = ? AND
status IN (...)``: the beat's tick, an API request and a CLI may race to finish, cancel or resume
the same batch, and only one of them moves it. Each function returns whether it made the move
(False: the batch was not in a state that move starts from; someone else moved it first).

    (created with all its jobs) running ──last job ended──> finished
                                   │  ^
                              cancel  resume (queues the slots whose job was canceled)
                                   v  │
                                 canceled
"""

from __future__ import annotations

import enum
import uuid
from typing import Any

from sqlalchemy.orm import Session

from jobservice.db.rows import update_one
from jobservice.db.tables import Batch, utcnow
from jobservice.jobs.webhook_events import on_set_move
from jobservice.nightly.webhook_events import on_batch_move


class BatchStatus(enum.StrEnum):
    """Where a batch is in its life."""

    RUNNING = "running"  # created with every job queued; finished once the last one ends
    FINISHED = "finished"  # results, comparison and verdict recorded
    CANCELED = "canceled"  # stopped by someone, or abandoned (``Batch.error`` says why)

    @property
    def is_ended(self) -> bool:
        """True once nothing more happens to the batch unless someone resumes it."""
        return self in (BatchStatus.FINISHED, BatchStatus.CANCELED)


ALLOWED: dict[BatchStatus, frozenset[BatchStatus]] = {
    BatchStatus.RUNNING: frozenset({BatchStatus.FINISHED, BatchStatus.CANCELED}),
    BatchStatus.FINISHED: frozenset(),
    BatchStatus.CANCELED: frozenset({BatchStatus.RUNNING}),
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
    expected = (Batch.id == batch_id, Batch.status.in_([s.value for s in sources]))
    return update_one(session, Batch, *expected, status=target.value, updated_at=utcnow(), **(values or {}))


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
        on_set_move(session, batch_id, kind="completed")
    return moved


def mark_canceled(session: Session, batch_id: uuid.UUID, *, error: str | None = None) -> bool:
    """Stop a batch that has not finished; ``error`` says why when nobody asked for it."""
    moved = _cas(
        session,
        batch_id,
        sources=frozenset({BatchStatus.RUNNING}),
        target=BatchStatus.CANCELED,
        values={"finished_at": utcnow(), "error": error},
    )
    if moved:
        on_batch_move(session, batch_id, kind="completed")  # group.completed: once its jobs ended
    return moved


def reopen(session: Session, batch_id: uuid.UUID) -> bool:
    """Resume: a canceled or running batch runs (again), its missing slots queued in the same
    transaction (``jobservice.nightly.service.resume_batch``)."""
    return _cas(
        session,
        batch_id,
        sources=frozenset({BatchStatus.CANCELED, BatchStatus.RUNNING}),
        target=BatchStatus.RUNNING,
        values={"finished_at": None, "error": None},
    )
