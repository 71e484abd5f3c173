"""Queue and fleet figures read at scrape time: depth and age per model, workers and their cards."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from jobservice.db.tables import Job, WebhookDelivery, WorkerRecord, utcnow
from jobservice.families.deployment import build_catalog
from jobservice.fleet.presence import announce_worker, retire_worker
from jobservice.jobs.transitions import claim_job
from jobservice.metrics import live
from jobservice.webhooks.outbox import enqueue
from tests.factories import new_job, online_group, sqlite_copy

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


def test_queued_output_seconds_per_model_come_from_the_queue_counts(
    migrated_sqlite: Path, tmp_path: Path
) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    ids = [new_job(db, model="reference-t2v") for _ in range(3)]
    with db.session() as s:  # as POST /jobs records them: 600 s, 5 s and 5 s of video
        for job_id, seconds in zip(ids, (600.0, 5.0, 5.0), strict=True):
            s.execute(update(Job).where(Job.id == job_id).values(output_seconds=seconds))
    with db.session() as s:  # a claimed job's output is no longer queued work
        claim_job(s, ids[1], worker_id="w1", lease_seconds=30)
    with db.session() as s:
        found = live.queues(s, models=["reference-t2v", "reference-talking-head"], now=utcnow())
    assert found["reference-t2v"].output_seconds == pytest.approx(605.0)
    assert found["reference-t2v"].queued == 2
    assert found["reference-talking-head"].output_seconds == 0.0


def test_group_info_names_each_groups_host_and_pod(migrated_sqlite: Path, tmp_path: Path) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    online_group(db, "jobservice-worker-npu-0-3-0", ["reference-t2v"])
    online_group(db, "cpu@laptop", ["reference-t2v"])
    with db.session() as s:  # the pod's worker reports its pod name (JOBSERVICE_POD_NAME)
        record = s.get(WorkerRecord, "jobservice-worker-npu-0-3-0")
        assert record is not None
        record.info = {"pod": "jobservice-worker-npu-0-3-0"}
    with db.session() as s:
        groups = {g.id: g for g in live.groups(s, build_catalog())}
    assert (groups["jobservice-worker-npu-0-3-0"].hostname, groups["jobservice-worker-npu-0-3-0"].pod) == (
        "test",
        "jobservice-worker-npu-0-3-0",
    )
    assert groups["cpu@laptop"].pod == ""  # not on Kubernetes


def test_the_webhook_backlog_counts_pending_deliveries_and_the_oldests_age(
    migrated_sqlite: Path, tmp_path: Path
) -> None:
    db = sqlite_copy(migrated_sqlite, tmp_path)
    with db.session() as s:
        assert live.webhook_backlog(s, now=utcnow()) == live.WebhookBacklog(pending=0, oldest_seconds=0.0)
    with db.session() as s:
        for _ in range(2):
            enqueue(s, subject="batch:x", tenant="t", event_type="job.completed", url="https://x", data={})
        done = enqueue(s, subject="batch:y", tenant="t", event_type="job.completed", url="https://x", data={})
        done.status = "delivered"
    with db.session() as s:
        s.execute(
            update(WebhookDelivery)
            .where(WebhookDelivery.id == 1)
            .values(created_at=utcnow() - timedelta(minutes=20))
        )
    with db.session() as s:
        backlog = live.webhook_backlog(s, now=utcnow())
    assert backlog.pending == 2
    assert 20 * 60 <= backlog.oldest_seconds < 21 * 60
