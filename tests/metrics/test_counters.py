"""Counters derived from the jobs table: each job counted once, late rows not skipped, index ranges only."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text

from jobservice.db.engine import Database
from jobservice.db.tables import utcnow
from jobservice.jobs.leases import Owner
from jobservice.jobs.transitions import claim_job, mark_canceled, mark_failed, mark_succeeded
from jobservice.metrics import counters
from jobservice.metrics.counters import FINISHED, QC_FAILURES, STAGE_SECONDS, SUBMITTED, label_key
from tests.factories import new_job, sqlite_copy

TIMINGS = {
    "queue_wait_ms": 120.0,
    "load_ms": 900.0,
    "generate_ms": 2500.0,
    "encode_ms": 40.0,
    "total_ms": 3600.0,
}


def _run(db: Database, job_id: uuid.UUID) -> Owner:
    with db.session() as s:
        job = claim_job(s, job_id, worker_id="w1", lease_seconds=30)
        assert job is not None
    return Owner("w1", 1)


def succeed(db: Database, model: str = "reference-t2v") -> uuid.UUID:
    job_id = new_job(db, model=model)
    owner = _run(db, job_id)
    with db.session() as s:
        mark_succeeded(
            s,
            job_id,
            owner=owner,
            output_key="o",
            report_key="r",
            verdict="passed",
            timings=TIMINGS,
            validation_summary={"failed_checks": []},
            cold_start=False,
        )
    return job_id


def fail_gate(db: Database, checks: list[str]) -> uuid.UUID:
    job_id = new_job(db)
    owner = _run(db, job_id)
    with db.session() as s:
        mark_failed(
            s,
            job_id,
            code="validation_failed",
            message="bad",
            owner=owner,
            verdict="failed",
            timings={"generate_ms": 10.0},
            validation_summary={"failed_checks": checks},
        )
    return job_id


def advance(db: Database, settle: float = 0.0) -> counters.Totals:
    with db.session() as s:
        return counters.advance(s, until=utcnow() - timedelta(seconds=settle))


def value(totals: counters.Totals, name: str, **labels: str) -> float:
    return totals.rows.get((name, label_key(labels)), 0.0)


def test_each_finished_job_is_counted_once(migrated_sqlite: Path, tmp_path: Path) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    succeed(db)
    succeed(db)
    fail_gate(db, ["black", "freeze"])
    queued = new_job(db, model="reference-talking-head")
    with db.session() as s:
        mark_canceled(s, queued, from_statuses=frozenset({"queued"}), detail="by test")  # type: ignore[arg-type]

    first = advance(db)
    second = advance(db)  # nothing new: the totals stay
    assert first.rows == second.rows
    assert first.advanced_jobs == 4 and second.advanced_jobs == 0
    t2v = {"model": "reference-t2v"}
    assert value(first, SUBMITTED, **t2v, source="api") == 3
    assert value(first, SUBMITTED, model="reference-talking-head", source="api") == 1
    assert value(first, FINISHED, **t2v, status="succeeded", error_code="") == 2
    assert value(first, FINISHED, **t2v, status="failed", error_code="validation_failed") == 1
    assert (
        value(first, FINISHED, model="reference-talking-head", status="canceled", error_code="canceled") == 1
    )
    assert value(first, QC_FAILURES, **t2v, check="black") == 1
    assert value(first, QC_FAILURES, **t2v, check="freeze") == 1
    # Histograms: one observation per job that reported the stage, cumulative buckets.
    gen = {"model": "reference-t2v", "stage": "generate"}
    assert value(first, STAGE_SECONDS + "_count", **gen) == 3
    assert value(first, STAGE_SECONDS + "_sum", **gen) == 2.5 + 2.5 + 0.01
    assert value(first, STAGE_SECONDS + "_bucket", **gen, le="0.05") == 1
    assert value(first, STAGE_SECONDS + "_bucket", **gen, le="2.5") == 3
    assert value(first, STAGE_SECONDS + "_bucket", **gen, le="+Inf") == 3
    assert value(first, STAGE_SECONDS + "_count", model="reference-t2v", stage="load") == 2
    assert value(first, STAGE_SECONDS + "_count", model="reference-t2v", stage="end_to_end") == 3

    succeed(db)
    third = advance(db)
    assert third.advanced_jobs == 1
    assert value(third, FINISHED, **t2v, status="succeeded", error_code="") == 3
    assert value(third, SUBMITTED, **t2v, source="api") == 4


def test_a_job_inside_the_settle_window_is_counted_later_not_never(
    migrated_sqlite: Path, tmp_path: Path
) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    succeed(db)
    early = advance(db, settle=60)  # the job finished under a minute ago: not yet
    assert value(early, FINISHED, model="reference-t2v", status="succeeded", error_code="") == 0
    later = advance(db, settle=0)
    assert value(later, FINISHED, model="reference-t2v", status="succeeded", error_code="") == 1


def test_the_migration_starts_counting_at_the_upgrade(migrated_sqlite: Path, tmp_path: Path) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    with db.session() as s:
        totals = counters.read_totals(s)
    assert totals.rows == {} and totals.counted_until > utcnow() - timedelta(days=365)


def test_windows_are_index_ranges_not_full_scans(migrated_sqlite: Path, tmp_path: Path) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    with db.engine.connect() as conn:
        finished = conn.execute(
            text(
                "EXPLAIN QUERY PLAN SELECT model, status FROM jobs WHERE finished_at > :a AND finished_at <= :b"
            ),
            {"a": "2026-01-01", "b": "2026-01-02"},
        ).all()
        created = conn.execute(
            text(
                "EXPLAIN QUERY PLAN SELECT model, source, count(*) FROM jobs "
                "WHERE created_at > :a AND created_at <= :b GROUP BY model, source"
            ),
            {"a": "2026-01-01", "b": "2026-01-02"},
        ).all()
    assert any("ix_jobs_finished_at" in str(row) for row in finished), finished
    assert any("ix_jobs_created_at_id" in str(row) for row in created), created


def test_after_a_long_pause_each_advance_catches_up_an_hour(migrated_sqlite: Path, tmp_path: Path) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    succeed(db)
    start = utcnow() - timedelta(hours=2, minutes=30)
    with db.session() as s:
        s.execute(text("UPDATE job_counter_marks SET counted_until = :t"), {"t": start.replace(tzinfo=None)})
    steps = [advance(db) for _ in range(3)]
    assert [round((t.counted_until - start).total_seconds() / 3600, 2) for t in steps[:2]] == [1.0, 2.0]
    assert steps[1].advanced_jobs == 0 and steps[2].advanced_jobs == 1
