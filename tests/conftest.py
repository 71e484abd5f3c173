"""Shared fixtures: real services (Redis, PostgreSQL, moto's S3 server), settings, the app, media.

A test that needs a service fails loudly when the service is missing; it never skips. Point the
suite elsewhere with JOBSERVICE_TEST_REDIS_URL / JOBSERVICE_TEST_PG_URL.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from moto.server import ThreadedMotoServer

from jobservice.caches import Caches
from jobservice.db.migrate import upgrade
from jobservice.http.app import create_app
from jobservice.settings import Settings
from jobservice.wiring import Services, build_services
from tests.factories import copy_template

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def per_worker(url: str, worker: str = os.environ.get("PYTEST_XDIST_WORKER", "")) -> str:
    """``url`` with the Redis database number moved up by the pytest-xdist worker's index (gw1: one
    up), so that a worker's flush never empties another's queues; the first worker, and a run
    without xdist, keep ``url``. The number is the path (``redis://host/13``) or, for a socket,
    ``virtual_host``; past Redis's 16 databases it raises rather than wrap onto a low one."""
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    if index == 0:
        return url
    found = re.search(r"(?:virtual_host=|//[^/?]*/)(\d+)", url)
    db = int(found.group(1)) if found else 0
    if db + index > 15:
        raise ValueError(f"Redis database {db} + worker {index} is past 15: start from a lower one ({url})")
    if found:
        return url[: found.start(1)] + str(db + index) + url[found.end(1) :]
    base, mark, query = url.partition("?")
    return f"{base.rstrip('/')}/{db + index}{mark}{query}"


REDIS_URL = per_worker(os.environ.get("JOBSERVICE_TEST_REDIS_URL", "redis://127.0.0.1:6379/13"))
PG_URL = os.environ.get("JOBSERVICE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


SERVICE_FIXTURES = {"redis_url": "Redis", "pg_server_url": "PostgreSQL", "moto_server": "S3 (moto)"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tiers: a test that reaches a service (by its fixtures) is an integration test.

    ``pytest -m "not integration"`` is then the unit tier, which needs no Redis, PostgreSQL or
    S3 server (scripts/test.sh runs it with every service pointed at a closed port).
    """
    for item in items:
        if SERVICE_FIXTURES.keys() & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


# --- services -------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def redis_url() -> str:
    """A real Redis on a spare database number (flushed by ``clean_redis``)."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"Redis is required at {REDIS_URL} ({exc}); start one (see .ci/run)")
    return REDIS_URL


@pytest.fixture
def clean_redis(redis_url: str) -> Iterator[str]:
    """The Redis URL, flushed before and after the test."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield redis_url
    client.flushdb()


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    """A reachable PostgreSQL server (admin URL)."""
    dsn = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    try:
        psycopg.connect(dsn, connect_timeout=3).close()
    except psycopg.Error as exc:
        pytest.fail(f"PostgreSQL is required at {PG_URL} ({exc}); start one (see .ci/run)")
    return PG_URL


@pytest.fixture(scope="session")
def pg_template(pg_server_url: str) -> Iterator[str]:
    """A PostgreSQL database migrated once per session; each test gets a copy (CREATE ... TEMPLATE)."""
    name = f"jobservice_template_{uuid.uuid4().hex[:10]}"
    admin = pg_server_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    upgrade(pg_server_url.rsplit("/", 1)[0] + f"/{name}")
    yield name
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_server_url: str, pg_template: str) -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for one test (a copy of the template), dropped afterwards."""
    name = f"jobservice_test_{uuid.uuid4().hex[:10]}"
    admin = pg_server_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    url = pg_server_url.rsplit("/", 1)[0] + f"/{name}"
    yield url
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


MOTO_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def free_port() -> int:
    """A TCP port that was free a moment ago (bind to port 0 and let the OS choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """Start one in-process moto server for the session; yields its endpoint URL."""
    # moto logs every request through werkzeug on stderr even with verbose=False.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


# --- settings and app --------------------------------------------------------------------------
def caches_expired(services: Services) -> None:
    """``services`` as its process sees things once its short-lived answers expired (verified keys,
    tenant limits, free space, the forecast: ``jobservice.caches``, seconds at most): fresh caches,
    as a process started now has."""
    services.caches = Caches()


def make_settings(var_dir: Path, **overrides: object) -> Settings:
    """Settings for a test: everything under ``var_dir``, quick leases and reaper."""
    values: dict[str, object] = {
        "_env_file": None,
        "var_dir": var_dir,
        "broker_url": REDIS_URL,
        "heartbeat_seconds": 0.5,
        "lease_seconds": 3.0,
        "reap_interval_seconds": 0.5,
        "resend_after_seconds": 1.0,
        "progress_min_interval_seconds": 0.1,
        "publish_timeout_seconds": 1.0,
        # Tests that exercise keys and tenants say auth="keys"; the rest act as the admin.
        "auth": "off",
        "min_free_mb": 16,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once per session; tests get copies of it."""
    path = tmp_path_factory.mktemp("template") / "jobservice.db"
    upgrade(f"sqlite:///{path}")
    return path


def fresh_sqlite(template: Path, var_dir: Path) -> Settings:
    """Settings under ``var_dir`` whose SQLite database is a copy of the migrated template."""
    copy_template(template, var_dir, "jobservice.db")  # the default SQLite file under var_dir
    return make_settings(var_dir)


@pytest.fixture
def settings(tmp_path: Path, clean_redis: str, migrated_sqlite: Path) -> Settings:
    """Settings on SQLite + local store in tmp, and the test Redis (flushed)."""
    s = fresh_sqlite(migrated_sqlite, tmp_path / "var")
    assert s.broker_url == clean_redis
    return s


@pytest.fixture
def services(settings: Settings) -> Iterator[Services]:
    """Services built from ``settings``."""
    svc = build_services(settings)
    yield svc
    svc.db.dispose()


@pytest.fixture
def app(services: Services) -> Flask:
    """The Flask app."""
    application = create_app(services=services)
    application.config["TESTING"] = True
    return application


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """A test client of the app."""
    return app.test_client()


# --- media ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of small generated media shared by the session."""
    if shutil.which("ffmpeg") is None:
        pytest.fail("ffmpeg is required (apt-get install -y ffmpeg)")
    return tmp_path_factory.mktemp("media")


def ffmpeg(*args: str) -> None:
    """Run ffmpeg quietly, failing loudly."""
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


@pytest.fixture(scope="session")
def portrait() -> Path:
    """The shipped sample portrait (a drawn face the Haar detector finds)."""
    return SAMPLES / "portrait.png"


@pytest.fixture(scope="session")
def speech() -> Path:
    """The shipped sample speech."""
    return SAMPLES / "speech.wav"


@pytest.fixture(scope="session")
def short_speech(media_dir: Path, speech: Path) -> Path:
    """The first 2 seconds of the sample speech, as MP3 (fast jobs)."""
    out = media_dir / "short.mp3"
    if not out.exists():
        ffmpeg("-i", str(speech), "-t", "2", "-c:a", "libmp3lame", "-b:a", "64k", str(out))
    return out
