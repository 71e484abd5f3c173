"""Settings of the queue and a job's run: the broker, leases, the reaper and the priority batch work
queues at (jobservice.broker, jobservice.jobs, jobservice.groups, jobservice.nightly)."""

from __future__ import annotations

from typing import Self

from pydantic import AliasChoices, BaseModel, Field, model_validator


class QueueSettings(BaseModel):
    """Queue, leases, reaper.

    Read by `jobservice.broker` (the Celery app every process shares), `jobservice.jobs` (leases,
    the reaper, submission), the workers' run of a job, and whatever queues batch work (job groups,
    nightly batches, the ETA forecast).
    """

    broker_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="Celery broker (Redis; `jobservice up` starts its own): redis://, rediss://, "
        "redis+socket:// or, behind Redis Sentinel, sentinel://host:26379;sentinel://host2:26379/0 "
        "(every sentinel, then the database; docs/operations.md#a-broker-that-fails-over-redis-sentinel).",
    )
    broker_sentinel_master: str = Field(
        default="jobservice", description="With a sentinel:// broker: the name the sentinels monitor."
    )
    publish_timeout_seconds: float = Field(
        default=2.0, gt=0, description="How long connecting to the broker (to publish a job) may take."
    )
    visibility_timeout_seconds: int = Field(
        default=12 * 3600,
        description="Redis redelivery window of an unacknowledged message: must exceed the longest job "
        "(checked at start).",
    )
    heartbeat_seconds: float = Field(
        default=5.0, gt=0, description="A running job renews its lease at least this often."
    )
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A running job whose lease is not renewed for this long is taken back by the reaper "
        "(its worker died); longer than heartbeat_seconds.",
    )
    reap_interval_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often workers (and `jobservice reap`) run the reaper; a card group whose "
        "worker has not been seen for three times this (at least 15 s) is down.",
    )
    resend_after_seconds: float = Field(
        default=10.0,
        ge=0,
        description="A job handed to a card group whose message has not gone out this long is sent again.",
    )
    max_attempts: int = Field(
        default=3, ge=1, description="Runs of a job whose worker died, before it fails as `worker_lost`."
    )
    job_timeout_seconds: float = Field(
        default=3600.0, gt=0, description="A run's time limit (a model's deployment entry may set its own)."
    )
    queue_batch_priority: int = Field(
        default=6,
        ge=1,
        le=9,
        # JOBSERVICE_BATCH_PRIORITY, its name before it was a queue setting, still works (the new
        # name wins when both are set). The aliases are whole variable names: no prefix is added.
        validation_alias=AliasChoices("JOBSERVICE_QUEUE_BATCH_PRIORITY", "JOBSERVICE_BATCH_PRIORITY"),
        description="Queue priority of batch work, every job that is not interactive (nightly batches, "
        "job groups); 0 (interactive) is served first. Formerly `JOBSERVICE_BATCH_PRIORITY`, still read.",
    )
    progress_min_interval_seconds: float = Field(
        default=0.5, ge=0, description="A running job writes its progress at most this often."
    )

    @property
    def batch_priority(self) -> int:
        """The old name of ``queue_batch_priority``, for code written before the move (read only)."""
        return self.queue_batch_priority

    @model_validator(mode="after")
    def _redelivery_after_timeout(self) -> Self:
        # Redis re-delivers an unacknowledged message after visibility_timeout: if a job may run
        # longer, a second worker would start it while the first still runs (stack-probe section 2).
        if self.visibility_timeout_seconds <= self.job_timeout_seconds:
            raise ValueError(
                f"visibility_timeout_seconds ({self.visibility_timeout_seconds}) must exceed "
                f"job_timeout_seconds ({self.job_timeout_seconds:g}); "
                "raise JOBSERVICE_VISIBILITY_TIMEOUT_SECONDS"
            )
        if self.lease_seconds <= self.heartbeat_seconds:
            raise ValueError(
                "lease_seconds must be longer than heartbeat_seconds, or live jobs would be reaped"
            )
        return self
