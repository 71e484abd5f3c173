"""A worker reads its cards' memory again every minute, so /metrics does not show start-up values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobservice.db.tables import WorkerRecord
from jobservice.fleet.presence import announce_worker
from tests.factories import sqlite_copy
from workers import maintenance as maintenance_module
from workers.maintenance import Maintenance


class _Services:
    def __init__(self, db: Any) -> None:
        self.db = db


def _services(db: Any) -> Any:
    return _Services(db)  # the loop reads only .db here


def _card(free_mb: int) -> dict[str, Any]:
    return {"kind": "cuda", "index": 0, "name": "H200", "memory_total_mb": 143771, "memory_free_mb": free_mb}


def test_cards_are_read_again_once_a_minute(
    migrated_sqlite: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    host = {"hostname": "h", "cards": [_card(140000)]}
    with db.session() as session:
        announce_worker(
            session, worker_id="w1", hostname="h", pid=1, devices="cuda:0", models=["m"], info={"host": host}
        )
    m = Maintenance(_services(db), worker_id="w1", devices="cuda:0", models=["m"], info={"host": host})
    monkeypatch.setattr(maintenance_module, "inventory", lambda: {"hostname": "h", "cards": [_card(9000)]})
    assert m._host_if_due() is None, "not yet a minute"
    m._cards_read_at -= maintenance_module.CARDS_EVERY_SECONDS
    fresh = m._host_if_due()
    assert fresh is not None and fresh["cards"][0]["memory_free_mb"] == 9000
    from jobservice.fleet.presence import refresh_host

    with db.session() as session:
        refresh_host(session, "w1", fresh)
    with db.session() as session:
        row = session.get(WorkerRecord, "w1")
        assert row is not None and row.info["host"]["cards"][0]["memory_free_mb"] == 9000
    cpu_only = Maintenance(
        _services(db), worker_id="w2", devices="cpu", models=["m"], info={"host": {"cards": []}}
    )
    cpu_only._cards_read_at -= 10 * maintenance_module.CARDS_EVERY_SECONDS
    assert cpu_only._host_if_due() is None, "a host without cards never runs the vendor tools"
    db.dispose()
