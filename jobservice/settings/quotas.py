"""Settings of quotas: every tenant's default limits and the disk floor (jobservice.quotas)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class QuotaSettings(BaseModel):
    """Quotas.

    Read by `jobservice.quotas`: the limits of a tenant that has none of its own (a tenant's or a
    key's limits override them; docs/security.md), and the free space below which submissions stop.
    """

    quota_active_jobs: int = Field(default=100, ge=0, description="Jobs queued+running at once, per tenant.")
    quota_batch_jobs: int = Field(default=500, ge=0, description="Jobs (cases x repeats) in one batch.")
    quota_group_jobs: int = Field(
        default=5000, ge=0, description="Jobs (manifest rows) in one job group (POST /job-groups)."
    )
    quota_jobs_per_hour: int = Field(default=2000, ge=0, description="Jobs created per rolling hour.")
    quota_requests_per_minute: int = Field(default=1200, ge=0, description="API requests per minute per key.")
    quota_pending_uploads: int = Field(
        default=100,
        ge=0,
        description="Direct uploads declared and not yet completed (POST /uploads), per tenant; "
        "completing or deleting one frees its place.",
    )
    quota_pending_upload_mb: int = Field(
        default=65536,
        ge=0,
        description="Declared megabytes (MiB) of a tenant's pending direct uploads, all together.",
    )
    min_free_mb: int = Field(
        default=1024,
        ge=0,
        description="Below this free space in the spool or the local object store, submissions get 507.",
    )
