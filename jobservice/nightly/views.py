"""The JSON shape of a batch (``GET /batches/<id>``): plain pydantic models, importable without the
service (the Python client, ``jobservice.client``, reads the API's answers into them).

``jobservice.nightly.presenters`` builds them from the database.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from jobservice.groups.views import GroupProgress


class Progress(GroupProgress):
    """Jobs of a batch by status (the newest job of each case and repeat): a set's progress, and
    how many slots have a job."""

    created: int


class EpisodeView(BaseModel):
    """Nights that add up: an inconclusive night whose change reached the floor opened it, and the
    next nights of its case are judged pooled with it (at most ``of`` nights)."""

    case: str
    metric: str
    state: str = Field(description="open (the next night pools with it) or closed.")
    night: int = Field(description="Nights pooled so far, tonight included.")
    of: int
    outcome: str | None = Field(
        default=None, description="Once closed: regression, ok, improvement or inconclusive."
    )
    change: float | None = Field(default=None, description="The pooled nights' change (relative).")
    upper: float | None = Field(default=None, description="The change (worse direction) not ruled out.")
    first: str | None = Field(default=None, description="The batch of the episode's first night.")


class CaseView(BaseModel):
    """One case while (and after) it runs."""

    name: str
    model: str
    repeat: int
    statuses: dict[str, int]
    verdict: str | None = Field(
        default=None,
        description="Once finished: its primary metric's verdict (regressed, improved, ok: a slowdown of "
        "ok_within ruled out, inconclusive: neither), or failed, changed, missing, new.",
    )
    reasons: list[str] = Field(
        default_factory=list,
        description="Why: what regressed, or what it rules out, or for inconclusive the change not ruled "
        "out and what would decide it (more repeats, more nights, or less noise).",
    )
    primary: str | None = Field(default=None, description="The metric the verdict is (e.g. generate_ms).")
    change: float | None = Field(default=None, description="The primary metric's change (relative).")
    upper: float | None = Field(
        default=None,
        description="The primary metric's change, in the worse direction, not ruled out (at 1 - α_ok).",
    )
    others: list[str] = Field(
        default_factory=list, description="Other metrics' regressions: reported, not failing the case."
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
        "seen, but a case could not tell) or error."
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
    risk: str | None = Field(
        default=None, description="How often an unchanged batch of these cases would read regressed."
    )
    episodes: list[EpisodeView] = Field(
        default_factory=list, description="Episodes opened, continued or closed."
    )
    cases: list[CaseView] = Field(default_factory=list)
    environment_changes: list[str] = Field(default_factory=list)
    links: dict[str, str]
