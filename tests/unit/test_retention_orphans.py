"""Orphans, log rotation, `jobservice gc` and the beat's gc entry, on SQLite and a local store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from jobservice.cli.main import cli
from jobservice.db.tables import Job, utcnow
from jobservice.jobs.transitions import claim_job
from jobservice.nightly.schedule import GC_TASK, beat_schedule
from jobservice.retention import PeriodicCollector, rotate_logs, sweep_orphans
from jobservice.retention.orphans import pid_alive
from jobservice.settings import Settings
from jobservice.wiring import Services
from tests.factories import new_job
from tests.unit.test_retention import HOUR, finished_job, job_keys, retention_services, stored

OLD = 2 * 3600.0  # seconds: older than every orphan threshold


def age(path: Path, seconds: float) -> Path:
    """Set ``path``'s modification time ``seconds`` in the past."""
    moment = time.time() - seconds
    os.utime(path, (moment, moment))
    return path


def touch(path: Path, seconds: float = 0.0, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return age(path, seconds)


def dead_pid() -> int:
    """The pid of a process that has just exited."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(done.stdout)
    assert not pid_alive(pid)
    return pid


@pytest.fixture
def svc(tmp_path: Path, migrated_sqlite: Path) -> Any:
    services = retention_services(tmp_path, migrated_sqlite)
    yield services
    services.db.dispose()


def test_spool_orphans_of_dead_processes_only(svc: Services) -> None:
    spool = svc.settings.resolved_spool_dir()
    live_fresh = touch(spool / f"upload-{os.getpid()}-abcd1234")
    live_old = touch(spool / f"upload-{os.getpid()}-old12345", OLD)  # its process still runs
    dead_old = touch(spool / f"upload-{dead_pid()}-efgh5678", OLD)
    dead_fresh = touch(spool / f"upload-{dead_pid()}-new56789")  # a few minutes' grace
    plain_young = touch(spool / "upload-k2j3h4g5")  # no pid: age decides
    plain_old = touch(spool / "upload-q8w7e6r5", OLD)
    resubmit_old = spool / "resubmit-zz11yy22"
    touch(resubmit_old / "image.png", OLD)
    age(resubmit_old, OLD)
    foreign = touch(spool / "notes.txt", OLD)  # not a name this service makes
    result = sweep_orphans(svc, store=False)
    assert sorted(result.spool) == sorted(str(p) for p in (dead_old, plain_old, resubmit_old))
    for kept in (live_fresh, live_old, dead_fresh, plain_young, foreign):
        assert kept.exists(), kept
    for gone in (dead_old, plain_old, resubmit_old):
        assert not gone.exists(), gone


def test_scratch_folders_of_finished_or_missing_jobs_only(svc: Services) -> None:
    scratch = svc.settings.resolved_scratch_dir()
    done = finished_job(svc, expires_at=utcnow() + HOUR)
    running = new_job(svc.db)
    with svc.db.session() as session:
        assert claim_job(session, running, worker_id="w", lease_seconds=30) is not None

    def folder(name: str, seconds: float) -> Path:
        touch(scratch / name / "output.mp4", seconds)
        return age(scratch / name, seconds)

    done_old = folder(f"{done}-1", OLD)
    missing_old = folder(f"{uuid.uuid4()}-2", OLD)
    running_old = folder(f"{running}-1", OLD)  # a long generation writes nothing for a while
    done_young = folder(f"{done}-2", 0)  # its worker is removing it right now
    other = folder("model-cache", OLD)
    result = sweep_orphans(svc, store=False)
    assert sorted(result.scratch) == sorted([str(done_old), str(missing_old)])
    assert running_old.exists() and done_young.exists() and other.exists()


def test_store_orphans_only_when_old_and_without_a_row(svc: Services) -> None:
    root = svc.settings.resolved_storage_root()
    with_row = finished_job(svc, expires_at=utcnow() + HOUR)
    lost, young, batch_lost = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    for key in (f"jobs/{lost}/attempt-2/output.mp4", f"jobs/{lost}/inputs/image.png", f"jobs/{young}/x.png"):
        svc.store.put_bytes(key, b"data")
    svc.store.put_bytes(f"batches/{batch_lost}/inputs/sha256/{'b' * 64}.wav", b"wav")
    svc.store.put_bytes("jobs/not-a-job/file.txt", b"?")
    old_keys = [*job_keys(with_row), f"jobs/{lost}/attempt-2/output.mp4", f"jobs/{lost}/inputs/image.png"]
    for key in [*old_keys, f"batches/{batch_lost}/inputs/sha256/{'b' * 64}.wav", "jobs/not-a-job/file.txt"]:
        age(root / key, OLD)
    half_old = touch(root / "jobs" / str(with_row) / ".~jobservice-tmp-abc123", OLD)
    half_young = touch(root / "jobs" / str(with_row) / ".~jobservice-tmp-def456")
    preview = sweep_orphans(svc, dry_run=True)
    assert sorted(preview.prefixes) == sorted([f"jobs/{lost}/", f"batches/{batch_lost}/"])
    assert stored(svc.store, f"jobs/{lost}/")  # a dry run deletes nothing
    result = sweep_orphans(svc)
    assert sorted(result.prefixes) == sorted([f"jobs/{lost}/", f"batches/{batch_lost}/"])
    assert result.store_temp == [str(half_old)] and half_young.exists()
    assert stored(svc.store, f"jobs/{lost}/") == [] and stored(svc.store, f"batches/{batch_lost}/") == []
    assert stored(svc.store, f"jobs/{young}/") == [f"jobs/{young}/x.png"]  # maybe a submission in flight
    assert stored(svc.store, f"jobs/{with_row}/") == job_keys(with_row)
    assert stored(svc.store, "jobs/not-a-job/") == ["jobs/not-a-job/file.txt"]


def test_rotate_logs_copy_truncates_and_keeps_a_few(tmp_path: Path) -> None:
    var = tmp_path / "var"
    log = touch(var / "logs" / "api.log", data=b"a" * 200)
    small = touch(var / "redis" / "redis.log", data=b"r" * 10)
    deep = touch(var / "objects" / "jobs" / "x" / "deep.log", data=b"d" * 500)
    with log.open("ab") as writer:  # a child of `jobservice up` keeps this descriptor
        for round_ in range(4):
            writer.write(bytes([ord("b") + round_]) * 150)
            writer.flush()
            assert rotate_logs(var, max_bytes=100, keep=2) == [log]
            assert log.stat().st_size == 0
        writer.write(b"after")
        writer.flush()
    assert log.read_bytes() == b"after"  # O_APPEND: the writer continues at the new end
    assert (var / "logs" / "api.log.1").read_bytes() == b"e" * 150
    assert (var / "logs" / "api.log.2").read_bytes() == b"d" * 150
    assert not (var / "logs" / "api.log.3").exists()
    assert small.read_bytes() == b"r" * 10 and deep.stat().st_size == 500


def test_gc_command_dry_run_then_real(
    tmp_path: Path, migrated_sqlite: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    var = tmp_path / "var"
    services = retention_services(tmp_path, migrated_sqlite)
    job_id = finished_job(services, expires_at=utcnow() - HOUR)
    orphan = touch(var / "spool" / "upload-a1b2c3d4", OLD)
    monkeypatch.setenv("JOBSERVICE_VAR_DIR", str(var))
    monkeypatch.delenv("JOBSERVICE_DATABASE_URL", raising=False)
    monkeypatch.setenv("JOBSERVICE_STORAGE_BACKEND", "local")
    dry = CliRunner().invoke(cli, ["gc", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    shown = json.loads(dry.output)
    assert shown["dry_run"] and shown["retention"]["expired"] == [str(job_id)]
    assert shown["orphans"]["spool"] == [str(orphan)] and orphan.exists()
    assert stored(services.store, f"jobs/{job_id}/") == job_keys(job_id)
    real = CliRunner().invoke(cli, ["gc"])
    assert real.exit_code == 0, real.output
    assert f"deleted the files of 1 expired jobs ({len(job_keys(job_id))} objects)" in real.output
    assert f"  job {job_id}" in real.output and not orphan.exists()
    assert stored(services.store, f"jobs/{job_id}/") == []
    with services.db.session() as session:
        assert session.scalar(select(Job.expired_at).where(Job.id == job_id)) is not None
    services.db.dispose()


def test_gc_command_says_when_the_database_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBSERVICE_VAR_DIR", str(tmp_path / "empty"))
    monkeypatch.delenv("JOBSERVICE_DATABASE_URL", raising=False)
    done = CliRunner().invoke(cli, ["gc"])
    assert done.exit_code == 1 and "jobservice db upgrade" in done.output


def test_the_beat_runs_the_gc_every_interval(tmp_path: Path, migrated_sqlite: Path) -> None:
    settings = Settings(_env_file=None, gc_interval_seconds=42)  # type: ignore[call-arg]
    entry = beat_schedule(settings)["retention-gc"]
    assert entry["task"] == GC_TASK and entry["schedule"].run_every.total_seconds() == 42
    assert entry["options"]["queue"] == "jobservice.control"
    services = retention_services(tmp_path, migrated_sqlite)
    job_id = finished_job(services, expires_at=utcnow() - HOUR)
    collector = PeriodicCollector(services, orphan_every_seconds=3600)
    first, second = collector(), collector()
    assert first["retention"]["expired"] == [str(job_id)] and first["orphans"] is not None
    assert second["orphans"] is None  # orphans: first call, then hourly
    services.db.dispose()
