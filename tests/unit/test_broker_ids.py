"""The reaper's view of the broker: job ids read from real kombu messages, fast path and fallback."""

from __future__ import annotations

import json
import uuid

import redis

from jobservice.broker import BrokerInspector, _job_id_of, make_celery, send_job
from jobservice.catalog import queue_for
from jobservice.settings import Settings


def test_ids_of_waiting_and_unacked_messages(clean_redis: str) -> None:
    celery = make_celery(Settings(broker_url=clean_redis))
    ids = [uuid.uuid4() for _ in range(3)]
    for priority, job_id in enumerate(ids):
        send_job(celery, job_id=job_id, model="reference-t2v", priority=priority * 6)
    client = redis.Redis.from_url(clean_redis)
    raws = [raw for key in client.keys(f"{queue_for('reference-t2v')}*") for raw in client.lrange(key, 0, -1)]
    assert sorted(_job_id_of(raw) or "" for raw in raws) == sorted(str(i) for i in ids)
    # An unacknowledged delivery is kept as [message, exchange, routing_key]: same id.
    unacked = json.dumps([json.loads(raws[0]), "", "model.reference-t2v"])
    assert _job_id_of(unacked) == _job_id_of(raws[0])
    # Not the layout the fast path expects (compact separators): the JSON parse still finds it.
    compact = json.dumps(json.loads(raws[0]), separators=(",", ":"))
    assert _job_id_of(compact) == _job_id_of(raws[0])
    assert _job_id_of(b"not json") is None and _job_id_of(b'{"headers": {}}') is None
    inspector = BrokerInspector(clean_redis)
    try:
        assert inspector.pending_job_ids({queue_for("reference-t2v")}) == {str(i) for i in ids}
    finally:
        inspector.close()
