"""Queue and fleet figures read at scrape time: depth and age per model, workers and their cards."""

from __future__ import annotations

from pathlib import Path

from jobservice.db.tables import utcnow
from jobservice.fleet.presence import announce_worker, retire_worker
from jobservice.metrics import live
from tests.factories import new_job, sqlite_copy

NVIDIA_HOST = {
    "hostname": "gpu1",
    "cards": [
        {
            "kind": "cuda",
            "index": i,
            "name": "H200",
            "total_mb": 143771.0,
            "free_mb": 143771.0 - 1000 * (i + 1),
        }
        for i in range(4)
    ],
}


def test_queue_depth_and_oldest_age_per_model(migrated_sqlite: Path, tmp_path: Path) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    new_job(db, model="reference-t2v", created_offset=-90)
    new_job(db, model="reference-t2v", created_offset=-10)
    with db.session() as s:
        found = live.queues(s, models=["reference-t2v", "reference-talking-head"], now=utcnow())
    assert found["reference-t2v"].queued == 2 and found["reference-t2v"].running == 0
    assert 89 <= found["reference-t2v"].oldest_queued_seconds < 120
    assert found["reference-talking-head"] == live.ModelQueue()  # idle models still appear, with zeros


def test_workers_by_card_group_with_the_memory_of_their_own_cards(
    migrated_sqlite: Path, tmp_path: Path
) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    with db.session() as s:
        for worker_id, devices in (("a", "cuda:0,1"), ("b", "cuda:2"), ("c", "cpu"), ("gone", "cuda:3")):
            announce_worker(
                s,
                worker_id=worker_id,
                hostname="gpu1",
                pid=1,
                devices=devices,
                models=["reference-t2v"],
                info={"host": NVIDIA_HOST},
            )
    with db.session() as s:
        retire_worker(s, "gone")
    with db.session() as s:
        fleet = live.fleet(s, stale_after_seconds=30, now=utcnow())
    assert fleet.by_group == {("cuda:0,1", "cuda"): 1, ("cuda:2", "cuda"): 1, ("cpu", "cpu"): 1}
    assert fleet.by_model == {"reference-t2v": 3}
    cards = {(c.devices, c.card): c for c in fleet.cards}
    assert set(cards) == {("cuda:0,1", "cuda:0"), ("cuda:0,1", "cuda:1"), ("cuda:2", "cuda:2")}  # not card 3
    assert cards[("cuda:2", "cuda:2")].total_bytes == 143771.0 * 2**20
    assert cards[("cuda:2", "cuda:2")].used_bytes == 3000.0 * 2**20
