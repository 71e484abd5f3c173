"""Typed settings for every jobservice process.

One pydantic-settings class, read from ``JOBSERVICE_*`` environment variables (and an optional
``.env``), built by the app factory, the worker bootstrap or the CLI, never at import time.
Tests build ``Settings(...)`` directly instead of editing the environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


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
    broker_url: str = Field(default="redis://127.0.0.1:6379/0", description="Celery broker (Redis).")

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

    # --- catalog -------------------------------------------------------------------------
    catalog_extra: list[str] = Field(
        default_factory=list,
        description="``module:function`` providers of extra ModelSpecs (tests, plugins).",
    )

    # --- workers -------------------------------------------------------------------------
    worker_devices: str = "cpu"
    worker_id: str | None = None
    worker_models: list[str] = Field(default_factory=list, description="Restrict a worker to these models.")
    scratch_dir: Path | None = Field(default=None, description="Per-job scratch space (var_dir/scratch).")
    torch_threads: int | None = Field(default=None, ge=1)
    progress_min_interval_seconds: float = Field(default=0.5, ge=0)

    # --- API -----------------------------------------------------------------------------
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    api_workers: int = Field(default=2, ge=1)
    api_threads: int = Field(default=8, ge=1)
    public_base_url: str | None = None
    log_level: str = "INFO"

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
