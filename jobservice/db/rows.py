"""Creating a row that may already exist, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session


def insert_missing(session: Session, table: Any, values: dict[str, Any], keys: list[str]) -> None:
    """``INSERT ... ON CONFLICT (keys) DO NOTHING``: the row exists afterwards, whoever made it (two
    processes creating it at once do not fail)."""
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(insert(table).values(**values).on_conflict_do_nothing(index_elements=keys))
