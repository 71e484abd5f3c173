"""Fixtures of the batch tests: an app whose batch root holds the sample media."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobservice.db.migrate import upgrade
from jobservice.http.app import create_app
from jobservice.settings import Settings
from jobservice.wiring import Services, build_services
from tests.conftest import make_settings
from tests.nightly.helpers import batch_root


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The batch root: sample portrait and speech inside."""
    return batch_root(tmp_path)


@pytest.fixture
def bsettings(tmp_path: Path, clean_redis: str, root: Path) -> Settings:
    s = make_settings(tmp_path / "var", broker_url=clean_redis, batch_root=root)
    upgrade(s.resolved_database_url())
    return s


@pytest.fixture
def bservices(bsettings: Settings) -> Any:
    svc: Services = build_services(bsettings)
    yield svc
    svc.db.dispose()


@pytest.fixture
def bclient(bservices: Services) -> Any:
    app = create_app(services=bservices)
    app.config["TESTING"] = True
    return app.test_client()


def build_batch_stack(tmp: Path, **overrides: object) -> Any:
    """A real-worker stack (tests/integration/conftest.py) whose catalog adds the bench fake."""
    import os

    from jobservice.cli.embedded import exported
    from tests.conftest import ROOT
    from tests.integration.conftest import RedisServer, Stack

    server = RedisServer(tmp / "redis")
    server.start()
    values: dict[str, object] = {
        "broker_url": server.url,
        "catalog_extra": ["tests.fakes.zoo:specs", "tests.fakes.bench:specs"],
        "batch_root": batch_root(tmp),
        **overrides,
    }
    settings = make_settings(tmp / "var", **values)
    upgrade(settings.resolved_database_url())
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBSERVICE_")}
    env.update({f"JOBSERVICE_{k.upper()}": v for k, v in exported(settings).items()})
    env["JOBSERVICE_DATABASE_URL"] = settings.resolved_database_url()
    env["PYTHONPATH"] = str(ROOT)
    return Stack(tmp=tmp, redis=server, services=build_services(settings), env=env)


@pytest.fixture
def batch_stack(tmp_path: Path) -> Any:
    """A fresh real-worker stack for batch tests (no worker started yet)."""
    s = build_batch_stack(tmp_path)
    yield s
    s.close()
