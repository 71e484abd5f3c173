"""The JSON shape of a batch (``GET /batches/<id>``): plain pydantic models, importable without the
service (the Python client, ``jobservice.client``, reads the API's answers into them).

``jobservice.nightly.presenters`` builds them from the database.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class Progress(BaseModel):
    """Jobs of a batch by status (the newest job of each case and repeat)."""

    total: int
    created: int
    queued: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    canceled: int = 0
    fraction: float = Field(description="0..1, counting the progress of running jobs.")


class CaseView(BaseModel):
    """One case while (and after) it runs."""

    name: str
    model: str
    repeat: int
    statuses: dict[str, int]
    verdict: str | None = Field(
        default=None,
        description="Once finished: regressed, failed, changed, missing, inconclusive (nothing regressed, "
        "but the run's noise hid changes above the spec's floor), new, improved or ok.",
    )
    reasons: list[str] = Field(
        default_factory=list,
        description="Why: what regressed, or for inconclusive what the run could see and how many "
        "repeats per side would see the floor.",
    )
    jobs: list[str]


class BatchView(BaseModel):
    """The public summary of a batch."""

    id: str
    object: str = "batch"
    name: str
    status: str
    verdict: str | None = Field(
        description="Once finished: no_baseline, passed, regressed, failed, inconclusive (no regression "
        "seen, but a case could not tell; never a baseline by itself) or error."
    )
    error: str | None = Field(default=None, description="Why it was canceled or could not be judged.")
    source: str
    origin: str
    spec_digest: str
    pinned: bool
    baseline_id: str | None
    created_at: datetime
    submitted_at: datetime | None
    finished_at: datetime | None
    progress: Progress
    counts: dict[str, int] = Field(default_factory=dict, description="Cases by verdict, once finished.")
    cases: list[CaseView] = Field(default_factory=list)
    environment_changes: list[str] = Field(default_factory=list)
    links: dict[str, str]
