"""Which jobs are measured alone (jobservice/nightly/measure.py), read as workers read it, on SQLite
and on PostgreSQL: a batch's jobs unless its spec says ``undisturbed: false``; never other jobs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from jobservice.http.app import create_app
from jobservice.nightly.measure import measured_alone
from jobservice.nightly.spec import parse_spec, spec_digest
from jobservice.wiring import build_services
from tests.conftest import make_settings
from tests.nightly.helpers import batch_jobs, spec, t2v_case

pytestmark = pytest.mark.integration


def _check(services: Any) -> None:
    client = create_app(services=services).test_client()
    ids = {}
    for name, extra in (("quiet", {}), ("overlapped", {"undisturbed": False})):
        response = client.post("/batches", json={"spec": spec(t2v_case(repeat=1), name=name, **extra)})
        assert response.status_code == 202, response.get_data(as_text=True)
        ids[name] = response.get_json()["id"]
    lone = client.post("/jobs", json={"model": "reference-t2v", "prompt": "a kite", "num_frames": 8})
    assert lone.status_code == 202, lone.get_data(as_text=True)
    with services.db.session() as session:
        for name, wanted in (("quiet", True), ("overlapped", False)):
            (job,) = batch_jobs(services, ids[name])
            assert measured_alone(session, job.id) is wanted, name
        assert measured_alone(session, uuid.UUID(lone.get_json()["id"])) is False, "not a batch job"
        assert measured_alone(session, uuid.uuid4()) is False, "no such job"


def test_measured_alone_on_sqlite(bservices: Any) -> None:
    _check(bservices)


def test_measured_alone_on_postgres(pg_url: str, clean_redis: str, root: Path, tmp_path: Path) -> None:
    services = build_services(
        make_settings(tmp_path / "pgvar", broker_url=clean_redis, batch_root=root, database_url=pg_url)
    )
    try:
        _check(services)
    finally:
        services.db.dispose()


def test_the_default_keeps_an_older_specs_digest() -> None:
    body = spec(t2v_case(repeat=1))
    same = parse_spec({**body, "undisturbed": True}).digest
    assert parse_spec(body).digest == same == spec_digest(parse_spec(body).spec)
    assert parse_spec({**body, "undisturbed": False}).digest != same
