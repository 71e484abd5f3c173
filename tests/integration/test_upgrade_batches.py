"""Migration 0018 on batches the previous release made (issue 37): the release named in
``scripts/upgrade-from`` (built as ``tests/integration/test_upgrade.py`` builds it) creates a
nightly batch with its own CLI on its own schema; this checkout then migrates the database and
every batch is a job group with a spec: rows, jobs and stored objects kept, and the batch works
as one made by this release (its page, its job group, cancel and resume)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from jobservice.db.migrate import upgrade
from jobservice.db.tables import Batch, Job, JobGroup, utcnow
from jobservice.groups.relocate import move_legacy_batch_files
from jobservice.http.app import create_app
from jobservice.nightly.service import cancel_batch, resume_batch
from jobservice.wiring import build_services
from tests.conftest import make_settings
from tests.integration import test_upgrade
from tests.integration.test_upgrade import Release
from tests.nightly.helpers import a2v_case, batch_root, spec, t2v_case

pytestmark = [pytest.mark.integration, pytest.mark.slow]

previous = test_upgrade.previous  # the previous release, in a venv of its own


def old_cli(release: Release, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(release.python), "-m", "jobservice.cli.main", *args],
        env=env,
        cwd=release.src,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_batches_of_the_previous_release_become_job_groups_without_loss(
    tmp_path: Path, previous: Release, clean_redis: str
) -> None:
    root = batch_root(tmp_path)
    (root / "n.yaml").write_text(yaml.safe_dump(spec(t2v_case(repeat=2), a2v_case(repeat=1))))
    var = tmp_path / "var"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(previous.src),
        "JOBSERVICE_VAR_DIR": str(var),
        "JOBSERVICE_BROKER_URL": clean_redis,
        "JOBSERVICE_BATCH_ROOT": str(root),
        "JOBSERVICE_AUTH": "off",
        "JOBSERVICE_MIN_FREE_MB": "16",
    }
    old_cli(previous, env, "db", "upgrade")
    old_cli(previous, env, "batch", "run", str(root / "n.yaml"))
    settings = make_settings(var, broker_url=clean_redis, batch_root=root)
    services = build_services(settings)
    try:
        upgrade(settings.resolved_database_url(), "0015_group_lifecycle")  # the migrations before 0018
        # A creation the previous release left half-made: its state ``creating`` is gone now.
        with services.db.session() as s:
            made = s.scalars(select(Batch)).one()
            half = Batch(
                id=uuid.uuid4(),
                name=made.name,
                spec_digest=made.spec_digest,
                spec=made.spec,
                status="creating",
                total_jobs=3,
                tenant="default",
                created_at=utcnow(),
                updated_at=utcnow(),
            )
            s.add(half)
            # Columns, not the Job entity: the schema is 0018's predecessor (no jobs.deleted_at yet).
            rows = s.execute(select(Job.id, Job.batch_id, Job.input_keys)).all()
            before = {job_id: (batch_id, dict(inputs)) for job_id, batch_id, inputs in rows}
        assert len(before) == 3 and made.status == "running"
        keys = {key for _, inputs in before.values() for key in inputs.values()}
        assert keys and all(k.startswith(f"batches/{made.id}/inputs/") for k in keys)

        upgrade(settings.resolved_database_url())
        assert move_legacy_batch_files(services.db, services.store) == 1  # what `db upgrade` runs next
        assert move_legacy_batch_files(services.db, services.store) == 0, "moved once"

        with services.db.session() as s:
            groups = {g.id: g for g in s.scalars(select(JobGroup))}
            after = {j.id: (j.batch_id, dict(j.input_keys), j.group_id) for j in s.scalars(select(Job))}
            half_row = s.get(Batch, half.id)
        assert set(groups) == {made.id, half.id}, "every batch is a job group, with its id"
        group = groups[made.id]
        assert (group.manifest_format, group.manifest_sha256, group.total_jobs) == (
            "spec",
            made.spec_digest,
            3,
        )
        assert group.models == {"reference-t2v": 2, "reference-talking-head": 1}
        home = f"groups/{made.id}/"
        moved = {
            j: (b, {n: k.replace(f"batches/{made.id}/", home) for n, k in i.items()})
            for j, (b, i) in before.items()
        }
        assert {j: (b, k) for j, (b, k, _) in after.items()} == moved, (
            "jobs kept, their inputs in the group's home"
        )
        assert all(g == b for b, _, g in after.values()), "each job carries its batch's group"
        assert all(services.store.exists(k.replace(f"batches/{made.id}/", home)) for k in keys), "copied"
        assert all(services.store.exists(k) for k in keys), "the old copies stay for the retention sweep"
        with services.db.session() as s:
            moved_spec = s.scalars(select(Batch.spec).where(Batch.id == made.id)).one()
        spec_keys = [e["key"] for c in moved_spec["cases"] for e in (c.get("inputs") or {}).values()]
        assert spec_keys and all(k.startswith(home) for k in spec_keys)
        assert (
            half_row is not None and half_row.status == "canceled" and "interrupted" in (half_row.error or "")
        )

        client = create_app(services=services).test_client()
        view = client.get(f"/batches/{made.id}").get_json()
        assert view["status"] == "running" and view["progress"]["total"] == view["progress"]["queued"] == 3
        listed = client.get(f"/job-groups/{made.id}").get_json()
        assert listed["manifest_format"] == "spec" and listed["progress"]["queued"] == 3
        canceled = cancel_batch(services, made.id)
        assert canceled.status == "canceled"
        with services.db.session() as s:
            assert {j.status for j in s.scalars(select(Job).where(Job.batch_id == made.id))} == {"canceled"}
        resumed = resume_batch(services, half.id)  # the half-made one queues its three runs now
        assert resumed.status == "running"
        with services.db.session() as s:
            jobs: list[Any] = list(s.scalars(select(Job).where(Job.batch_id == half.id)))
        assert len(jobs) == 3 and {j.group_id for j in jobs} == {half.id}

        # During the rollout the previous release's CLI (or API) still creates a batch: it has no
        # job group until this release first cancels or grows it.
        old_cli(previous, env, "batch", "run", str(root / "n.yaml"))
        with services.db.session() as s:
            late = s.scalars(select(Batch).where(Batch.id.not_in([made.id, half.id]))).one()
            assert s.get(JobGroup, late.id) is None
        assert cancel_batch(services, late.id).status == "canceled"
        with services.db.session() as s:
            late_jobs = list(s.scalars(select(Job).where(Job.batch_id == late.id)))
            assert s.get(JobGroup, late.id) is not None
        assert len(late_jobs) == 3 and {(j.status, j.group_id) for j in late_jobs} == {("canceled", late.id)}
    finally:
        services.db.dispose()
