"""A real `jobservice beat` runs the retention gc on its own: expired files and orphans disappear."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from jobservice.cli.embedded import exported
from jobservice.db.migrate import upgrade
from jobservice.db.tables import Job, utcnow
from jobservice.wiring import build_services
from tests.conftest import ROOT, make_settings
from tests.integration.conftest import RedisServer
from tests.unit.test_retention import HOUR, expiry_events, finished_job, stored

pytestmark = pytest.mark.integration  # its own redis-server and a real beat process


def test_the_beat_expires_jobs_and_sweeps_orphans(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    settings = make_settings(tmp_path / "var", broker_url=server.url, gc_interval_seconds=1.0)
    upgrade(settings.resolved_database_url())
    services = build_services(settings)
    job_id = finished_job(services, expires_at=utcnow() - HOUR)
    orphan = settings.resolved_spool_dir() / "upload-zx9y8w7v"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"half an upload")
    old = time.time() - 2 * 3600
    os.utime(orphan, (old, old))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    env.update({f"JOBSERVICE_{k.upper()}": v for k, v in exported(settings).items()})
    env["JOBSERVICE_DATABASE_URL"] = settings.resolved_database_url()
    env["PYTHONPATH"] = str(ROOT)
    log = tmp_path / "beat.log"
    beat = None
    try:
        with log.open("wb") as out:
            beat = subprocess.Popen(
                [sys.executable, "-m", "jobservice.cli.main", "beat"],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 90
        expired_at = None
        while time.monotonic() < deadline and (expired_at is None or orphan.exists()):
            with services.db.session() as session:
                expired_at = session.scalar(select(Job.expired_at).where(Job.id == job_id))
            time.sleep(0.5)
        assert expired_at is not None, log.read_text(errors="replace")[-4000:]
        assert not orphan.exists(), log.read_text(errors="replace")[-4000:]
        assert stored(services.store, f"jobs/{job_id}/") == []
        assert [e.actor for e in expiry_events(services, job_id)] == ["system"]
    finally:
        if beat is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(beat.pid, signal.SIGTERM)
            try:
                beat.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(beat.pid, signal.SIGKILL)
        services.db.dispose()
        server.stop()
