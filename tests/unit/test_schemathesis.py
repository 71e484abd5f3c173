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
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

from jobservice.http.app import create_app
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
