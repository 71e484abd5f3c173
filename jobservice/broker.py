"""Celery wiring shared by the API (which only sends) and the workers (which consume).

A message's only argument is the job id, and the Celery task id IS the job id, which lets the
reaper see which queued jobs still have a message in Redis. There is no result backend: the jobs
table is the truth. Each card group consumes a queue of its own (``group_queue``), and a message is
sent only when the dispatcher (``jobservice.fleet.dispatch``) hands the group its next job.
See reference/stack-probe.md section 2 for the Redis redelivery pitfall that
``visibility_timeout`` and the claim CAS guard against.

The message format (``JobMessage``, version ``MESSAGE_VERSION`` in the ``jobservice_message``
header) carries, in headers an older worker never reads, what the dispatcher decided for the job on
that group (``DispatchDecision``: what to load and what to evict first), so the worker carries out
the one decision instead of making its own, and optionally the submission's W3C trace context.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
from celery import Celery
from kombu.transport.redis import PRIORITY_STEPS
from redis.sentinel import Sentinel

from jobservice.settings import Settings

log = logging.getLogger(__name__)

RUN_JOB_TASK = "jobservice.run_job"
# The format of a job message, in its ``jobservice_message`` header (none: 1, as before it existed).
# A release that changes the format raises it, and a worker that meets a message newer than it reads
# leaves it (workers/tasks.py): the reaper hands the job back and it runs on a worker that reads it.
# 1: the job id only. 2: the dispatcher's decision (``DECISION_HEADER``) and an optional trace.
MESSAGE_VERSION = 2
MESSAGE_HEADER = "jobservice_message"
DECISION_HEADER = "jobservice_decision"  # the DispatchDecision as a JSON object
TRACE_HEADER = "jobservice_trace"  # the submission's W3C traceparent, when tracing is on
KOMBU_SEP = "\x06\x16"  # kombu's separator between a queue name and its priority step
UNACKED_KEY = "unacked"
UNACKED_INDEX_KEY = "unacked_index"  # delivery tag -> when it was delivered


def make_celery(settings: Settings) -> Celery:
    """A Celery app configured for long, exactly-once video jobs."""
    app = Celery("jobservice", broker=settings.broker_url, set_as_current=False)
    sentinel: dict[str, Any] = {}
    if settings.broker_url.startswith(SENTINEL):  # kombu asks the sentinels for the primary
        sentinel = {"master_name": settings.broker_sentinel_master}
        password = sentinel_parts(settings.broker_url)[2]
        if password:
            sentinel["sentinel_kwargs"] = {"password": password}
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue="jobservice.default",
        task_create_missing_queues=True,
        broker_transport_options={
            # Longer than any job, or Redis re-delivers running jobs (the claim CAS still guards).
            "visibility_timeout": settings.visibility_timeout_seconds,
            # Message priority (0 = first) within each model's queue; batches use a lower step.
            "priority_steps": PRIORITY_STEPS,
            "socket_timeout": 5.0,
            "socket_connect_timeout": settings.publish_timeout_seconds,
            **sentinel,
        },
        broker_connection_retry_on_startup=True,
        # A worker (or beat) whose broker went away waits for it, however long: it never exits over
        # it, and its reaper keeps requeueing dead runs meanwhile (workers/maintenance.py).
        broker_connection_max_retries=None,
        broker_connection_timeout=settings.publish_timeout_seconds,
        task_publish_retry=True,
        task_publish_retry_policy={
            "max_retries": 1,
            "interval_start": 0.0,
            "interval_step": 0.2,
            "interval_max": 0.2,
        },
        worker_send_task_events=False,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_pool_limit=4,
    )
    return app


def group_queue(group_id: str) -> str:
    """The Celery queue a card group consumes: ``group.<its id>`` with only safe characters."""
    return "group." + re.sub(r"[^A-Za-z0-9_.@-]", "_", group_id)


@dataclass(frozen=True)
class DispatchDecision:
    """What the dispatcher decided when it handed a job to a card group: load ``model`` (a cold
    start) or not, after unloading ``evict``. Stored with the dispatch (``jobs.dispatch_decision``)
    and carried by the job's message, so a re-sent message carries the same decision."""

    model: str
    load: bool = False
    evict: tuple[str, ...] = ()
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The decision as JSON (a message header, a database column)."""
        return {"model": self.model, "load": self.load, "evict": list(self.evict), "reason": self.reason}

    @classmethod
    def from_dict(cls, raw: object) -> DispatchDecision | None:
        """The decision ``as_dict`` wrote; None for anything else (no decision, or one unreadable)."""
        if not isinstance(raw, Mapping) or not isinstance(raw.get("model"), str):
            return None
        evict = raw.get("evict") or []
        if not isinstance(evict, list | tuple) or not all(isinstance(m, str) for m in evict):
            return None
        return cls(
            model=raw["model"],
            load=bool(raw.get("load", False)),
            evict=tuple(evict),
            reason=str(raw.get("reason") or ""),
        )


@dataclass(frozen=True)
class JobMessage:
    """One message to a card group's queue: run ``job_id``. ``decision`` is None only in a message
    of a release before format 2; ``trace`` is the submission's W3C ``traceparent`` (None: no trace)."""

    job_id: uuid.UUID
    group: str
    priority: int = 0
    decision: DispatchDecision | None = None
    trace: str | None = None
    version: int | None = None  # the format it was read in (None: this release's, to send)

    def headers(self) -> dict[str, Any]:
        """The message's headers (beside Celery's own, which name the task and its id)."""
        found: dict[str, Any] = {MESSAGE_HEADER: self.version or MESSAGE_VERSION}
        if self.decision is not None:
            found[DECISION_HEADER] = self.decision.as_dict()
        if self.trace:
            found[TRACE_HEADER] = self.trace
        return found

    @classmethod
    def received(cls, job_id: uuid.UUID, request: Any) -> JobMessage:
        """The message a worker is running, read from the Celery task's ``request`` (its queue and
        priority are not needed there and left at their defaults)."""
        version = _version(_header(request, MESSAGE_HEADER))
        trace = _header(request, TRACE_HEADER)
        return cls(
            job_id=job_id,
            group="",
            decision=DispatchDecision.from_dict(_header(request, DECISION_HEADER)),
            trace=trace if isinstance(trace, str) and trace else None,
            version=version,
        )


def _header(request: Any, name: str) -> Any:
    """A custom header of the message being run: Celery puts them on the request, or in its
    ``headers`` (by version and protocol)."""
    value = getattr(request, name, None)
    if value is None:
        value = (getattr(request, "headers", None) or {}).get(name)
    return value


def _version(raw: Any) -> int:
    try:
        return int(raw) if raw is not None else 1
    except (TypeError, ValueError):
        return 1


def message_version(request: Any) -> int:
    """The ``jobservice_message`` header of the message being run (1 when it has none)."""
    return _version(_header(request, MESSAGE_HEADER))


def send_job(app: Celery, message: JobMessage) -> None:
    """Publish ``message``: the worker of card group ``message.group`` runs ``message.job_id``."""
    queue = group_queue(message.group)
    app.send_task(
        RUN_JOB_TASK,
        args=[str(message.job_id)],
        queue=queue,
        routing_key=queue,
        task_id=str(message.job_id),
        priority=message.priority,
        headers=message.headers(),
    )


Send = Callable[[JobMessage], None]  # how the dispatcher and the reaper send a message


def sender(app: Celery) -> Send:
    """``send_job`` on ``app``, as the dispatcher and the reaper call it."""

    def send(message: JobMessage) -> None:
        send_job(app, message)

    return send


def _queue_keys(queue: str) -> list[str]:
    return [queue] + [f"{queue}{KOMBU_SEP}{step}" for step in PRIORITY_STEPS if step]


_ID_KEY = b'"id": "'  # the task id in a kombu message's headers (json.dumps' default separators)


def _job_id_of(raw: bytes | str) -> str | None:
    # Fast path: the first '"id": "' of a message is its headers' task id (the body before it is
    # base64, the other keys before it are not "id"); slicing it out is ~6x cheaper than parsing the
    # ~1 kB message, which matters when the reaper reads a queue of 10,000 (scripts/bench_scale.py).
    data = raw.encode() if isinstance(raw, str) else raw
    at = data.find(_ID_KEY)
    if at >= 0:
        candidate = data[at + len(_ID_KEY) : at + len(_ID_KEY) + 37]
        if len(candidate) == 37 and candidate[36:] == b'"' and candidate.count(b"-") == 4:
            return candidate[:36].decode("ascii", "replace")
    try:
        payload: Any = json.loads(raw)
    except (ValueError, TypeError):
        return None
    if isinstance(payload, list) and payload:  # unacked entries: [message, exchange, routing_key]
        payload = payload[0]
    if not isinstance(payload, dict):
        return None
    headers = payload.get("headers") or {}
    task_id = headers.get("id")
    return str(task_id) if task_id else None


class BrokerInspector:
    """Reads the Redis broker directly to learn which job ids still have a message."""

    def __init__(self, broker_url: str, *, timeout: float = 5.0, sentinel_master: str | None = None) -> None:
        self._client = redis_client(broker_url, timeout=timeout, sentinel_master=sentinel_master)

    @classmethod
    def of(cls, settings: Settings, *, timeout: float = 5.0) -> BrokerInspector:
        """The inspector of ``settings``' broker."""
        return cls(settings.broker_url, timeout=timeout, sentinel_master=settings.broker_sentinel_master)

    def pending_job_ids(
        self, queues: Iterable[str], *, unacked_grace_seconds: float | None = None
    ) -> set[str]:
        """Job ids with a message waiting in ``queues`` or delivered but not yet acknowledged.

        With ``unacked_grace_seconds``, a delivery older than that does not count: the caller asks
        about *queued* jobs, and a worker claims what it takes within moments, so a queued job's
        message held that long was taken by a worker that died before claiming it (Redis would give
        it back only after its visibility timeout).
        """
        found: set[str] = set()
        pipe = self._client.pipeline(transaction=False)
        for queue in queues:
            for key in _queue_keys(queue):
                pipe.lrange(key, 0, -1)
        pipe.hgetall(UNACKED_KEY)
        if unacked_grace_seconds is not None:
            pipe.zrangebyscore(UNACKED_INDEX_KEY, "-inf", time.time() - unacked_grace_seconds)
        results = pipe.execute()
        stale: set[bytes] = set(results.pop()) if unacked_grace_seconds is not None else set()
        unacked: dict[bytes, bytes] = results.pop()
        raws = [raw for result in results for raw in result]
        raws += [raw for tag, raw in unacked.items() if tag not in stale]
        for raw in raws:
            job_id = _job_id_of(raw)
            if job_id:
                found.add(job_id)
        return found

    def queue_depth(self, queue: str) -> int:
        """Messages waiting in ``queue`` (all priorities)."""
        return int(sum(self._client.llen(key) for key in _queue_keys(queue)))

    def ping(self) -> bool:
        """Whether the broker answers."""
        return bool(self._client.ping())

    def close(self) -> None:
        """Drop the connection pool."""
        self._client.close()


SENTINEL = "sentinel://"


def sentinel_parts(broker_url: str) -> tuple[list[tuple[str, int]], int, str | None]:
    """The sentinels (host, port), the database and the password of a kombu sentinel URL:
    ``sentinel://[:password@]host:port;sentinel://host2:port2[/db]``."""
    sentinels: list[tuple[str, int]] = []
    db, password = 0, None
    for part in broker_url.split(";"):
        part = part.strip()
        if not part:
            continue
        if not part.startswith(SENTINEL):
            raise ValueError(f"every part of a sentinel broker URL starts with {SENTINEL}, got {part!r}")
        parsed = urlsplit(part)
        if not parsed.hostname:
            raise ValueError(f"a sentinel without a host in {part!r}")
        sentinels.append((parsed.hostname, parsed.port or 26379))
        password = parsed.password or password
        if parsed.path.strip("/"):
            db = int(parsed.path.strip("/"))
    if not sentinels:
        raise ValueError("a sentinel broker URL names no sentinel")
    return sentinels, db, password


def redis_client(broker_url: str, *, timeout: float = 5.0, sentinel_master: str | None = None) -> redis.Redis:
    """A redis-py client for a Celery broker URL (``redis://``, ``redis+socket://``, or
    ``sentinel://`` with the monitored name: a client that asks the sentinels for the primary
    whenever it (re)connects, so it follows a failover)."""
    if broker_url.startswith(SENTINEL):
        if not sentinel_master:
            raise ValueError("a sentinel:// broker needs the name the sentinels monitor")
        sentinels, db, password = sentinel_parts(broker_url)
        watch = Sentinel(
            sentinels,
            sentinel_kwargs={
                "socket_timeout": timeout,
                "socket_connect_timeout": timeout,
                "password": password,
            },
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )
        return watch.master_for(
            sentinel_master, db=db, password=password, socket_timeout=timeout, socket_connect_timeout=timeout
        )
    if broker_url.startswith("redis+socket://"):
        path, _, query = broker_url[len("redis+socket://") :].partition("?")
        db = 0
        for part in query.split("&"):
            if part.startswith("virtual_host=") or part.startswith("db="):
                db = int(part.split("=", 1)[1] or 0)
        return redis.Redis(
            unix_socket_path=path, db=db, socket_timeout=timeout, socket_connect_timeout=timeout
        )
    if broker_url.startswith(("redis://", "rediss://", "unix://")):
        return redis.Redis.from_url(broker_url, socket_timeout=timeout, socket_connect_timeout=timeout)
    raise ValueError(
        f"only Redis brokers (or Redis Sentinel) are supported, got {broker_url.split(':', 1)[0]}://"
    )
