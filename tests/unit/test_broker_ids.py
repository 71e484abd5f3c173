"""The reaper's view of the broker: job ids read from real kombu messages, fast path and fallback."""

from __future__ import annotations

import json
import time
import uuid

import pytest
import redis

from jobservice.broker import (
    BrokerInspector,
    JobMessage,
    _job_id_of,
    group_queue,
    make_celery,
    redis_client,
    send_job,
    sentinel_parts,
)
from jobservice.settings import Settings


def test_ids_of_waiting_and_unacked_messages(clean_redis: str) -> None:
    celery = make_celery(Settings(broker_url=clean_redis))
    ids = [uuid.uuid4() for _ in range(3)]
    for priority, job_id in enumerate(ids):
        send_job(celery, JobMessage(job_id=job_id, group="cpu@host-1", priority=priority * 6))
    client = redis.Redis.from_url(clean_redis)
    raws = [raw for key in client.keys(f"{group_queue('cpu@host-1')}*") for raw in client.lrange(key, 0, -1)]
    assert sorted(_job_id_of(raw) or "" for raw in raws) == sorted(str(i) for i in ids)
    # An unacknowledged delivery is kept as [message, exchange, routing_key]: same id.
    unacked = json.dumps([json.loads(raws[0]), "", group_queue("cpu@host-1")])
    assert _job_id_of(unacked) == _job_id_of(raws[0])
    # Not the layout the fast path expects (compact separators): the JSON parse still finds it.
    compact = json.dumps(json.loads(raws[0]), separators=(",", ":"))
    assert _job_id_of(compact) == _job_id_of(raws[0])
    assert _job_id_of(b"not json") is None and _job_id_of(b'{"headers": {}}') is None
    inspector = BrokerInspector(clean_redis)
    try:
        assert inspector.pending_job_ids({group_queue("cpu@host-1")}) == {str(i) for i in ids}
    finally:
        inspector.close()


def test_a_delivery_held_past_the_grace_is_not_live(clean_redis: str) -> None:
    """A worker that died between taking a message and claiming its job leaves it unacknowledged."""
    celery = make_celery(Settings(broker_url=clean_redis))
    stale, fresh = uuid.uuid4(), uuid.uuid4()
    for job_id in (stale, fresh):
        send_job(celery, JobMessage(job_id=job_id, group="npu:0,1@h"))
    client = redis.Redis.from_url(clean_redis)
    queue = group_queue("npu:0,1@h")
    assert queue == "group.npu_0_1@h"  # only safe characters in a Redis key
    raws = {_job_id_of(raw): raw for raw in client.lrange(queue, 0, -1)}
    client.delete(queue)  # both were taken by workers, as kombu records it
    for tag, job_id, age in (("tag-stale", stale, 120.0), ("tag-fresh", fresh, 1.0)):
        client.hset("unacked", tag, json.dumps([json.loads(raws[str(job_id)]), "", queue]))
        client.zadd("unacked_index", {tag: time.time() - age})
    inspector = BrokerInspector(clean_redis)
    try:
        assert inspector.pending_job_ids({queue}) == {str(stale), str(fresh)}
        assert inspector.pending_job_ids({queue}, unacked_grace_seconds=30) == {str(fresh)}
    finally:
        inspector.close()


def test_sentinel_urls_name_every_sentinel_the_database_and_the_password() -> None:
    url = "sentinel://:s3cret@10.0.0.1:26379;sentinel://10.0.0.2:26380;sentinel://h3/2"
    assert sentinel_parts(url) == ([("10.0.0.1", 26379), ("10.0.0.2", 26380), ("h3", 26379)], 2, "s3cret")
    assert sentinel_parts("sentinel://a:1")[1:] == (0, None)
    with pytest.raises(ValueError, match="starts with sentinel://"):
        sentinel_parts("sentinel://a:1;redis://b:2")
    with pytest.raises(ValueError, match="the name the sentinels monitor"):
        redis_client("sentinel://a:1/0", sentinel_master=None)
    with pytest.raises(ValueError, match="Redis Sentinel"):
        redis_client("amqp://guest@localhost//")


def test_a_sentinel_broker_gives_celery_the_master_name() -> None:
    settings = Settings(broker_url="sentinel://:pw@a:1;sentinel://b:2/0", broker_sentinel_master="jobs")
    options = make_celery(settings).conf.broker_transport_options
    assert options["master_name"] == "jobs" and options["sentinel_kwargs"] == {"password": "pw"}
    assert (
        "master_name"
        not in make_celery(Settings(broker_url="redis://x:6379/0")).conf.broker_transport_options
    )
