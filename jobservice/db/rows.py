"""Writing rows that others write too, on SQLite and PostgreSQL alike: creating one that may already
exist, and the compare-and-swap every state move is."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session


def insert_missing(session: Session, table: Any, values: dict[str, Any], keys: list[str]) -> None:
    """``INSERT ... ON CONFLICT (keys) DO NOTHING``: the row exists afterwards, whoever made it (two
    processes creating it at once do not fail)."""
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(insert(table).values(**values).on_conflict_do_nothing(index_elements=keys))


def update_one(session: Session, table: Any, *conditions: Any, **values: Any) -> bool:
    """``UPDATE table SET values WHERE conditions``, leaving the session's loaded objects alone:
    True when exactly one row changed. With the row's expected state among the conditions, this is
    a compare-and-swap: of two writers that read the same state, one moves the row and the other is
    told it lost (no ``SELECT ... FOR UPDATE``, which SQLite ignores)."""
    result = session.execute(
        update(table).where(*conditions).values(**values).execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]
