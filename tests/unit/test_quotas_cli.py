"""`jobservice tenants set/show` on SQLite: overrides stored, merged, cleared, refused when bad."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from jobservice.cli.main import cli
from jobservice.db.engine import Database
from jobservice.db.tables import Tenant
from tests.factories import copy_template


@pytest.fixture
def database(tmp_path: Path, migrated_sqlite: Path, monkeypatch: pytest.MonkeyPatch) -> Database:
    """The CLI reads JOBSERVICE_* like the service does: point it at a migrated SQLite copy."""
    var = tmp_path / "var"
    copy_template(migrated_sqlite, var, "jobservice.db")
    monkeypatch.setenv("JOBSERVICE_VAR_DIR", str(var))
    monkeypatch.delenv("JOBSERVICE_DATABASE_URL", raising=False)
    monkeypatch.setenv("JOBSERVICE_QUOTA_ACTIVE_JOBS", "100")
    return Database(f"sqlite:///{(var / 'jobservice.db').resolve()}")


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def stored(database: Database, name: str) -> dict[str, Any] | None:
    with database.session() as session:
        row = session.get(Tenant, name)
        return dict(row.limits) if row is not None else None


def test_set_creates_then_merges_then_clears_overrides(database: Database) -> None:
    first = run("tenants", "set", "acme", "--active-jobs", "5", "--retention-hours", "1.5")
    assert first.exit_code == 0, first.output
    assert stored(database, "acme") == {"active_jobs": 5, "retention_hours": 1.5}
    assert "active_jobs          5  (override)" in first.output

    merged = run("tenants", "set", "acme", "--batch-jobs", "0", "--json")
    assert merged.exit_code == 0, merged.output
    shown = json.loads(merged.output)
    assert shown["overrides"] == {"active_jobs": 5, "retention_hours": 1.5, "batch_jobs": 0}
    assert shown["limits"]["batch_jobs"] == 0 and shown["limits"]["jobs_per_hour"] == 2000

    uploads = run("tenants", "set", "acme", "--pending-uploads", "3", "--pending-upload-mb", "512")
    assert uploads.exit_code == 0, uploads.output
    assert stored(database, "acme") == {
        "active_jobs": 5,
        "retention_hours": 1.5,
        "batch_jobs": 0,
        "pending_uploads": 3,
        "pending_upload_mb": 512,
    }
    assert "pending_upload_mb    512  (override)" in uploads.output
    assert "0 pending uploads (0 MiB)" in uploads.output

    cleared = run("tenants", "set", "acme", "--clear", "--jobs-per-hour", "9")
    assert cleared.exit_code == 0, cleared.output
    assert stored(database, "acme") == {"jobs_per_hour": 9}


def test_show_one_tenant_with_defaults_and_usage_and_all_tenants(database: Database) -> None:
    alone = run("tenants", "show", "nobody", "--json")
    assert alone.exit_code == 0, alone.output
    body = json.loads(alone.output)
    assert body["overrides"] == {} and body["limits"]["active_jobs"] == 100
    assert body["usage"] == {
        "active_jobs": 0,
        "active_batch_jobs": 0,
        "jobs_last_hour": 0,
        "pending_uploads": 0,
        "pending_upload_mb": 0.0,
    }
    assert stored(database, "nobody") is None  # showing creates nothing

    assert "no tenant has overrides" in run("tenants", "show").output
    run("tenants", "set", "beta", "--requests-per-minute", "0")
    run("tenants", "set", "alpha", "--active-jobs", "1")
    listed = json.loads(run("tenants", "show", "--json").output)
    assert [t["tenant"] for t in listed] == ["alpha", "beta"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("set", "Bad Name", "--active-jobs", "1"), "invalid_tenant"),
        (("set", "acme", "--active-jobs", "-1"), "-1 is not in the range x>=0"),
        (("set", "acme", "--retention-hours", "0"), "0.0 is not in the range x>0"),
        (("show", "UPPER"), "invalid_tenant"),
    ],
)
def test_bad_names_and_values_are_refused_without_a_traceback(
    database: Database, args: tuple[str, ...], message: str
) -> None:
    result = run("tenants", *args)
    assert result.exit_code != 0
    assert message in result.output
    assert "Traceback" not in result.output
    assert stored(database, "acme") is None
