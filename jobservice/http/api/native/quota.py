"""``GET /quota``: the caller's limits and how much of them it uses now."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from pydantic import BaseModel, Field

from jobservice.http.api.doc import RouteTable, answer, refused
from jobservice.http.api.native.jobs import services
from jobservice.http.api.policy.auth import current_principal
from jobservice.quotas.summary import quota_summary

bp = Blueprint("quota", __name__)
api = RouteTable(bp)


class QuotaLimits(BaseModel):
    """The limits that apply to the caller (key override > tenant override > default)."""

    active_jobs: int = Field(description="Interactive jobs queued or running at once (0: none).")
    batch_jobs: int = Field(description="Jobs (cases x repeats) in one batch (0: no batches).")
    jobs_per_hour: int = Field(description="Jobs created in any rolling hour, batch and group jobs included.")
    requests_per_minute: int = Field(description="API requests per minute per key (0: no limit).")
    retention_hours: float = Field(description="A job's files are deleted this long after creation.")
    group_jobs: int = Field(description="Jobs (manifest rows) in one job group (0: no job groups).")
    pending_uploads: int = Field(description="Direct uploads declared and not yet completed (0: none).")
    pending_upload_mb: int = Field(description="Declared MiB of those pending uploads, all together.")


class QuotaUsage(BaseModel):
    """What the caller's tenant uses now."""

    active_jobs: int = Field(description="Interactive jobs queued or running.")
    active_batch_jobs: int = Field(
        description="Batch and job-group jobs queued or running (not in active_jobs)."
    )
    jobs_last_hour: int = Field(description="Jobs created in the last hour.")
    requests_this_minute: int | None = Field(description="This key's requests this minute (null: unknown).")
    pending_uploads: int = Field(description="Direct uploads declared, not completed, not expired.")
    pending_upload_mb: float = Field(description="Their declared sizes together, in MiB.")


class QuotaView(BaseModel):
    """``GET /quota``."""

    tenant: str
    limits: QuotaLimits
    usage: QuotaUsage


QUOTA_MODELS: tuple[type[BaseModel], ...] = (QuotaView,)


@api.route(
    "get",
    "/quota",
    "The caller's limits and current usage",
    responses={
        "200": answer("Limits and usage.", "QuotaView"),
        "401": refused("No valid API key."),
        "429": refused("Over the request rate."),
    },
)
def get_quota() -> Response:
    """The caller's tenant, limits and usage."""
    svc = services()
    principal = current_principal()
    with svc.db.session() as session:
        summary = quota_summary(session, svc.settings, principal, svc.rate_counter)
    return jsonify(QuotaView.model_validate(summary).model_dump(mode="json"))
