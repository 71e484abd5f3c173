"""Settings of retention: when jobs' files go, how often the sweep runs (jobservice.retention)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RetentionSettings(BaseModel):
    """Retention.

    Read by `jobservice.retention` (the beat's sweep of expired jobs, orphans and logs) and by
    submission, which stamps each job's expiry.
    """

    retention_hours: float = Field(
        default=720.0,
        gt=0,
        description="A job's files are deleted this long after it was created (a tenant's or key's "
        "limit may say otherwise; docs/security.md).",
    )
    gc_interval_seconds: float = Field(default=300.0, gt=0, description="How often the beat sweeps.")
