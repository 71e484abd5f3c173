"""The one keyset paginator (``jobservice.jobs.pages.page_of``): any query and its key columns, both
orders, rows of the same moment neither lost nor repeated across pages."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Select, select

from jobservice.db.engine import Database
from jobservice.db.tables import Job, JobGroup, utcnow
from jobservice.groups.presenters import GROUP_KEYS, list_groups
from jobservice.jobs.pages import JOB_KEYS, Keys, decode_cursor, page_of


def every_page(
    db: Database, query: Select[Any], keys: Keys, *, newest_first: bool, limit: int
) -> list[uuid.UUID]:
    """The ids of every page, read a page at a time through the cursors the pages hand out."""
    seen: list[uuid.UUID] = []
    cursor: str | None = None
    while True:
        with db.session() as session:
            after = decode_cursor(cursor) if cursor else None
            rows, cursor = page_of(session, query, keys, after=after, limit=limit, newest_first=newest_first)
            seen += [row.id for row in rows]
        assert len(rows) <= limit
        if cursor is None:
            return seen


@pytest.mark.parametrize("newest_first", [True, False])
def test_groups_and_jobs_page_through_ties_in_order(db: Database, newest_first: bool) -> None:
    start = utcnow()
    moments = [start, start, start, start + timedelta(seconds=1), start + timedelta(seconds=1), start]
    with db.session() as session:
        for moment in moments:  # three and two rows of the same moment: the id breaks the tie
            session.add(JobGroup(created_at=moment, manifest_format="csv", manifest_sha256="0" * 64))
            session.add(Job(task="text2video", model="m", params={}, created_at=moment))
    for model, keys in ((JobGroup, GROUP_KEYS), (Job, JOB_KEYS)):
        with db.session() as session:
            rows = list(session.scalars(select(model)))
            expected = [keys.of(r)[1] for r in sorted(rows, key=keys.of, reverse=newest_first)]
        for limit in (1, 2, 4, 6, 7):
            paged = every_page(db, select(model), keys, newest_first=newest_first, limit=limit)
            assert paged == expected, (model.__name__, limit)


def test_the_list_of_groups_hands_out_a_cursor_only_when_more_follow(db: Database) -> None:
    with db.session() as session:
        for n in range(3):
            session.add(
                JobGroup(
                    created_at=utcnow() + timedelta(seconds=n),
                    manifest_format="csv",
                    manifest_sha256="0" * 64,
                )
            )
    with db.session() as session:
        first = list_groups(session, tenant=None, limit=2)
        assert len(first.groups) == 2 and first.next_cursor is not None
        rest = list_groups(session, tenant=None, limit=2, cursor=first.next_cursor)
        assert len(rest.groups) == 1 and rest.next_cursor is None
        assert {g.id for g in first.groups}.isdisjoint({g.id for g in rest.groups})
        assert list_groups(session, tenant="nobody", limit=2).groups == []
