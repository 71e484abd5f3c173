"""Every pod of the Kubernetes kit runs `jobservice db upgrade` as its init container: pods started
together migrate one fresh PostgreSQL database once, and all of them start (an advisory lock)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from jobservice.db.migrate import heads
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def empty_pg(pg_server_url: str) -> Iterator[str]:
    """A PostgreSQL database with no tables at all (a new site's first deploy)."""
    name = f"jobservice_empty_{uuid.uuid4().hex[:10]}"
    admin = pg_server_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield pg_server_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_pods_started_together_migrate_once_and_all_start(empty_pg: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    env.update(JOBSERVICE_DATABASE_URL=empty_pg, PYTHONPATH=str(ROOT))
    pods = [
        subprocess.Popen(
            [sys.executable, "-m", "jobservice.cli.main", "db", "upgrade"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [pod.communicate(timeout=120)[0] for pod in pods]
    assert [pod.returncode for pod in pods] == [0, 0, 0], "\n".join(outputs)
    with psycopg.connect(empty_pg.replace("postgresql+psycopg://", "postgresql://")) as conn:
        versions = [row[0] for row in conn.execute("SELECT version_num FROM alembic_version")]
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'jobs'").fetchone()
    assert versions == heads()
    assert tables == (1,)
