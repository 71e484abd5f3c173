"""``jobservice check``: does the jobs table agree with the object store, and who holds the leases.

Run it after restoring a backup (the database from last night's dump, the store with today's
files), after an outage of either, or whenever in doubt. It reads; ``repair`` changes. Findings:

- **orphans**: ``jobs/<id>/``, ``batches/<id>/``, ``groups/<id>/`` and ``uploads/<id>/`` prefixes
  with objects but no row: what a restored database no longer knows, or a failed submission's
  leftovers. A prefix written less than ``min_age`` ago may be a submission in flight (its inputs
  are stored before its row is committed): it is listed as ``young`` and never repaired.
- **missing**: a job whose files were not expired by retention, but whose output, report or an
  input named by its row is not in the store.
- **corrupt** (``deep`` only: it reads every succeeded job's report and video): a video whose
  size or sha256 differs from what its RunReport recorded.
- **leases**: running jobs whose lease ran out (their worker stopped heartbeating), and running
  jobs whose worker is not online although their lease is still good (told, never touched: a
  worker that heartbeats is alive, whatever its presence row says).

``repair`` does what the service itself would do, now instead of later, and nothing else: it
deletes orphan prefixes older than ``min_age`` (the maintenance sweep deletes row-less prefixes
an hour old), marks the finished jobs with missing files expired (the row stays and the API says
the files are gone, as retention does), and runs one upkeep round, as every worker runs it (the
reaper requeues a run whose lease ran out, or fails it once its attempts are used up). A queued
job with a missing input is left to fail when it runs, with the missing input named; a corrupt
video is reported, not changed: nothing here can restore it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from jobservice.db.tables import TERMINAL_STATUSES, Job, JobStatus, utcnow
from jobservice.fleet.presence import online_workers, stale_after
from jobservice.jobs.upkeep import Upkeep
from jobservice.retention.orphans import STORE_TOPS, Prefix, store_prefixes, without_rows
from jobservice.retention.sweep import mark_expired
from jobservice.storage import ObjectNotFound
from jobservice.wiring import Services

log = logging.getLogger(__name__)

MIN_AGE = timedelta(minutes=10)  # a row-less prefix younger than this may be a submission in flight


@dataclass
class ConsistencyFindings:
    """What one check found (and, after a repair, what it did)."""

    orphans: list[dict[str, Any]] = field(default_factory=list)  # prefix, objects, bytes, newest, young
    missing: list[dict[str, Any]] = field(default_factory=list)  # job, status, keys
    corrupt: list[dict[str, Any]] = field(default_factory=list)  # job, key, why
    expired_leases: list[dict[str, Any]] = field(default_factory=list)  # job, worker, lease_expires_at
    unknown_holders: list[dict[str, Any]] = field(default_factory=list)  # job, worker (lease still good)
    deep: bool = False
    repaired: dict[str, list[str]] = field(default_factory=dict)

    @property
    def consistent(self) -> bool:
        """Nothing found that a repair could settle or that needs a person."""
        return not (self.orphans or self.missing or self.corrupt or self.expired_leases)

    def plan(self) -> list[str]:
        """What ``repair`` would do, one line per action."""
        lines = [
            f"delete orphan prefix {o['prefix']} ({o['objects']} objects, {o['bytes']:,} bytes)"
            for o in self.orphans
            if not o["young"]
        ]
        lines += [
            f"mark job {m['job']} expired: {', '.join(m['keys'])} missing"
            for m in self.missing
            if m["status"] in {s.value for s in TERMINAL_STATUSES}
        ]
        lines += [
            f"hand job {lease['job']} back (lease of {lease['worker']} ran out)"
            for lease in self.expired_leases
        ]
        return lines

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, with ``consistent``."""
        return {**asdict(self), "consistent": self.consistent}


def check(services: Services, *, deep: bool = False, min_age: timedelta = MIN_AGE) -> ConsistencyFindings:
    """Compare the jobs table with the object store (see the module docstring)."""
    now = utcnow()
    found = ConsistencyFindings(deep=deep)
    listed: dict[str, dict[uuid.UUID, Prefix]] = {}
    for top, table in STORE_TOPS:
        listed[top] = store_prefixes(services, top)
        for prefix in without_rows(services, table, listed[top]):
            young = prefix.newest is None or now - prefix.newest < min_age
            newest = prefix.newest.isoformat() if prefix.newest else None
            found.orphans.append(
                {
                    "prefix": prefix.prefix,
                    "objects": prefix.objects,
                    "bytes": prefix.bytes,
                    "newest": newest,
                    "young": young,
                }
            )
    found.orphans.sort(key=lambda o: o["prefix"])
    stored = {key for prefixes in listed.values() for p in prefixes.values() for key in p.keys}
    _missing_files(services, stored, found)
    if deep:
        _corrupt_videos(services, found)
    _leases(services, now, found)
    return found


def _referenced(job: Any) -> list[str]:
    keys = [job.output_key, job.report_key, *(job.input_keys or {}).values()]
    return [k for k in keys if isinstance(k, str) and k]


def _missing_files(services: Services, stored: set[str], found: ConsistencyFindings) -> None:
    query = (
        select(Job.id, Job.status, Job.output_key, Job.report_key, Job.input_keys)
        .where(Job.expired_at.is_(None))
        .order_by(Job.created_at, Job.id)
    )
    with services.db.session() as session:
        for job in session.execute(query.execution_options(yield_per=500)):
            gone = []
            for key in _referenced(job):
                if key in stored:
                    continue
                if key.startswith(tuple(top for top, _ in STORE_TOPS)) or not services.store.exists(key):
                    gone.append(key)
            if gone:
                status = JobStatus(job.status).value
                found.missing.append({"job": str(job.id), "status": status, "keys": gone})


def _corrupt_videos(services: Services, found: ConsistencyFindings) -> None:
    query = select(Job.id, Job.output_key, Job.report_key).where(
        Job.status == JobStatus.SUCCEEDED, Job.expired_at.is_(None), Job.output_key.is_not(None)
    )
    with services.db.session() as session:
        rows = list(session.execute(query.order_by(Job.created_at, Job.id)))
    missing = {m["job"] for m in found.missing}
    for row in rows:
        if str(row.id) in missing or not row.report_key:
            continue
        try:
            report = json.loads(services.store.get_bytes(row.report_key))
        except (ObjectNotFound, ValueError) as exc:
            found.corrupt.append(
                {"job": str(row.id), "key": row.report_key, "why": f"unreadable report: {exc}"}
            )
            continue
        video = next((a for a in report.get("artifacts") or [] if a.get("key") == row.output_key), None)
        if video is None or not video.get("sha256"):
            continue  # a report from before artifacts carried checksums: nothing to compare with
        digest, size = hashlib.sha256(), 0
        for chunk in services.store.open_range(row.output_key):
            digest.update(chunk)
            size += len(chunk)
        if video.get("size_bytes") is not None and size != video["size_bytes"]:
            why = f"{size:,} bytes, the report says {video['size_bytes']:,}"
        elif digest.hexdigest() != video["sha256"]:
            why = "its sha256 differs from the report's"
        else:
            continue
        found.corrupt.append({"job": str(row.id), "key": row.output_key, "why": why})


def _leases(services: Services, now: datetime, found: ConsistencyFindings) -> None:
    with services.db.session() as session:
        online = {w.id for w in online_workers(session, stale_after_seconds=stale_after(services.settings))}
        running = session.execute(
            select(Job.id, Job.worker_id, Job.lease_expires_at).where(Job.status == JobStatus.RUNNING)
        )
        for job in running:
            entry = {"job": str(job.id), "worker": job.worker_id or "?"}
            if job.lease_expires_at is None or job.lease_expires_at < now:
                at = job.lease_expires_at.isoformat() if job.lease_expires_at else None
                found.expired_leases.append({**entry, "lease_expires_at": at})
            elif job.worker_id not in online:
                found.unknown_holders.append(entry)


def repair(services: Services, found: ConsistencyFindings) -> ConsistencyFindings:
    """Carry out ``found.plan()``; what was done is in ``found.repaired``."""
    done: dict[str, list[str]] = {"deleted": [], "expired": [], "leases": [], "failed": []}
    for orphan in found.orphans:
        if orphan["young"]:
            continue
        try:
            services.store.delete_prefix(orphan["prefix"])
            done["deleted"].append(orphan["prefix"])
        except Exception as exc:  # noqa: BLE001 - reported; the rest goes on
            done["failed"].append(f"{orphan['prefix']}: {exc}")
    terminal = {s.value for s in TERMINAL_STATUSES}
    for item in found.missing:
        if item["status"] not in terminal:
            continue
        with services.db.session() as session:
            if mark_expired(session, uuid.UUID(item["job"]), at=utcnow()):
                done["expired"].append(item["job"])
    if found.expired_leases:  # one upkeep round, as every worker runs it (and ``jobservice reap``)
        result = Upkeep(services).run_once()
        done["leases"] = [*result.requeued, *result.failed, *result.canceled]
    log.info("check --repair: %s", {k: len(v) for k, v in done.items()})
    found.repaired = done
    return found
