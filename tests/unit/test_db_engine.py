"""The engine's pool on PostgreSQL: a connection idle for a while is checked before use, one used a
moment ago is not (``jobservice.db.engine._ping_when_idle``). The server ends connections the way a
restart does (``pg_terminate_backend``), on a real PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from jobservice.db import engine as engine_module
from jobservice.db.engine import Database

pytestmark = pytest.mark.integration


def _backend_pid(db: Database) -> int:
    with db.session() as session:
        return int(session.scalar(text("SELECT pg_backend_pid()")))


def _terminate(pg_url: str, pid: int) -> None:
    admin = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    time.sleep(0.2)  # the backend is gone before the next use


def _count_pings(db: Database) -> list[int]:
    pings: list[int] = []
    original = db.engine.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        pings.append(1)
        return bool(original(dbapi_connection))

    db.engine.dialect.do_ping = counted  # type: ignore[method-assign]
    return pings


def test_a_connection_idle_past_the_threshold_is_checked_and_replaced_when_dead(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 0.5)
    db = Database(pg_url)
    pings = _count_pings(db)
    first = _backend_pid(db)
    assert _backend_pid(db) == first and pings == []  # used a moment ago: handed out unchecked
    _terminate(pg_url, first)
    time.sleep(0.6)
    # Idle past the threshold: pinged, found dead, replaced; the session never sees the failure.
    assert _backend_pid(db) != first
    assert len(pings) == 1
    db.dispose()


def test_a_connection_that_died_a_moment_after_use_fails_once_and_the_pool_recovers(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 60.0)  # "a moment", however slow this machine
    db = Database(pg_url)
    first = _backend_pid(db)
    _terminate(pg_url, first)
    with pytest.raises(OperationalError):
        _backend_pid(db)
    # The failure counted as a disconnect: the connection (and every older one) is replaced.
    assert _backend_pid(db) != first
    db.dispose()


def test_a_caller_that_asks_for_a_ping_every_time_gets_it(pg_url: str) -> None:
    engine = engine_module.build_engine(pg_url, pool_pre_ping=True)
    with engine.connect() as conn:
        first = conn.scalar(text("SELECT pg_backend_pid()"))
    _terminate(pg_url, int(first))
    with engine.connect() as conn:  # pinged at once, not after a second
        assert conn.scalar(text("SELECT pg_backend_pid()")) != first
    engine.dispose()
