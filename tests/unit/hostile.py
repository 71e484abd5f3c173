"""What every hostile-request test shares: an app with auth off whose batch root holds its var folder
(the layout a careless default would give), and the one assertion each case makes.

Each case asserts its 4xx status and machine code, that nothing was created (no job or batch row, no
stored object, no file left in the spool), and that the service still answers ``/healthz``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import text

from jobservice.http.app import create_app
from jobservice.wiring import Services, build_services
from tests.conftest import make_settings
from tests.factories import copy_template

Send = Callable[[FlaskClient], Any]
Case = tuple[Send, int, str]


def hostile_services(tmp_path: Path, migrated_sqlite: Path, **overrides: Any) -> Services:
    """Services with auth off, the batch root at ``tmp_path`` and the var folder inside it."""
    var = tmp_path / "var"
    copy_template(migrated_sqlite, var, "jobservice.db")
    settings = make_settings(var, **{"auth": "off", "batch_root": tmp_path, **overrides})
    (var / "secret_key").write_text("0" * 64)
    return build_services(settings)


@pytest.fixture
def hostile(
    tmp_path: Path, clean_redis: str, migrated_sqlite: Path
) -> Iterator[tuple[FlaskClient, Services]]:
    """A test client and its services (see ``hostile_services``)."""
    services = hostile_services(tmp_path, migrated_sqlite)
    app = create_app(services=services)
    app.config["TESTING"] = True
    yield app.test_client(), services
    services.db.dispose()


def error_code(response: Any) -> str | None:
    """The machine code of an error answer: the JSON body's, or the one a web page shows."""
    if response.is_json:
        return str(response.get_json()["error"]["code"])
    found = re.search(r"<code>([a-z_]+)</code>", response.get_data(as_text=True))
    return found.group(1) if found else None


def leftovers(services: Services) -> list[str]:
    """Everything a refused request must not have left: rows, stored objects, spool files."""
    found: list[str] = []
    with services.db.session() as session:
        for table in ("jobs", "batches", "job_groups"):
            count = session.execute(text(f"SELECT count(*) FROM {table}")).scalar()  # noqa: S608
            found += [f"{count} row(s) in {table}"] if count else []
    found += [o.key for o in services.store.list("")]
    spool = services.settings.resolved_spool_dir()
    found += [str(p) for p in spool.rglob("*") if p.is_file()] if spool.exists() else []
    return found


def assert_refused(client: FlaskClient, services: Services, case: Case) -> None:
    """Send ``case`` and check its status, its code, that nothing is left and the service is healthy."""
    send, status, code = case
    response = send(client)
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    assert error_code(response) == code, response.get_data(as_text=True)[:500]
    if response.is_json:
        assert len(response.get_json()["error"]["message"]) > 10
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert leftovers(services) == []
    assert client.get("/healthz").status_code == 200
