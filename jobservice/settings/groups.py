"""Settings of job groups: the jobs made from one manifest (jobservice.groups)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class GroupSettings(BaseModel):
    """Job groups.

    Read by `jobservice.groups` when a manifest is posted (`POST /job-groups`, docs/api.md): how
    large a manifest may be at all. How many jobs one group may have is the tenant's `group_jobs`
    quota (`JOBSERVICE_QUOTA_GROUP_JOBS`); its jobs queue at `JOBSERVICE_QUEUE_BATCH_PRIORITY`.
    """

    group_manifest_max_mb: int = Field(
        default=16, ge=1, le=1024, description="Largest manifest (CSV or JSON Lines) a job group accepts."
    )
    group_max_rows: int = Field(
        default=10_000,
        ge=1,
        description="Most rows a manifest may have, whatever the tenant's quota (reading stops past it).",
    )
