"""Nightly batches made before 0.2.0: their job group, and their files moved into its home.

During a rolling upgrade an API or CLI of the previous release may still create a batch after
migration 0018 ran: ``adopt_batch`` gives such a batch its job group (as the migration does) the
first time this release cancels or grows it.

A batch made before migration 0018 keeps its shared inputs and reports under ``batches/<id>/``,
and its spec and jobs name those keys. ``move_legacy_batch_files`` copies every such object to the
same place under ``groups/<id>/`` (the one home of a set's files), then points the batch's spec and
its jobs at the copies in one transaction. The old objects are not deleted here: a worker may be
reading one right now; the retention sweep deletes ``batches/<id>/`` with ``groups/<id>/`` once
every job of the set expired (``jobservice.retention.sweep.set_prefixes``). Run by
``jobservice db upgrade``; running it again moves nothing twice.
"""

from __future__ import annotations

import copy
import logging
from collections import Counter
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from jobservice.db.engine import Database
from jobservice.db.tables import Batch, Job, JobGroup
from jobservice.storage import ObjectStore

log = logging.getLogger(__name__)


def move_legacy_batch_files(db: Database, store: ObjectStore) -> int:
    """Copy each older batch's objects under ``groups/<id>/`` and point its rows there; how many
    batches moved."""
    with db.session() as session:
        legacy = [
            batch_id
            for batch_id, spec in session.execute(select(Batch.id, Batch.spec))
            if _names_prefix(spec or {}, f"batches/{batch_id}/")
        ]
    for batch_id in legacy:
        old, new = f"batches/{batch_id}/", f"groups/{batch_id}/"
        for info in list(store.list(old)):
            target = new + info.key[len(old) :]
            if not store.exists(target):
                store.copy(info.key, target)
        with db.session() as session:
            batch = session.get(Batch, batch_id)
            assert batch is not None
            batch.spec = _renamed(batch.spec or {}, old, new)
            for job in session.scalars(select(Job).where(Job.batch_id == batch_id)):
                job.input_keys = {n: _moved(k, old, new) for n, k in (job.input_keys or {}).items()}
        log.info("batch %s: files moved from %s to %s", batch_id, old, new)
    return len(legacy)


def adopt_batch(session: Session, batch: Batch) -> None:
    """Give a batch that has no job group (made by the previous release) its group and link its
    jobs to it, in the caller's transaction; nothing for any other batch."""
    if session.get(JobGroup, batch.id) is not None:
        return
    models = Counter(session.scalars(select(Job.model).where(Job.batch_id == batch.id)))
    session.add(
        JobGroup(
            id=batch.id,
            name=batch.name,
            tenant=batch.tenant or "default",
            submitted_by=batch.submitted_by,
            source=(batch.source or "cli")[:16],
            manifest_format="spec",  # jobservice.nightly.service.SPEC_FORMAT
            manifest_sha256=batch.spec_digest,
            columns=[],
            total_jobs=sum(models.values()),
            models=dict(models.most_common()),
            created_at=batch.created_at,
            webhook_url=batch.webhook_url,
            webhook_events=batch.webhook_events,
        )
    )
    session.flush()
    session.execute(
        update(Job)
        .where(Job.batch_id == batch.id, Job.group_id.is_(None))
        .values(group_id=batch.id)
        .execution_options(synchronize_session=False)
    )
    log.info("batch %s: made by an earlier release; now a job group", batch.id)


def _moved(key: str, old: str, new: str) -> str:
    return new + key[len(old) :] if isinstance(key, str) and key.startswith(old) else key


def _names_prefix(spec: dict[str, Any], old: str) -> bool:
    return any(
        str(entry.get("key") or "").startswith(old)
        for case in spec.get("cases") or []
        for entry in (case.get("inputs") or {}).values()
    )


def _renamed(spec: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    renamed = copy.deepcopy(spec)
    for case in renamed.get("cases") or []:
        for entry in (case.get("inputs") or {}).values():
            entry["key"] = _moved(str(entry.get("key") or ""), old, new)
    return renamed
