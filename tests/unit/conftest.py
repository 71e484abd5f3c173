"""Fixtures of the unit-directory tests: ``hostile`` (an app with auth off, for the hostile corpus),
and for tests on SQLite copies without any service: ``db`` (a module may define its own), ``catalog``
(the fake zoo's models, heavy ones included) and ``offline_settings`` (settings that reach nothing)."""

from pathlib import Path

import pytest

from jobservice.catalog import Catalog
from jobservice.db.engine import Database
from jobservice.families.deployment import build_catalog
from jobservice.settings import Settings
from tests.conftest import make_settings
from tests.factories import sqlite_copy
from tests.unit.hostile import hostile

__all__ = ["catalog", "db", "hostile", "offline_settings"]


@pytest.fixture
def db(tmp_path: Path, migrated_sqlite: Path) -> Database:
    """A copy of the migrated SQLite database."""
    return sqlite_copy(migrated_sqlite, tmp_path)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    """The catalog with the fake zoo (tests/fakes/zoo.py)."""
    return build_catalog(["tests.fakes.zoo:specs"])


@pytest.fixture
def offline_settings(tmp_path: Path) -> Settings:
    """Settings under tmp that no test here uses to reach Redis."""
    return make_settings(tmp_path / "var")
