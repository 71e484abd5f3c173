"""Typed settings for every jobservice process.

One pydantic-settings class, read from ``JOBSERVICE_*`` environment variables (and an optional
``.env``), built by the app factory, the worker bootstrap or the CLI, never at import time.
Tests build ``Settings(...)`` directly instead of editing the environment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """Configuration shared by the API, the workers and the CLI."""

    model_config = SettingsConfigDict(
        env_prefix="JOBSERVICE_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    # --- where things live -------------------------------------------------------------
    var_dir: Path = Field(
        default=Path("var"), description="Root for embedded state (SQLite, objects, spool)."
    )
    database_url: str = Field(default="", description="SQLAlchemy URL; empty means SQLite under var_dir.")
    broker_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="Celery broker (Redis): redis://, rediss://, redis+socket:// or, behind Redis Sentinel, "
        "sentinel://host:26379;sentinel://host2:26379/0 (every sentinel, then the database).",
    )
    broker_sentinel_master: str = Field(
        default="jobservice", description="With a sentinel:// broker: the name the sentinels monitor."
    )

    # --- object store ------------------------------------------------------------------
    storage_backend: Literal["local", "s3"] = "local"
    storage_root: Path | None = Field(
        default=None, description="Local object store folder (var_dir/objects)."
    )
    s3_bucket: str = "jobservice"
    s3_endpoint_url: str | None = None
    s3_public_endpoint_url: str | None = Field(
        default=None, description="Endpoint used in presigned URLs handed to clients, if it differs."
    )
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    s3_presign_seconds: int = Field(default=3600, ge=60, le=7 * 24 * 3600)
    s3_multipart_threshold_mb: int = Field(default=16, ge=5)
    s3_create_bucket: bool = Field(default=True, description="Create the bucket on first use if missing.")

    # --- uploads -------------------------------------------------------------------------
    max_request_mb: int = Field(default=256, ge=1)
    max_image_mb: int = Field(default=20, ge=1)
    max_audio_mb: int = Field(default=100, ge=1)
    max_image_pixels: int = Field(default=40_000_000, ge=64 * 64)
    min_image_side: int = Field(default=64, ge=16)
    min_audio_seconds: float = Field(default=0.5, gt=0)
    max_audio_seconds: float = Field(default=300.0, gt=0)
    spool_dir: Path | None = Field(default=None, description="Where uploads are streamed (var_dir/spool).")

    # --- queue, leases, reaper -------------------------------------------------------------
    heartbeat_seconds: float = Field(default=5.0, gt=0)
    lease_seconds: float = Field(default=30.0, gt=0)
    reap_interval_seconds: float = Field(default=5.0, gt=0)
    resend_after_seconds: float = Field(default=10.0, ge=0)
    max_attempts: int = Field(default=3, ge=1)
    job_timeout_seconds: float = Field(default=3600.0, gt=0)
    visibility_timeout_seconds: int = Field(
        default=12 * 3600, description="Redis redelivery window; must exceed the longest job."
    )
    publish_timeout_seconds: float = Field(default=2.0, gt=0)
    metrics_settle_seconds: float = Field(
        default=60.0,
        ge=0,
        description="GET /metrics counts a job this long after it was created or finished, so a row whose "
        "transaction commits late (SQLite waits up to 30 s for its lock) is never skipped.",
    )

    # --- catalog -------------------------------------------------------------------------
    catalog_extra: list[str] = Field(
        default_factory=list,
        description="``module:function`` providers of extra ModelSpecs (tests, plugins).",
    )
    deployment_file: Path | None = Field(
        default=None,
        description="YAML or TOML naming the enabled real models, their paths and endpoints, and the "
        "card groups of the workers (docs/deployment.md).",
    )

    # --- workers -------------------------------------------------------------------------
    worker_devices: str = "cpu"
    worker_id: str | None = None
    worker_models: list[str] = Field(default_factory=list, description="Restrict a worker to these models.")
    scratch_dir: Path | None = Field(default=None, description="Per-job scratch space (var_dir/scratch).")
    torch_threads: int | None = Field(default=None, ge=1)
    progress_min_interval_seconds: float = Field(default=0.5, ge=0)
    worker_group: str | None = Field(
        default=None, description="The deployment file's card group this worker runs (by its name)."
    )
    worker_memory_gb: float | None = Field(
        default=None,
        gt=0,
        description="Memory of each of the worker's cards in GB, when the deployment file's group does not "
        "say it and the cards cannot tell (a CPU worker that should hold only what fits).",
    )
    worker_overlap_finish: bool = Field(
        default=True,
        description="Finish a generated job (encoder flush, output gate, upload, record) on a "
        "background thread while the card generates the next one; false: one job at a time, start to end.",
    )

    # --- the fleet (jobservice.fleet) -------------------------------------------------------
    fair_share_half_life_seconds: float = Field(
        default=3600.0,
        gt=0,
        description="Fair share weighs a tenant's card-seconds by age: halved every this many seconds.",
    )
    forecast_interval_seconds: float = Field(
        default=5.0, gt=0, description="How often the queued jobs' ETAs are worked out again."
    )

    # --- API -----------------------------------------------------------------------------
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    api_access_log: Literal["all", "changes", "off"] = Field(
        default="changes",
        description="gunicorn's access log: every request, every request but successful reads "
        "(GET/HEAD/OPTIONS under 400: polls, pages, downloads), or none; unhandled errors are "
        "logged by the app either way.",
    )
    api_workers: int = Field(default=2, ge=1)
    # gthread threads per API process: a live stream or a Prefer wait holds one (see stream_limit);
    # scripts/bench_streams.py measured 192 streams held by one process with 256 threads.
    api_threads: int = Field(default=64, ge=1)
    stream_heartbeat_seconds: float = Field(
        default=15.0, gt=0, description="Live event streams send a keep-alive comment this often."
    )
    stream_max_seconds: float = Field(
        default=45.0, gt=0, description="A live event stream is closed after this; clients resume it."
    )
    watch_interval_seconds: float = Field(
        default=0.25, gt=0, description="How often an API process polls the jobs its streams watch."
    )
    stream_limit: int = Field(
        default=0,
        ge=0,
        description="Streams and Prefer waits one API process holds at once; 0: 3/4 of api_threads.",
    )
    public_base_url: str | None = None
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="Other sites whose pages may POST to this service (e.g. https://portal.example.com).",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description='Host names this service answers for (DNS rebinding); ["*"]: any. Empty: loopback '
        "names (localhost, 127.0.0.1, ::1, *.localhost) when auth is off, any host when auth is keys.",
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="Signs web-session cookies (CSRF); unset: generated once into var_dir/secret_key.",
    )
    log_level: str = "INFO"
    log_format: Literal["text", "json"] = Field(
        default="text", description="`json`: every process writes one JSON object per log line."
    )

    # --- keys, tenants, quotas, retention (jobservice.auth, jobservice.quotas, jobservice.retention)
    auth: Literal["keys", "off"] = Field(
        default="keys",
        description="`keys`: every request needs `Authorization: Bearer <key>`; `off`: anyone who reaches "
        "the port is the admin of tenant `default` (loopback only unless auth_off_anywhere).",
    )
    auth_off_anywhere: bool = Field(
        default=False, description="Allow auth=off on a non-loopback address (you put auth in front)."
    )
    default_tenant: str = Field(default="default", description="The tenant of auth=off requests.")
    quota_active_jobs: int = Field(default=100, ge=0, description="Jobs queued+running at once, per tenant.")
    quota_batch_jobs: int = Field(default=500, ge=0, description="Jobs (cases x repeats) in one batch.")
    quota_jobs_per_hour: int = Field(default=2000, ge=0, description="Jobs created per rolling hour.")
    quota_requests_per_minute: int = Field(default=1200, ge=0, description="API requests per minute per key.")
    min_free_mb: int = Field(
        default=1024, ge=0, description="Below this free space in the store or spool, submissions get 507."
    )
    retention_hours: float = Field(default=720.0, gt=0, description="Jobs' files are deleted after this.")
    gc_interval_seconds: float = Field(default=300.0, gt=0, description="How often the beat sweeps.")

    # --- nightly batches (jobservice.batches) ----------------------------------------------
    batch_priority: int = Field(
        default=6, ge=1, le=9, description="Queue priority of batch jobs; 0 (interactive) is served first."
    )
    batch_root: Path = Field(
        default=Path("."),
        description="Spec and input paths given to the API or the beat resolve under this folder.",
    )
    batch_schedules: list[dict[str, Any]] = Field(
        default_factory=list,
        description='Runs of `jobservice beat`: [{"spec": "batches/nightly.yaml", "cron": "0 2 * * *"}].',
    )
    batch_timezone: str = Field(default="UTC", description="Time zone of the schedules' cron expressions.")
    batch_tick_seconds: float = Field(
        default=30.0, gt=0, description="How often the beat finishes batches and resumes interrupted ones."
    )
    batch_history: int = Field(default=14, ge=2, le=365, description="Runs in a batch report's trend charts.")

    # --- webhooks (jobservice.webhooks) -------------------------------------------------------
    webhook_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated host names or addresses a webhook may target although they are "
        "private or loopback, or over plain http (e.g. `hooks.internal,10.0.0.7`).",
    )
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=60, description="Read timeout of a POST.")
    webhook_retry_base_seconds: float = Field(
        default=5.0, gt=0, description="First retry delay; later ones grow to 30 s, 2 min, 10 min, 1 h, 3 h."
    )
    webhook_retry_max_seconds: float = Field(default=3 * 3600.0, gt=0, description="Longest retry delay.")
    webhook_retry_horizon_seconds: float = Field(
        default=26 * 3600.0, gt=0, description="A delivery still failing this long after its event gives up."
    )
    webhook_sweep_seconds: float = Field(
        default=1.0, gt=0, description="How often the beat looks for due (and stalled) deliveries."
    )
    webhook_claim_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A delivery claimed this long ago without a result (its process died) is sent "
        "again; keep it above the longest POST, 2 x (5 s + webhook_timeout_seconds).",
    )

    @field_validator("webhook_allowed_hosts", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):  # "a,b", or a JSON list (what child processes are given)
            parts = json.loads(value) if value.lstrip().startswith("[") else value.split(",")
            return [str(part).strip().lower() for part in parts if str(part).strip()]
        return value

    @model_validator(mode="after")
    def _redelivery_after_timeout(self) -> Settings:
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

    @field_validator("database_url")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()

    # --- derived paths ---------------------------------------------------------------------
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to SQLite under ``var_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.var_dir / 'jobservice.db').resolve()}"

    def resolved_storage_root(self) -> Path:
        """The local object store folder."""
        return (self.storage_root or self.var_dir / "objects").resolve()

    def resolved_spool_dir(self) -> Path:
        """Where uploads are streamed before they go to the object store."""
        return (self.spool_dir or self.var_dir / "spool").resolve()

    def resolved_scratch_dir(self) -> Path:
        """Where a worker keeps a job's inputs and outputs while it runs."""
        return (self.scratch_dir or self.var_dir / "scratch").resolve()
