"""Settings of webhooks: targets, timeouts and the retry schedule (jobservice.webhooks)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode


class WebhookSettings(BaseModel):
    """Webhooks.

    Read by `jobservice.webhooks` (the outbox the beat sweeps, each delivery's POST) and by
    submission, which checks a job's or batch's webhook target (docs/api.md).
    """

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
