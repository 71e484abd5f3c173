"""Accepting a run as the new normal: a finished batch pinned as THE baseline of its spec.

A pin restarts the history its later runs are compared with (``jobservice.nightly.history``); at
most one batch of a spec (by name, in a tenant) is pinned.
"""

from __future__ import annotations

import uuid

from sqlalchemy import update

from jobservice.db.tables import Batch
from jobservice.errors import Conflict
from jobservice.nightly.service import get_batch
from jobservice.nightly.slots import has_finished_cases
from jobservice.nightly.states import BatchStatus
from jobservice.wiring import Services


def pin_batch(services: Services, batch_id: uuid.UUID, *, pinned: bool) -> Batch:
    """Make a finished batch THE baseline of its spec (unpinning any other), or unpin it."""
    with services.db.session() as session:
        batch = get_batch(session, batch_id)
        if pinned and batch.status != BatchStatus.FINISHED:
            raise Conflict("batch_not_finished", f"Batch {batch.id} is {batch.status}; pin a finished one.")
        if pinned and not has_finished_cases(batch):
            raise Conflict(
                "batch_empty", f"Batch {batch.id} has no case with a finished run to compare with."
            )
        if pinned:
            session.execute(
                update(Batch)
                .where(Batch.name == batch.name, Batch.tenant == batch.tenant)
                .values(pinned=False)
            )
        session.execute(update(Batch).where(Batch.id == batch_id).values(pinned=pinned))
    with services.db.session() as session:
        return get_batch(session, batch_id)
