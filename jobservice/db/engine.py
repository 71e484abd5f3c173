"""Database engine and sessions, SQLite and PostgreSQL alike.

SQLite gets WAL and a busy timeout (several processes write: the API, workers, the reaper).
Engines are per process: a forked child (Celery prefork, gunicorn) builds its own instead of
reusing the parent's pooled connections (see reference/stack-probe.md section 5).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy
from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_MS = 30_000
KEPT_READERS = 4  # per process; on PostgreSQL these come on top of the pool's connections
# A pooled connection idle for longer than this is pinged before it is handed out (see _ping_when_idle).
PING_AFTER_IDLE_S = 1.0
T = TypeVar("T")


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
        # sqlalchemy.create_engine looked up at each call: with tracing on, OpenTelemetry's
        # instrumentation wraps it (jobservice.tracing), and an engine made after that traces its queries.
        engine = sqlalchemy.create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}, **kwargs
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_size", 5)
    kwargs.setdefault("max_overflow", 10)
    engine = sqlalchemy.create_engine(url, **kwargs)
    if not kwargs.get("pool_pre_ping"):  # a caller that asks for a ping every time gets it
        _ping_when_idle(engine)
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """Check a pooled connection before handing it out when it sat idle for more than
    ``PING_AFTER_IDLE_S``: one that died meanwhile (the server restarted, an idle timeout between
    us) is replaced, as ``pool_pre_ping`` would. A connection given back a moment ago is handed out
    unchecked: ``pool_pre_ping`` spent a round trip on every transaction for that (one in eight
    of a submission's). One that died within that moment fails its statement once, which the
    pool takes as a disconnect: it and every connection older than it are replaced, and the caller
    sees the database error its request would have met mid-flight (a 503 on the API). A failed
    ping replaces every connection older than it, as ``pool_pre_ping`` does."""

    @event.listens_for(engine, "checkin")
    def _given_back(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _handed_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since <= PING_AFTER_IDLE_S:
            return  # a new connection, or one in use a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:  # the pool replaces it (and every older one) and tries again
            raise sqlalchemy.exc.InvalidatePoolError(f"an idle connection failed its ping: {exc}") from exc


class Database:
    """A per-process engine plus a session factory, rebuilt after fork."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._pid = -1
        self._engine: Engine | None = None
        self._sessions: sessionmaker[Session] | None = None
        self._readers: list[Connection] = []  # idle autocommit connections kept for hot reads

    @property
    def engine(self) -> Engine:
        """This process's engine (a forked child gets a fresh one)."""
        if self._engine is None or self._pid != os.getpid():
            with self._lock:
                if self._engine is None or self._pid != os.getpid():
                    if self._engine is not None:
                        # Inherited pool: drop it without closing the parent's sockets.
                        self._engine.dispose(close=False)
                        self._readers = []  # the parent's, left alone like its pool
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

    def get(self, entity: type[T], row_id: Any) -> T | None:
        """The row of ``entity`` whose primary key is ``row_id``, read now in a session of its own and
        handed back detached (its columns loaded), or None."""
        with self.session() as session:
            return session.get(entity, row_id)

    def _take_reader(self) -> Connection:
        """A connection in autocommit mode for one read at a time (given back by ``reading``).

        Checking a connection out of the engine's pool and back costs more than a one-row SELECT
        (a contended lock, a reset on return, a ping on PostgreSQL); kept readers skip all three.
        In autocommit every statement reads the latest committed state."""
        engine = self.engine
        with self._lock:
            if self._readers:
                return self._readers.pop()
        return engine.connect().execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A kept autocommit connection for the block; dropped instead of kept if the block fails."""
        conn = self._take_reader()
        try:
            yield conn
        except BaseException:
            conn.invalidate()
            conn.close()
            raise
        self._give_back_reader(conn)

    def _give_back_reader(self, conn: Connection) -> None:
        """Keep ``conn`` for the next read (up to ``KEPT_READERS``), or close it."""
        with self._lock:
            if len(self._readers) < KEPT_READERS and self._pid == os.getpid():
                self._readers.append(conn)
                return
        conn.close()

    def dispose(self) -> None:
        """Close this process's pooled connections."""
        if self._engine is not None and self._pid == os.getpid():
            with self._lock:
                readers, self._readers = self._readers, []
            for conn in readers:
                conn.close()
            self._engine.dispose()
        self._engine = None
        self._sessions = None
