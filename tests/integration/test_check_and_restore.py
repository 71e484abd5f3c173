"""``jobservice check``: a restored database against a newer object store, files gone missing, a
tampered video and a dead lease, each found, and settled by ``--repair`` (issue 24, item 3)."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from jobservice.db.tables import Job, JobStatus, utcnow
from jobservice.storage import LocalStore
from tests.integration.conftest import Stack

pytestmark = [pytest.mark.integration]

JOB = {"model": "fake-good", "num_frames": 12}


def findings(stack: Stack, *args: str) -> tuple[int, dict[str, Any]]:
    done = stack.cli("check", "--json", *args)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout)


def run_jobs(stack: Stack, count: int) -> list[str]:
    ids = [stack.submit(JOB) for _ in range(count)]
    for job_id in ids:
        job = stack.wait(job_id)
        assert job.status == "succeeded", (job.error_code, job.error_message)
    return ids


def test_a_restored_dump_leaves_exactly_the_newer_jobs_as_orphans_and_repair_settles_them(
    prod_stack: Stack, pg_url: str, tmp_path: Path
) -> None:
    """The backup recipe of the docs: pg_dump, more jobs run, the dump restored (workers stopped):
    the newer jobs' objects are the orphans, exactly; --repair deletes them, the older jobs keep
    their videos, and the service runs on."""
    stack = prod_stack
    dsn = pg_url.replace("postgresql+psycopg://", "postgresql://")
    stack.start_worker("w1")
    kept = run_jobs(stack, 2)
    dump = tmp_path / "jobs.dump"
    subprocess.run(["pg_dump", "--format=custom", "--file", str(dump), dsn], check=True, timeout=60)
    newer = run_jobs(stack, 2)
    assert stack.cli("check").returncode == 0, "consistent before the restore"

    for worker in stack.workers:  # the restore order: stop the service, restore, check, start
        worker.stop()
    stack.services.db.dispose()
    subprocess.run(
        ["pg_restore", "--clean", "--if-exists", "--no-owner", "--dbname", dsn, str(dump)],
        check=True,
        timeout=60,
    )

    code, found = findings(stack, "--min-age", "0")
    assert code == 1 and not found["consistent"]
    assert sorted(o["prefix"] for o in found["orphans"]) == sorted(f"jobs/{j}/" for j in newer)
    assert all(o["objects"] >= 3 and not o["young"] for o in found["orphans"]), found["orphans"]
    assert found["missing"] == [] and found["expired_leases"] == []
    # By default a prefix written in the last 10 minutes may be a submission in flight: told, kept.
    young = stack.cli("check", "--repair", "--yes")
    assert young.returncode == 1 and "young: may be a submission in flight" in young.stdout
    assert "plan: nothing to repair" in young.stdout
    assert all(any(True for _ in stack.services.store.list(f"jobs/{j}/")) for j in newer)

    repaired = stack.cli("check", "--repair", "--yes", "--min-age", "0")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    for job_id in newer:
        assert f"delete orphan prefix jobs/{job_id}/" in repaired.stdout
        assert list(stack.services.store.list(f"jobs/{job_id}/")) == []
    assert repaired.stdout.strip().endswith("consistent") and "NOT" not in repaired.stdout
    for job_id in kept:
        assert stack.client.get(f"/jobs/{job_id}/video").status_code in (200, 302)
    stack.start_worker("w2")
    run_jobs(stack, 1)
    assert findings(stack)[0] == 0


def test_missing_files_a_tampered_video_and_a_dead_lease_are_found_and_settled(stack: Stack) -> None:
    """SQLite and the local store: a finished job whose video was deleted behind the service's back
    is marked expired (410, as retention would), a video changed in place is reported by --deep
    (and left alone), and a running job whose worker died is handed back and runs again."""
    stack.start_worker("w1")
    gone, tampered = run_jobs(stack, 2)
    store = stack.services.store
    assert isinstance(store, LocalStore)
    gone_row, tampered_row = stack.job(gone), stack.job(tampered)
    assert gone_row.output_key and tampered_row.output_key
    store.delete(gone_row.output_key)
    path = store.local_path(tampered_row.output_key)
    assert path is not None
    path.write_bytes(path.read_bytes()[:-16] + b"\0" * 16)  # same size, other bytes

    for worker in stack.workers:
        worker.stop()
    ghost = stack.submit(JOB)
    with stack.services.db.session() as session:  # a run whose worker died an hour ago
        session.execute(
            update(Job)
            .where(Job.id == uuid.UUID(ghost))
            .values(
                status=JobStatus.RUNNING,
                worker_id="ghost@nowhere",
                attempts=1,
                claimed_at=utcnow() - timedelta(hours=1),
                lease_expires_at=utcnow() - timedelta(minutes=59),
            )
        )

    code, found = findings(stack, "--deep")
    assert code == 1
    assert found["missing"] == [{"job": gone, "status": "succeeded", "keys": [gone_row.output_key]}]
    assert [(c["job"], c["why"]) for c in found["corrupt"]] == [
        (tampered, "its sha256 differs from the report's")
    ]
    assert [lease["job"] for lease in found["expired_leases"]] == [ghost]
    assert found["orphans"] == []

    repaired = stack.cli("check", "--repair", "--yes", "--deep")
    assert f"mark job {gone} expired" in repaired.stdout and f"hand job {ghost} back" in repaired.stdout
    assert repaired.returncode == 1, "the tampered video is still there: reported, never changed"
    assert stack.client.get(f"/jobs/{gone}/video").status_code == 410
    assert stack.job(ghost).status == JobStatus.QUEUED
    stack.start_worker("w2")
    assert stack.wait(ghost).status == "succeeded"
    code, after = findings(stack)
    assert code == 0 and after["missing"] == [] and after["expired_leases"] == []
