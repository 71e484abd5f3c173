"""Webhook tests: settings that allow the local receiver (127.0.0.1) as a webhook target."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobservice.settings import Settings
from tests.conftest import make_settings
from tests.factories import copy_template
from tests.nightly.conftest import bclient, bservices, bsettings, root
from tests.webhooks.receiver import Receiver

__all__ = ["bclient", "bservices", "bsettings", "root"]  # the batch API fixtures, for test_batches


@pytest.fixture
def settings(tmp_path: Path, clean_redis: str, migrated_sqlite: Path) -> Settings:
    """The shared test settings, with 127.0.0.1 and localhost allowed as webhook hosts."""
    copy_template(migrated_sqlite, tmp_path / "var", "jobservice.db")
    return make_settings(
        tmp_path / "var", webhook_allowed_hosts=["127.0.0.1", "localhost"], webhook_retry_base_seconds=0.05
    )


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A started local receiver answering 200."""
    r = Receiver().start()
    yield r
    r.stop()
