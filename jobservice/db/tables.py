"""Tables: jobs (the source of truth), job events (an audit trail of transitions), workers, and
the fleet's (card groups, their ledger and loads, measured model speeds, usage and fair share).

Status columns change only through the transition functions in ``jobservice.jobs.transitions``.
"""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    Uuid,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class JobStatus(enum.StrEnum):
    """Where a job is in its life. Finer detail lives in ``stage``."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        """True once nothing more will happen to the job."""
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED})


class Stage(enum.StrEnum):
    """What a running job is doing right now."""

    QUEUED = "queued"
    FETCHING = "fetching"
    LOADING = "loading"
    GENERATING = "generating"
    ENCODING = "encoding"
    VALIDATING = "validating"
    UPLOADING = "uploading"
    DONE = "done"


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (the only clock the tables use)."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that always comes back timezone-aware UTC, on SQLite as on PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """A timestamp as stored: UTC (naive on SQLite)."""
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        # SQLite has no zone type: store naive UTC so comparisons stay lexical and correct.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """A stored timestamp as read: timezone-aware UTC."""
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base with a naming convention, so migrations name constraints predictably."""

    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, datetime: UTCDateTime}


STATUS_TYPE = Enum(
    JobStatus,
    name="job_status",
    native_enum=False,
    create_constraint=True,
    length=16,
    values_callable=lambda e: [m.value for m in e],
    validate_strings=True,
)


class Job(Base):
    """One submitted job."""

    __tablename__ = "jobs"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    task: Mapped[str] = mapped_column(String(32))
    model: Mapped[str] = mapped_column(String(128))
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    source: Mapped[str] = mapped_column(String(16), default="api")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[JobStatus] = mapped_column(STATUS_TYPE, default=JobStatus.QUEUED)
    stage: Mapped[str] = mapped_column(String(32), default=Stage.QUEUED.value)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    input_keys: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    input_meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    output_key: Mapped[str | None] = mapped_column(String(512))
    report_key: Mapped[str | None] = mapped_column(String(512))
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    worker_id: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), unique=True)
    request_fingerprint: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    timings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    verdict: Mapped[str | None] = mapped_column(String(16))
    validation_summary: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    cold_start: Mapped[bool | None] = mapped_column(Boolean)
    # A job run for a nightly batch (jobservice.nightly): which batch, case and repeat it is.
    batch_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, ForeignKey("batches.id", ondelete="SET NULL"))
    batch_case: Mapped[str | None] = mapped_column(String(128))
    batch_repeat: Mapped[int | None] = mapped_column(Integer)
    # Who owns it (jobservice.auth): the tenant, and the API key that submitted it (None: auth off).
    tenant: Mapped[str] = mapped_column(String(64), default="default", server_default="default")
    submitted_by: Mapped[str | None] = mapped_column(String(32))
    # Retention (jobservice.retention): files are deleted after expires_at; the row stays, marked.
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    expired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Deleted on request (jobservice.retention.deletion; migration 0019): its files are gone and it is
    # gone from every list and read (404 job_deleted); the row stays for counters and the audit trail.
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Webhooks (jobservice.webhooks): where to POST events, and which ("start,completed").
    webhook_url: Mapped[str | None] = mapped_column(Text)
    webhook_events: Mapped[str | None] = mapped_column(String(64))
    # The fleet (jobservice.fleet): the card group a queued job was handed to (its message is in
    # that group's queue; None: still in the database only), the seconds of video it will make (for
    # card-second estimates and ETAs), and the card-seconds it used (``jobservice.fleet.usage``).
    dispatched_to: Mapped[str | None] = mapped_column(String(255))
    # What the dispatcher decided when it handed the job to ``dispatched_to`` (what to load, what to
    # evict first: ``jobservice.broker.DispatchDecision``); a re-sent message carries the same.
    dispatch_decision: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    output_seconds: Mapped[float | None] = mapped_column(Float)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Its ETA's moves, each with its cause, at most the last 20 (jobservice.fleet.eta; migration
    # 0015_fair_share_eta).
    eta_revisions: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    # Retry on a failed gate (jobservice.jobs.retries): how many more tries with the next seed the
    # job was promised, and each try the gate failed (seed, verdict, files), oldest first.
    retry_on_validation_failure: Mapped[int] = mapped_column(Integer, server_default="0")
    validation_attempts: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)
    # A job submitted in a job group (jobservice.groups, ``POST /job-groups``): which group, and the
    # manifest row (1 = the first job) it was made from.
    group_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, ForeignKey("job_groups.id", ondelete="SET NULL"))
    group_row: Mapped[int | None] = mapped_column(Integer)
    # Traces across hosts (jobservice.tracing): the W3C trace context (traceparent, tracestate) of the
    # request that submitted it, which the worker that claims it continues; None with tracing off.
    trace_context: Mapped[dict[str, str] | None] = mapped_column(JSON)

    __table_args__ = (
        Index("ix_jobs_created_at_id", "created_at", "id"),
        # Migration 0006: listing pages and queue positions are index ranges (scripts/bench_scale.py).
        Index("ix_jobs_status_created_at_id", "status", "created_at", "id"),
        Index("ix_jobs_model_created_at_id", "model", "created_at", "id"),
        Index(
            "ix_jobs_model_status_priority_created_at_id", "model", "status", "priority", "created_at", "id"
        ),
        Index("ix_jobs_status_lease_expires_at", "status", "lease_expires_at"),
        Index("ix_jobs_batch_id_batch_case_batch_repeat", "batch_id", "batch_case", "batch_repeat"),
        Index("ix_jobs_batch_id_created_at_id", "batch_id", "created_at", "id"),
        Index("ix_jobs_tenant_created_at_id", "tenant", "created_at", "id"),
        Index("ix_jobs_tenant_status_batch_id", "tenant", "status", "batch_id"),
        Index("ix_jobs_expires_at", "expires_at"),
        Index("ix_jobs_finished_at", "finished_at"),
        # Migration 0009: the dispatcher takes a tenant's oldest queued job of a model and priority.
        Index(
            "ix_jobs_model_status_priority_tenant_created_at_id",
            "model",
            "status",
            "priority",
            "tenant",
            "created_at",
            "id",
        ),
        # Migration 0012: a group's jobs in row order (their created_at follows the rows), and its
        # counts by status (progress, the live stream).
        Index("ix_jobs_group_id_created_at_id", "group_id", "created_at", "id"),
        Index("ix_jobs_group_id_status", "group_id", "status"),
    )

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.model} {self.status}>"


class JobEvent(Base):
    """One recorded transition or notable moment of a job (the audit trail)."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID] = mapped_column(Uuid, ForeignKey("jobs.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    from_status: Mapped[str | None] = mapped_column(String(16))
    to_status: Mapped[str | None] = mapped_column(String(16))
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[str | None] = mapped_column(String(255))
    detail: Mapped[str] = mapped_column(Text, default="")
    # Who caused it: an API key id (``key_...``), ``worker:<id>``, or ``system`` (reaper, beat, gc).
    actor: Mapped[str | None] = mapped_column(String(300))

    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)


class WorkerRecord(Base):
    """A worker process: the cards it owns, the models it serves, when it was last seen."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    devices: Mapped[str] = mapped_column(String(128))
    models: Mapped[list[str]] = mapped_column(JSON, default=list)
    info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    stopped_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Batch(Base):
    """A nightly regression batch: one run of a spec's cases, compared with a baseline.

    Its jobs carry ``batch_id``; ``results`` holds every case's samples and the comparison,
    computed once when the last job finished (``jobservice.nightly.finalize``).
    """

    __tablename__ = "batches"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(128))
    spec_digest: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    spec_text: Mapped[str] = mapped_column(Text, default="")
    origin: Mapped[str] = mapped_column(String(512), default="")
    source: Mapped[str] = mapped_column(String(16), default="cli")
    status: Mapped[str] = mapped_column(String(16), default="running")  # nightly.states.BatchStatus
    verdict: Mapped[str | None] = mapped_column(String(16))
    pinned: Mapped[bool] = mapped_column(Boolean, default=False)
    baseline_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    total_jobs: Mapped[int] = mapped_column(Integer, default=0)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), unique=True)
    environment: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    results: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    submitted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    tenant: Mapped[str] = mapped_column(String(64), default="default", server_default="default")
    submitted_by: Mapped[str | None] = mapped_column(String(32))
    webhook_url: Mapped[str | None] = mapped_column(Text)
    webhook_events: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (
        Index("ix_batches_tenant_created_at", "tenant", "created_at"),
        Index("ix_batches_name_created_at", "name", "created_at"),
        Index("ix_batches_status_updated_at", "status", "updated_at"),
    )

    def __repr__(self) -> str:
        return f"<Batch {self.id} {self.name} {self.status}>"


class JobGroup(Base):
    """A job group: a set of jobs made at once, from a manifest (``POST /job-groups``, one job per
    row) or a nightly spec (its ``Batch`` row has the same id; ``manifest_format`` ``spec``).

    Its jobs carry ``group_id``; its progress and status are counted from them when read
    (``jobservice.groups.presenters``), so nothing here changes while they run. ``canceled_at`` is
    set when the group was canceled (its unfinished jobs were canceled with it).
    """

    __tablename__ = "job_groups"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(128), default="")
    tenant: Mapped[str] = mapped_column(String(64), default="default", server_default="default")
    submitted_by: Mapped[str | None] = mapped_column(String(32))
    source: Mapped[str] = mapped_column(String(16), default="api")
    manifest_format: Mapped[str] = mapped_column(String(8))  # csv, jsonl
    manifest_sha256: Mapped[str] = mapped_column(String(64))
    columns: Mapped[list[str]] = mapped_column(JSON, default=list)
    total_jobs: Mapped[int] = mapped_column(Integer, default=0)
    models: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # model -> jobs
    idempotency_key: Mapped[str | None] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    canceled_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # group.started / group.completed go here (a nightly run's: its spec's webhook; migration 0018)
    webhook_url: Mapped[str | None] = mapped_column(Text)
    webhook_events: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (Index("ix_job_groups_tenant_created_at", "tenant", "created_at"),)

    def __repr__(self) -> str:
        return f"<JobGroup {self.id} {self.name} {self.total_jobs} jobs>"


class ApiKey(Base):
    """An API key: only a hash of its secret is kept (jobservice.auth.keys)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    tenant: Mapped[str] = mapped_column(String(64))
    role: Mapped[str] = mapped_column(String(16), default="user")
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    hint: Mapped[str] = mapped_column(String(32), default="")
    limits: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Tenant(Base):
    """Per-tenant overrides of the quota and retention defaults, and the tenant's fair-share weight
    (a tenant needs no row to exist)."""

    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    limits: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class JobCounter(Base):
    """A running total derived from the jobs table for GET /metrics (``jobservice.metrics``)."""

    __tablename__ = "job_counters"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    labels: Mapped[str] = mapped_column(String(512), primary_key=True)  # canonical JSON of the labels
    value: Mapped[float] = mapped_column(Float, default=0.0)


class JobCounterMark(Base):
    """Up to when jobs have been added to ``job_counters``."""

    __tablename__ = "job_counter_marks"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    counted_until: Mapped[datetime] = mapped_column(UTCDateTime)


class TenantUsageCount(Base):
    """A tenant's interactive jobs queued or running, kept by triggers on ``jobs`` (migration 0007)."""

    __tablename__ = "tenant_usage"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    active_jobs: Mapped[int] = mapped_column(Integer)


class TenantJobMinute(Base):
    """How many jobs a tenant created in one UTC minute, kept by triggers on ``jobs`` (migration 0007)."""

    __tablename__ = "tenant_job_minutes"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    minute: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    jobs: Mapped[int] = mapped_column(Integer)


class QueueCount(Base):
    """How many jobs of one model, priority and tenant are queued, and the seconds of video they will
    make, kept by triggers on ``jobs`` (migrations 0008, 0009)."""

    __tablename__ = "queue_counts"

    model: Mapped[str] = mapped_column(String(128), primary_key=True)
    priority: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    queued: Mapped[int] = mapped_column(Integer)
    output_s: Mapped[float] = mapped_column(Float, default=0.0)


class WebhookSecret(Base):
    """A tenant's webhook signing secret (``whsec_...``); the previous one signs too for a while."""

    __tablename__ = "webhook_secrets"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    secret: Mapped[str] = mapped_column(String(128))
    previous_secret: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    rotated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class WebhookDelivery(Base):
    """One webhook event to deliver (the outbox); rows of one ``subject`` go out in ``id`` order."""

    __tablename__ = "webhook_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    message_id: Mapped[str] = mapped_column(String(64), unique=True)
    subject: Mapped[str] = mapped_column(String(64))  # "job:<id>" or "batch:<id>"
    job_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, ForeignKey("jobs.id", ondelete="CASCADE"))
    batch_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, ForeignKey("batches.id", ondelete="CASCADE"))
    tenant: Mapped[str] = mapped_column(String(64))
    event_type: Mapped[str] = mapped_column(String(32))
    url: Mapped[str] = mapped_column(Text)
    payload: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_webhook_deliveries_status_next_attempt_at", "status", "next_attempt_at"),
        Index("ix_webhook_deliveries_subject_id", "subject", "id"),
        Index("ix_webhook_deliveries_job_id_id", "job_id", "id"),
    )


# --- the fleet (jobservice.fleet; migration 0009) ---------------------------------------------------
class FleetGroup(Base):
    """A card group (one worker process): what it may serve, holds and runs, and its state now."""

    __tablename__ = "fleet_groups"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)  # the worker's node name
    devices: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(8))  # cpu, cuda, npu
    cards: Mapped[int] = mapped_column(Integer)
    memory_gb_per_card: Mapped[float | None] = mapped_column(Float)  # None: not known, no limit
    eligible: Mapped[list[str]] = mapped_column(JSON, default=list)
    # model -> {"since": iso, "last_used": iso}
    resident: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    state: Mapped[str] = mapped_column(String(16))  # the ledger's current state
    state_model: Mapped[str | None] = mapped_column(String(128))
    state_since: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    span_id: Mapped[int | None] = mapped_column(Integer)  # its open ledger span
    job_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)  # loading or generating now
    next_job_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)  # dispatched, not yet claimed
    busy_until: Mapped[datetime | None] = mapped_column(UTCDateTime)  # when its job should end
    hostname: Mapped[str] = mapped_column(String(255), default="")
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    # Migration 0015_group_lifecycle: a group that takes no job, for now or for good. Draining: its
    # worker was asked to stop. Unhealthy: a card is not (``health``: each problem, a sentence).
    # Retired: down past the retention, or forgotten; gone from /fleet and /metrics, history kept.
    draining_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    unhealthy_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    health: Mapped[list[str] | None] = mapped_column(JSON)
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    @property
    def accepting(self) -> bool:
        """Whether the group may be given a job (not draining, unhealthy or retired)."""
        return self.draining_since is None and self.unhealthy_since is None and self.retired_at is None


class LedgerSpan(Base):
    """One stretch of one group's time in one state; a group's spans tile its life without gaps."""

    __tablename__ = "fleet_ledger"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    group_id: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16))
    model: Mapped[str | None] = mapped_column(String(128))
    job_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    cards: Mapped[int] = mapped_column(Integer, default=1)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # None: the group is in it now
    reason: Mapped[str | None] = mapped_column(String(128))

    __table_args__ = (
        Index("ix_fleet_ledger_group_id_started_at", "group_id", "started_at"),
        Index("ix_fleet_ledger_ended_at", "ended_at"),
    )


class FleetEvent(Base):
    """A load, an eviction or a failed load on a group: what, when, why, and how long it took (a
    load) or had been resident (an eviction)."""

    __tablename__ = "fleet_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    group_id: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    kind: Mapped[str] = mapped_column(String(16))  # load, evict, load_failed
    model: Mapped[str] = mapped_column(String(128))
    reason: Mapped[str] = mapped_column(String(128), default="")
    seconds: Mapped[float | None] = mapped_column(Float)
    job_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)

    __table_args__ = (
        Index("ix_fleet_events_at", "at"),
        Index("ix_fleet_events_group_id_at", "group_id", "at"),
    )


class ModelSpeed(Base):
    """What the service measured of a model on one kind of card: decayed sums for a line through
    (seconds of output, seconds of generation), and its cold loads."""

    __tablename__ = "model_speeds"

    model: Mapped[str] = mapped_column(String(128), primary_key=True)
    card_kind: Mapped[str] = mapped_column(String(8), primary_key=True)
    samples: Mapped[float] = mapped_column(Float, default=0.0)
    sum_x: Mapped[float] = mapped_column(Float, default=0.0)
    sum_y: Mapped[float] = mapped_column(Float, default=0.0)
    sum_xx: Mapped[float] = mapped_column(Float, default=0.0)
    sum_xy: Mapped[float] = mapped_column(Float, default=0.0)
    loads: Mapped[int] = mapped_column(Integer, default=0)
    load_s: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)


class TenantShare(Base):
    """A tenant's card-seconds, decayed with the fair-share half-life, as of ``as_of``."""

    __tablename__ = "tenant_shares"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    usage: Mapped[float] = mapped_column(Float, default=0.0)
    as_of: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # When it last began competing (it submitted with no job waiting to be dispatched; migration
    # 0015_fair_share_eta).
    activated_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class FairShareFloor(Base):
    """The least fair-share level seen among tenants with jobs waiting, as of ``as_of``: what a tenant
    that starts competing while nobody else waits is lifted to (``jobservice.fleet.policy.lift``).
    One row (id 1)."""

    __tablename__ = "fair_share_floor"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    level: Mapped[float] = mapped_column(Float)
    as_of: Mapped[datetime] = mapped_column(UTCDateTime)


class JobUsage(Base):
    """The card time one attempt of a job used, by phase; charged to its tenant unless the service
    wasted it (a worker lost, a lease lost)."""

    __tablename__ = "job_usage"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, ForeignKey("jobs.id", ondelete="SET NULL"))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    tenant: Mapped[str] = mapped_column(String(64))
    model: Mapped[str] = mapped_column(String(128))
    group_id: Mapped[str] = mapped_column(String(255))
    card_kind: Mapped[str] = mapped_column(String(8))
    cards: Mapped[int] = mapped_column(Integer)
    load_s: Mapped[float] = mapped_column(Float, default=0.0)
    generate_s: Mapped[float] = mapped_column(Float, default=0.0)
    finish_s: Mapped[float] = mapped_column(Float, default=0.0)
    card_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    outcome: Mapped[str] = mapped_column(String(16))  # succeeded, failed, canceled, worker_lost, lease_lost
    charged: Mapped[bool] = mapped_column(Boolean, default=True)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        Index("ix_job_usage_recorded_at", "recorded_at"),
        Index("ix_job_usage_tenant_recorded_at", "tenant", "recorded_at"),
        Index("ix_job_usage_job_id", "job_id"),
    )


class FleetLock(Base):
    """A named row whose update serializes the dispatchers (PostgreSQL row lock, SQLite write lock)."""

    __tablename__ = "fleet_locks"

    name: Mapped[str] = mapped_column(String(32), primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class FleetOffer(Base):
    """A free card group's standing offer (``jobservice.fleet.offers``): the last dispatch round
    found that a new job of ``model`` at ``priority`` would start on ``group_id`` at once, warm, so a
    submission takes it with one compare-and-swap on the group instead of waiting for a round.
    Every round replaces all of them; one that is ``until`` past is not taken."""

    __tablename__ = "fleet_offers"

    group_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    model: Mapped[str] = mapped_column(String(128), primary_key=True)
    priority: Mapped[int] = mapped_column(Integer, primary_key=True)
    reason: Mapped[str] = mapped_column(String(32))  # the policy's reason for the decision (warm)
    # The model's measured cost as the round saw it (``ModelCost``): a job runs overhead_s + speed x
    # its seconds of output, which is how long the group is then busy.
    overhead_s: Mapped[float] = mapped_column(Float)
    speed: Mapped[float] = mapped_column(Float)
    until: Mapped[datetime] = mapped_column(UTCDateTime)  # when a silent worker counts as offline

    __table_args__ = (Index("ix_fleet_offers_model_priority", "model", "priority"),)


class FleetForecast(Base):
    """The latest ETA forecast (``jobservice.fleet.eta``): one row, replaced every few seconds."""

    __tablename__ = "fleet_forecasts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    computed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    body: Mapped[str] = mapped_column(Text)


class Upload(Base):
    """A file a client sends straight to the object store (``jobservice.uploads``): declared, then its
    bytes PUT (in one piece or in parts), then completed once its content passed the form's checks."""

    __tablename__ = "uploads"

    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    tenant: Mapped[str] = mapped_column(String(64), default="default")
    kind: Mapped[str] = mapped_column(String(16))  # the input it can be: image or audio
    filename: Mapped[str] = mapped_column(String(255))
    content_type: Mapped[str] = mapped_column(String(128))  # as declared
    size: Mapped[int] = mapped_column(BigInteger)  # as declared; the stored object must match
    key: Mapped[str] = mapped_column(String(512))
    multipart_id: Mapped[str | None] = mapped_column(String(1024))  # the store's upload id, if any
    part_size: Mapped[int] = mapped_column(BigInteger)
    parts: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending | ready
    meta: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # the content check's facts, once ready
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # the first job that used it

    __table_args__ = (
        Index("ix_uploads_expires_at", "expires_at"),
        Index("ix_uploads_tenant", "tenant"),
        # Migration 0013: the pending-uploads quota counts a tenant's live pending uploads by range.
        Index("ix_uploads_tenant_status_expires_at", "tenant", "status", "expires_at"),
    )
