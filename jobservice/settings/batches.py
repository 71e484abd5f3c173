"""Settings of nightly regression batches and their schedules (jobservice.nightly)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field


class BatchSettings(BaseModel):
    """Nightly regressions.

    Read by `jobservice.nightly` (plans, the beat's schedules and finishing tick) and the batch
    pages (docs/nightly.md).
    """

    batch_root: Path = Field(
        default=Path("."),
        description="Spec and input paths given to the API or the beat resolve under this folder (never "
        "outside it).",
    )
    batch_schedules: list[dict[str, Any]] = Field(
        default_factory=list,
        description='Runs of `jobservice beat`, a JSON list: [{"spec": "batches/nightly.yaml", '
        '"cron": "0 2 * * *"}].',
    )
    batch_timezone: str = Field(default="UTC", description="Time zone of the schedules' cron expressions.")
    batch_tick_seconds: float = Field(
        default=30.0, gt=0, description="How often the beat finishes batches whose jobs all ended."
    )
    batch_history: int = Field(default=14, ge=2, le=365, description="Runs in a batch report's trend charts.")
