"""The API against its own OpenAPI document (``GET /openapi.json``), by schemathesis: requests it
generates from the document, valid and not, never get a 5xx, and every answer matches the document
(status codes, content types, bodies). A bounded number of examples per operation keeps it to CI
time; the app runs with auth off, on SQLite and the test Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import checks

from jobservice.auth.keys import create_key
from jobservice.broker import redis_client
from jobservice.db.tables import Base
from jobservice.http.app import create_app
from tests.auth.conftest import bearer
from tests.unit.hostile import hostile_services

EXAMPLES_PER_OPERATION = 100
# What the document promises: no 5xx, and every status, content type, header and body documented.
# Not "every schema-valid request is accepted": the document types a cursor or a batch id as a
# string, and a string this API never made is rightly refused (with a documented 4xx).
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
]


@pytest.fixture
def api_schema(tmp_path: Path, clean_redis: str, migrated_sqlite: Path) -> Iterator[Any]:
    """The served document, bound to an app with auth off."""
    services = hostile_services(tmp_path, migrated_sqlite)
    app = create_app(services=services)
    app.config["TESTING"] = True
    yield schemathesis.openapi.from_wsgi("/openapi.json", app)
    services.db.dispose()


def _check(operation: Any) -> str | None:
    """Drive one operation with generated requests; the first failure, as text (None: all passed)."""

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,  # the same examples on every run: a failure here is reproducible
        database=None,
    )
    def drive(case: Any) -> None:
        case.call_and_validate(checks=CHECKS)

    try:
        drive()
    except (Exception, BaseExceptionGroup) as exc:  # every failure is reported with its operation
        return f"{operation.method.upper()} {operation.path}: {exc}"
    return None


def test_every_answer_matches_the_document(api_schema: Any) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 10, "the document lists the API's operations"
    failures = [failure for failure in map(_check, operations) if failure]
    assert not failures, "\n\n".join(failures)


def forget_state(services: Any) -> None:
    """Empty every table but the keys and tenants, the store and the broker's Redis."""
    kept = {"api_keys", "tenants", "alembic_version"}
    with services.db.session() as session:
        for table in reversed(Base.metadata.sorted_tables):
            if table.name not in kept:
                session.execute(table.delete())
    for top in ("jobs/", "batches/", "uploads/", "groups/"):
        services.store.delete_prefix(top)
    redis_client(services.settings.broker_url).flushdb()  # rate counters, queued messages


# 120: with the uploads' and groups' routes beside the jobs', 60 derandomized scenarios no longer
# reached a submitted job's links (the state machine spends its choices on more routes).
STATEFUL_SCENARIOS = 120
STATEFUL_STEPS = 10


@pytest.fixture
def keyed_schema(tmp_path: Path, clean_redis: str, migrated_sqlite: Path) -> Iterator[tuple[Any, str, Any]]:
    """The served document, bound to an app with API keys on, and an admin's key."""
    services = hostile_services(tmp_path, migrated_sqlite, auth="keys", stream_max_seconds=0.5)
    with services.db.session() as session:
        _, secret = create_key(session, name="fuzz", tenant="fuzz", role="admin")
    app = create_app(services=services)
    app.config["TESTING"] = True
    schema = schemathesis.openapi.from_wsgi("/openapi.json", app, headers=bearer(secret))
    yield schema, secret, services
    services.db.dispose()


def test_stateful_sequences_with_keys_follow_the_links_and_never_fail(
    keyed_schema: tuple[Any, str, Any],
) -> None:
    """Issue 24: schemathesis's state machine over the document's links (submit a job, then read,
    cancel, list it and fetch its files), with keys on. No 5xx, every answer as documented, and
    the links are really followed (some scenario reads a job it created)."""
    schema, secret, services = keyed_schema
    document = schema.raw_schema
    assert "links" in document["paths"]["/jobs"]["post"]["responses"]["202"]
    followed: list[str] = []
    submitted = [0]

    class Sequences(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            # Every scenario starts from the same state (no jobs, batches or videos yet), so that
            # the same choices make the same requests and get the same answers (hypothesis checks).
            forget_state(services)
            submitted[0] = 0

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": bearer(secret)}

        def before_call(self, case: Any) -> None:
            # Generated submissions are nearly all refused (a random model id, a prompt of NULs;
            # the stateless test above fuzzes them): JSON ones are made valid jobs here, so that
            # the links are followed from real jobs.
            if case.method == "POST" and case.path == "/jobs" and case.media_type == "application/json":
                submitted[0] += 1
                case.body = {
                    "task": "text2video",
                    "model": "reference-t2v",
                    "prompt": "a kite",
                    "num_frames": 17,
                }

        def after_call(self, response: Any, case: Any) -> None:
            super().after_call(response, case)
            if case.path.startswith("/jobs/{job_id}") and response.status_code < 300:
                followed.append(f"{case.method} {case.path}")

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs or None)

    Sequences.run(
        settings=settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
            # No shrinking: the app keeps its state between scenarios (jobs pile up), so a replayed
            # scenario need not behave the same; the first failure is reported as it happened.
            phases=[Phase.generate],
        )
    )
    assert followed, "no scenario followed a link from a submitted job to it"
    print(f"stateful: {len(followed)} linked calls answered 2xx: {sorted(set(followed))}")
