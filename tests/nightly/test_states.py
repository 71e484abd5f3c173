"""The batch state machine: only the moves in ALLOWED happen, whatever order callers try them in."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from jobservice.db.tables import Batch
from jobservice.nightly.states import (
    ALLOWED,
    BatchStatus,
    mark_canceled,
    mark_finished,
    reopen,
)

pytestmark = pytest.mark.integration


def _finish(session: Session, batch_id: uuid.UUID) -> bool:
    return mark_finished(session, batch_id, verdict="passed", results={}, environment={}, baseline_id=None)


# Each move: the function, the states it starts from, and where it leads.
MOVES: dict[str, tuple[Callable[[Session, uuid.UUID], bool], set[BatchStatus], BatchStatus]] = {
    "mark_finished": (_finish, {BatchStatus.RUNNING}, BatchStatus.FINISHED),
    "mark_canceled": (mark_canceled, {BatchStatus.RUNNING}, BatchStatus.CANCELED),
    "reopen": (reopen, {BatchStatus.CANCELED, BatchStatus.RUNNING}, BatchStatus.RUNNING),
}


def test_every_move_is_in_the_table() -> None:
    for _, sources, target in MOVES.values():
        for source in sources:
            assert target == source or target in ALLOWED[source]
    assert not ALLOWED[BatchStatus.FINISHED], "a finished batch is final"
    assert [s for s in BatchStatus if s.is_ended] == [BatchStatus.FINISHED, BatchStatus.CANCELED]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(sorted(MOVES)), max_size=12))
def test_random_call_sequences_follow_the_table(bservices: Any, calls: list[str]) -> None:
    batch_id = uuid.uuid4()
    with bservices.db.session() as session:
        session.add(Batch(id=batch_id, name="s", spec_digest="d", status=BatchStatus.RUNNING.value))
    state = BatchStatus.RUNNING  # a batch is created running, with all its jobs
    for name in calls:
        move, sources, target = MOVES[name]
        with bservices.db.session() as session:
            moved = move(session, batch_id)
        assert moved == (state in sources), (name, state)
        if moved:
            state = target
        with bservices.db.session() as session:
            row = session.get(Batch, batch_id)
            assert row is not None and row.status == state
            assert (row.finished_at is not None) == state.is_ended
