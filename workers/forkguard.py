"""No pool child is forked in the middle of the parent's database work.

The worker's main process talks to the database on a thread of its own (presence and the reaper,
``workers.maintenance``) while billiard forks pool children from another thread at any time (at
start, and to replace a child that died). A fork taken while that thread is inside SQLite or its
driver copies a held lock or a half-done transaction into the child, which can then hang holding
the database's write lock (every other process sees "database is locked"), and SQLite's own advice
is never to carry an open connection across a fork. So the parent's database work runs under one
lock that every fork waits for, and the fork first closes the parent's pooled connections.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from jobservice.db.engine import Database

_lock = threading.RLock()
_databases: list[Database] = []
_installed = False


@contextmanager
def guarded() -> Iterator[None]:
    """Hold while the main process uses the database: a fork waits until the block ends."""
    with _lock:
        yield


def install(db: Database) -> None:
    """Make this process's forks wait for ``guarded`` blocks and close ``db``'s connections first."""
    global _installed
    if db not in _databases:
        _databases.append(db)
    if not _installed:
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_in_child)
        _installed = True


def _before_fork() -> None:
    _lock.acquire()
    for db in _databases:
        db.dispose()  # the child must not inherit open SQLite files; the parent reconnects lazily


def _after_fork() -> None:
    _lock.release()  # the current lock: a child that forks again holds its own, not the parent's


def _in_child() -> None:
    global _lock, _databases
    _lock = threading.RLock()  # the copy is held by the forking thread, which the child does not have
    _databases = []
