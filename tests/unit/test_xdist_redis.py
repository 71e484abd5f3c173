"""The suite under pytest-xdist: each worker process flushes a Redis database of its own."""

from __future__ import annotations

import pytest

from tests.conftest import per_worker


@pytest.mark.parametrize(
    ("url", "worker", "expected"),
    [
        ("redis://127.0.0.1:6379/13", "", "redis://127.0.0.1:6379/13"),  # no xdist
        ("redis://127.0.0.1:6379/13", "gw0", "redis://127.0.0.1:6379/13"),
        ("redis://127.0.0.1:6379/13", "gw1", "redis://127.0.0.1:6379/14"),
        ("redis://:pw@redis:6379/3?socket_timeout=5", "gw2", "redis://:pw@redis:6379/5?socket_timeout=5"),
        ("redis://127.0.0.1:6379", "gw1", "redis://127.0.0.1:6379/1"),
        (
            "redis+socket:///v/redis.sock?virtual_host=13",
            "gw1",
            "redis+socket:///v/redis.sock?virtual_host=14",
        ),
    ],
)
def test_each_worker_gets_its_own_database(url: str, worker: str, expected: str) -> None:
    assert per_worker(url, worker) == expected


def test_a_database_past_15_is_refused_not_wrapped() -> None:
    with pytest.raises(ValueError, match="past 15"):
        per_worker("redis://127.0.0.1:6379/15", "gw1")
