"""On PostgreSQL, API processes scraping at the same moment never count a job twice."""

from __future__ import annotations

import threading
from datetime import timedelta

from jobservice.db.engine import Database
from jobservice.db.tables import utcnow
from jobservice.metrics import counters
from jobservice.metrics.counters import FINISHED, label_key
from tests.metrics.test_counters import succeed


def test_concurrent_advances_count_each_job_once(pg_url: str) -> None:
    db = Database(pg_url)
    try:
        for _ in range(30):
            succeed(db)
        start = threading.Barrier(6)
        errors: list[BaseException] = []

        def scrape() -> None:
            start.wait()
            try:
                for _ in range(5):
                    with db.session() as s:
                        counters.advance(s, until=utcnow() - timedelta(seconds=0))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=scrape) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        with db.session() as s:
            totals = counters.read_totals(s)
        key = (FINISHED, label_key({"model": "reference-t2v", "status": "succeeded", "error_code": ""}))
        assert totals.rows[key] == 30
    finally:
        db.dispose()
