"""Moving the files of nightly batches made before 0.2.0 into their job group's home.

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
from typing import Any

from sqlalchemy import select

from jobservice.db.engine import Database
from jobservice.db.tables import Batch, Job
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
