"""Database engine and sessions, SQLite and PostgreSQL alike.

SQLite gets WAL and a busy timeout (several processes write: the API, workers, the reaper).
Engines are per process: a forked child (Celery prefork, gunicorn) builds its own instead of
reusing the parent's pooled connections (see reference/stack-probe.md section 5).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def build_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` with the pragmas and pool settings this service relies on."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}, **kwargs
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    kwargs.setdefault("pool_size", 5)
    kwargs.setdefault("max_overflow", 10)
    return create_engine(url, **kwargs)


class Database:
    """A per-process engine plus a session factory, rebuilt after fork."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._pid = -1
        self._engine: Engine | None = None
        self._sessions: sessionmaker[Session] | None = None

    @property
    def engine(self) -> Engine:
        """This process's engine (a forked child gets a fresh one)."""
        if self._engine is None or self._pid != os.getpid():
            with self._lock:
                if self._engine is None or self._pid != os.getpid():
                    if self._engine is not None:
                        # Inherited pool: drop it without closing the parent's sockets.
                        self._engine.dispose(close=False)
                    self._engine = build_engine(self.url)
                    self._sessions = sessionmaker(self._engine, expire_on_commit=False)
                    self._pid = os.getpid()
        return self._engine

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session committed on success and rolled back on error."""
        _ = self.engine
        assert self._sessions is not None
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def dispose(self) -> None:
        """Close this process's pooled connections."""
        if self._engine is not None and self._pid == os.getpid():
            self._engine.dispose()
        self._engine = None
        self._sessions = None
