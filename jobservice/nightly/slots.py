"""The runs a nightly spec asks for: one job per case and repeat, and the rows that queue them.

A slot is a (case, repeat); its job's idempotency key is ``batch:<id>:<case>:<repeat>`` (``:<n>``
appended for the n-th re-run of a slot whose job was canceled), so a slot never has two live jobs.
Repeats are interleaved (every case's first run, then every case's second...) so that slow drift
of the machine spreads over all cases instead of biasing one. The rows are built here and
recorded by the job group's one creation path (``jobservice.groups.service``).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from jobservice.auth.principal import Principal
from jobservice.db.tables import Batch, Job, JobStatus
from jobservice.groups.plan import PlannedJob
from jobservice.groups.service import job_rows
from jobservice.jobs.idempotency import scoped_key
from jobservice.jobs.submit import Submission, check_submission
from jobservice.media.uploads import stored_upload
from jobservice.nightly.looks import case_plan
from jobservice.quotas.limits import recent_limits
from jobservice.wiring import Services

JOB_SOURCE = "batch"


def latest_jobs(session: Session, batch_id: uuid.UUID) -> dict[tuple[str, int], Job]:
    """The newest job of each (case, repeat) slot of a batch."""
    rows = session.scalars(select(Job).where(Job.batch_id == batch_id).order_by(Job.created_at, Job.id))
    return {(str(job.batch_case), int(job.batch_repeat or 0)): job for job in rows}


def latest_slots(session: Session, batch_id: uuid.UUID) -> dict[tuple[str, int], Any]:
    """``latest_jobs`` as (id, status, progress) rows: what a batch's view needs of 10,000 jobs,
    without loading them whole."""
    rows = session.execute(
        select(Job.id, Job.status, Job.progress, Job.batch_case, Job.batch_repeat)
        .where(Job.batch_id == batch_id)
        .order_by(Job.created_at, Job.id)
    )
    return {(str(row.batch_case), int(row.batch_repeat or 0)): row for row in rows}


def slots(spec: dict[str, Any], plan: dict[str, Any] | None = None) -> list[tuple[dict[str, Any], int]]:
    """Every (case, repeat) of a resolved spec, repeats interleaved across cases; ``plan`` (the
    batch's ``results["plan"]``, jobservice/nightly/looks.py) adds the runs a night added."""
    cases = spec.get("cases") or []
    counts = [case_plan(plan or {}, case).runs for case in cases]
    rounds = max(counts, default=0)
    return [(case, r) for r in range(rounds) for case, count in zip(cases, counts, strict=True) if r < count]


def plan_of(batch: Batch) -> dict[str, Any]:
    """The runs a batch added to its spec's (``looks.py``), by case; empty when none were."""
    plan = (batch.results or {}).get("plan")
    return plan if isinstance(plan, dict) else {}


def has_finished_cases(batch: Batch) -> bool:
    """Whether a finished batch has a case with a successful run: only such a batch is a baseline."""
    return any(
        run.get("status") == JobStatus.SUCCEEDED
        for case in (batch.results or {}).get("cases") or []
        for run in case.get("runs") or []
    )


def owner_of(batch: Batch) -> Principal:
    """The caller a batch's jobs are submitted as: its tenant and the key that created it."""
    return Principal(tenant=batch.tenant or "default", role="user", key_id=batch.submitted_by)


def missing_slot_jobs(services: Services, session: Session, batch: Batch, *, start: datetime) -> list[Job]:
    """New queued rows for every slot of ``batch`` that has no live job (none yet, or a canceled
    one), checked as ``POST /jobs`` checks a job; created one microsecond apart from ``start``."""
    existing = latest_jobs(session, batch.id)
    tries: dict[tuple[str, int], int] = {}
    for case_name, repeat in session.execute(
        select(Job.batch_case, Job.batch_repeat).where(Job.batch_id == batch.id)
    ).all():
        slot = (str(case_name), int(repeat or 0))
        tries[slot] = tries.get(slot, 0) + 1
    owner = owner_of(batch)
    entries: list[PlannedJob] = []
    for case, repeat in slots(batch.spec or {}, plan_of(batch)):
        job = existing.get((case["name"], repeat))
        if job is not None and job.status != JobStatus.CANCELED:
            continue
        attempt = tries.get((case["name"], repeat), 0)
        key = f"batch:{batch.id}:{case['name']}:{repeat}" + (f":{attempt}" if attempt else "")
        inputs = case.get("inputs") or {}
        sub = Submission(
            task=case["task"],
            model=case["model"],
            params=dict(case["params"]),
            # The batch's stored inputs, referred to by every job (no copy per job).
            uploads={n: stored_upload(n, Path(e["key"]), e.get("meta") or {}) for n, e in inputs.items()},
            stored_inputs={name: str(entry["key"]) for name, entry in inputs.items()},
            source=JOB_SOURCE,
            idempotency_key=scoped_key(key, owner.tenant),
            batch_id=batch.id,
            batch_case=case["name"],
            batch_repeat=repeat,
            principal=owner,
        )
        checked = check_submission(services, sub)
        if checked.problems:
            raise checked.problems[0]
        assert checked.spec is not None  # a submission without problems has a model
        entries.append(PlannedJob(sub, checked.spec, checked.params))
    limits = recent_limits(services, owner)
    return job_rows(services, entries, group_id=batch.id, start=start, limits=limits)
