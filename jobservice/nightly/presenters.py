"""How a batch looks from outside while it runs and after: the summary of ``GET /batches/<id>``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, defer

from jobservice.db.tables import Batch, Job, JobStatus
from jobservice.errors import Invalid
from jobservice.nightly.compare import false_alarm_sentence
from jobservice.nightly.service import BATCH_STATUSES
from jobservice.nightly.slots import latest_slots, plan_of, slots
from jobservice.nightly.states import BatchStatus
from jobservice.nightly.views import BatchView, CaseView, EpisodeView, Progress


@dataclass
class _Tally:
    """The newest job of each slot, counted by status, with the summed progress."""

    counts: dict[str, int] = field(default_factory=dict)
    progress: float = 0.0

    def add(self, status: str, number: int, progress: float) -> None:
        self.counts[status] = self.counts.get(status, 0) + number
        # an ended job counts as done, whatever progress it reported last
        self.progress += float(number) if JobStatus(status).is_terminal else progress


def batch_view(session: Session, batch: Batch) -> BatchView:
    """Summarise ``batch``: its jobs' progress, and once finished, each case's verdict."""
    jobs = latest_slots(session, batch.id)
    tally = _Tally()
    for job in jobs.values():
        tally.add(str(job.status), 1, float(job.progress or 0))
    comparison = (batch.results or {}).get("comparison") or {}
    verdicts = {c["case"]: c for c in comparison.get("cases") or []}
    own = {c["name"]: c for c in (batch.results or {}).get("cases") or []}
    by_case: dict[str, list[Any]] = {}
    for (name, _), job in sorted(jobs.items()):
        by_case.setdefault(name, []).append(job)
    cases = []
    for case in (batch.spec or {}).get("cases") or []:
        mine = by_case.get(case["name"], [])
        statuses: dict[str, int] = {}
        for job in mine:
            statuses[str(job.status)] = statuses.get(str(job.status), 0) + 1
        judged = verdicts.get(case["name"]) or {}
        result = own.get(case["name"]) or {}
        primary: dict[str, Any] = next((m for m in judged.get("metrics") or [] if m.get("primary")), {})
        verdict = judged.get("verdict") or ("failed" if result.get("status") == "failed" else None)
        reasons = judged.get("reasons") or [
            e["message"] for e in result.get("expectations") or [] if not e.get("passed")
        ]
        cases.append(
            CaseView(
                name=case["name"],
                model=case["model"],
                repeat=int(case["repeat"]),
                statuses=statuses,
                verdict=verdict,
                reasons=reasons,
                primary=judged.get("primary"),
                change=primary.get("change"),
                upper=primary.get("upper"),
                others=judged.get("others") or [],
                jobs=[str(j.id) for j in mine],
            )
        )
    return _view(batch, tally, cases)


def list_views(session: Session, batches: list[Batch]) -> list[BatchView]:
    """The summaries of a list of batches, without cases: one grouped query for all their jobs."""
    tallies = _tallies(session, [b.id for b in batches])
    return [_view(b, tallies.get(b.id) or _Tally(), []) for b in batches]


def _tallies(session: Session, batch_ids: list[uuid.UUID]) -> dict[uuid.UUID, _Tally]:
    """Per batch, its slots' newest jobs by status (retried slots count once, as in latest_jobs)."""
    if not batch_ids:
        return {}
    newest = func.row_number().over(
        partition_by=(Job.batch_id, Job.batch_case, Job.batch_repeat),
        order_by=(Job.created_at.desc(), Job.id.desc()),
    )
    ranked = (
        select(Job.batch_id, Job.status, Job.progress, newest.label("rank"))
        .where(Job.batch_id.in_(batch_ids))
        .subquery()
    )
    rows = session.execute(
        select(
            ranked.c.batch_id, ranked.c.status, func.count(), func.sum(func.coalesce(ranked.c.progress, 0.0))
        )
        .where(ranked.c.rank == 1)
        .group_by(ranked.c.batch_id, ranked.c.status)
    )
    tallies: dict[uuid.UUID, _Tally] = {}
    for batch_id, status, number, progress in rows:
        tallies.setdefault(batch_id, _Tally()).add(str(status), int(number), float(progress or 0))
    return tallies


def _view(batch: Batch, tally: _Tally, cases: list[CaseView]) -> BatchView:
    total = len(slots(batch.spec or {}, plan_of(batch))) or batch.total_jobs
    comparison = (batch.results or {}).get("comparison") or {}
    links = {"self": f"/batches/{batch.id}", "jobs": f"/batches/{batch.id}/jobs"}
    if batch.status == BatchStatus.FINISHED:
        links.update(report=f"/batches/{batch.id}/report", page=f"/ui/batches/{batch.id}")
        links.update(accept=f"/batches/{batch.id}/pin")  # accept this run as the new normal
    return BatchView(
        id=str(batch.id),
        name=batch.name,
        status=batch.status,
        verdict=batch.verdict,
        error=batch.error,
        source=batch.source,
        origin=batch.origin,
        spec_digest=batch.spec_digest,
        pinned=batch.pinned,
        baseline_id=str(batch.baseline_id) if batch.baseline_id else None,
        created_at=batch.created_at,
        submitted_at=batch.submitted_at,
        finished_at=batch.finished_at,
        progress=Progress(
            total=total,
            created=sum(tally.counts.values()),
            fraction=round(tally.progress / total, 4) if total else 1.0,
            **tally.counts,
        ),
        counts={k: v for k, v in (comparison.get("counts") or {}).items() if v},
        risk=false_alarm_sentence(comparison) if comparison else None,
        episodes=[EpisodeView.model_validate(e) for e in comparison.get("episodes") or []],
        cases=cases,
        environment_changes=list((batch.environment or {}).get("changes") or []),
        links=links,
    )


def list_batches(
    session: Session,
    *,
    name: str | None = None,
    status: str | None = None,
    limit: int = 20,
    tenant: str | None = None,
) -> list[Batch]:
    """Batches newest first, optionally of one spec name or status (``tenant``: only its own)."""
    if status is not None and status not in BATCH_STATUSES:
        raise Invalid(
            "invalid_status", f"Unknown batch status '{status}'; use one of {', '.join(BATCH_STATUSES)}."
        )
    query = select(Batch).options(defer(Batch.spec_text))  # the YAML as sent: never listed
    if tenant is not None:
        query = query.where(Batch.tenant == tenant)
    if name:
        query = query.where(Batch.name == name)
    if status:
        query = query.where(Batch.status == status)
    return list(session.scalars(query.order_by(Batch.created_at.desc(), Batch.id.desc()).limit(limit)))


def spec_names(session: Session, tenant: str | None = None) -> list[str]:
    """The name of every spec that has run, sorted (the list page's filter; ``tenant``: its own)."""
    query = select(Batch.name).distinct().order_by(Batch.name)
    if tenant is not None:
        query = query.where(Batch.tenant == tenant)
    return list(session.scalars(query))


def history(session: Session, batch: Batch, *, limit: int) -> list[Batch]:
    """The finished runs of ``batch``'s spec up to and including it, oldest first (trend charts)."""
    rows = session.scalars(
        select(Batch)
        .where(
            Batch.name == batch.name,
            Batch.tenant == batch.tenant,
            Batch.status == BatchStatus.FINISHED,
            Batch.created_at <= batch.created_at,
        )
        .order_by(Batch.created_at.desc())
        .limit(limit)
    )
    return list(reversed(list(rows)))


def batch_jobs(session: Session, batch_id: uuid.UUID) -> list[Job]:
    """Every job of a batch (retries included), in creation order."""
    return list(session.scalars(select(Job).where(Job.batch_id == batch_id).order_by(Job.created_at, Job.id)))
