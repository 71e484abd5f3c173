"""The rate limiter without Redis (it fails open, quietly) and the disk floor with a fake statvfs."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from jobservice.auth.principal import Principal, anonymous
from jobservice.caches import Caches
from jobservice.errors import InsufficientStorage
from jobservice.quotas import disk, rate
from jobservice.quotas.limits import UNLIMITED_RATE
from jobservice.settings import Settings
from jobservice.storage import LocalStore, ObjectStore

CLOSED = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@dataclass
class Host:
    """What the disk floor reads of ``Services``: settings, a store (None: the settings' own) and one
    process's caches."""

    settings: Settings
    store: ObjectStore | None = None
    caches: Caches = field(default_factory=Caches)


def key(**limits: Any) -> Principal:
    return Principal(tenant="acme", role="user", key_id="key_0123456789ab", limits=limits)


# --- rate ---------------------------------------------------------------------------------------
def test_an_unreachable_redis_lets_requests_pass_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(_env_file=None, broker_url=CLOSED, quota_requests_per_minute=1)  # type: ignore[call-arg]
    counter = rate.RateCounter(settings)
    with caplog.at_level(logging.WARNING, logger="jobservice.quotas.rate"):
        for _ in range(5):
            counter.check(key())  # a limit of 1, five requests: none refused
        assert counter.this_minute(key()) is None
    warnings = [r for r in caplog.records if "Redis unreachable" in r.getMessage()]
    assert len(warnings) == 1


def test_an_unlimited_rate_never_asks_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_redis(self: rate.RateCounter, key: str) -> int:
        raise AssertionError("Redis was asked")

    monkeypatch.setattr(rate.RateCounter, "_count", no_redis)
    counter = rate.RateCounter(Settings(_env_file=None, broker_url=CLOSED))  # type: ignore[call-arg]
    counter.check(key(requests_per_minute=0))
    counter.check(key(requests_per_minute=UNLIMITED_RATE))
    with pytest.raises(AssertionError):
        counter.check(key(requests_per_minute=10))


def test_callers_are_counted_per_key_or_per_tenant_without_a_key() -> None:
    assert rate.rate_subject(key()) == "key:key_0123456789ab"
    assert rate.rate_subject(anonymous("default")) == "tenant:default"
    assert rate.window_key(key(), 119.0) == "jobservice:rate:key:key_0123456789ab:1"
    assert rate.window_key(key(), 120.0) == "jobservice:rate:key:key_0123456789ab:2"


# --- disk ---------------------------------------------------------------------------------------
class FakeStatvfs:
    """``os.statvfs`` answering ``free_mb`` for every folder, counting its calls."""

    def __init__(self, free_mb: float) -> None:
        self.free_mb = free_mb
        self.calls = 0

    def __call__(self, path: Any) -> os.statvfs_result:
        self.calls += 1
        blocks = int(self.free_mb * 2**20 / 4096)
        return os.statvfs_result((4096, 4096, blocks * 2, blocks, blocks, 0, 0, 0, 0, 255))


def floor_settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"_env_file": None, "var_dir": tmp_path / "var", "min_free_mb": 100}
    values.update(overrides)
    return Settings(**values)


def test_under_the_floor_submissions_get_507_naming_free_space_and_floor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk.os, "statvfs", FakeStatvfs(40))
    settings = floor_settings(tmp_path)
    with pytest.raises(InsufficientStorage) as exc:
        disk.check_free_space(Host(settings, LocalStore(tmp_path / "objects")))
    assert exc.value.status == 507 and exc.value.code == "insufficient_storage"
    assert "has 40 MB free, under the floor of 100 MB" in exc.value.message
    assert "spool" in exc.value.message and "object store" in exc.value.message
    assert len(disk.storage_problems(Host(settings))) == 2


def test_above_the_floor_or_with_no_floor_nothing_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk.os, "statvfs", FakeStatvfs(150))
    disk.check_free_space(Host(floor_settings(tmp_path)))
    monkeypatch.setattr(disk.os, "statvfs", FakeStatvfs(0))
    disk.check_free_space(Host(floor_settings(tmp_path, min_free_mb=0)))


def test_a_remote_store_has_no_free_space_only_the_spool_is_watched(tmp_path: Path) -> None:
    class RemoteStore(LocalStore):
        backend = "s3"

    remote: ObjectStore = RemoteStore(tmp_path / "objects")
    assert list(disk.watched_folders(floor_settings(tmp_path), remote)) == ["spool"]
    assert list(disk.watched_folders(floor_settings(tmp_path, storage_backend="s3"))) == ["spool"]
    watched = disk.watched_folders(floor_settings(tmp_path), LocalStore(tmp_path / "elsewhere"))
    assert watched["object store"] == (tmp_path / "elsewhere").resolve()


def test_measurements_are_cached_briefly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeStatvfs(500)
    monkeypatch.setattr(disk.os, "statvfs", fake)
    settings = floor_settings(tmp_path, storage_root=tmp_path / "var" / "spool")  # one folder twice
    host = Host(settings)
    for _ in range(10):
        disk.check_free_space(host)
    assert fake.calls == 1
