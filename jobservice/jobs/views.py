"""The public shape of a job (``GET /jobs/<id>``): plain pydantic models, importable without the
database or the service (the Python client, ``jobservice.client``, reads the API's answers into them).

``jobservice.jobs.presenters`` builds them from job rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ErrorView(BaseModel):
    """A job's failure, in machine and human form."""

    code: str
    message: str


class ValidationView(BaseModel):
    """The output gate's verdict, summarised (the full findings are in the RunReport)."""

    verdict: str
    failed_checks: list[str] = Field(default_factory=list)
    summary: dict[str, Any] = Field(default_factory=dict)


class TryView(BaseModel):
    """A try of the job that the output gate failed before it ran again with the next seed."""

    number: int = Field(description="1 for the job's first try, 2 for its first retry, ...")
    attempt: int = Field(description="The job's attempt (claim) that ran it.")
    seed: int | None
    verdict: str
    failed_checks: list[str] = Field(default_factory=list)
    message: str = ""
    card_seconds: float | None = Field(default=None, description="What the try used (charged).")
    finished_at: datetime | None = None
    links: dict[str, str] = Field(
        default_factory=dict, description="video, report and log of the try (until retention)."
    )


class PreviewView(BaseModel):
    """What a running job has rendered so far (``jobservice.jobs.previews``): played from
    ``links.preview``, not yet validated; the validated video replaces it when the job ends."""

    state: Literal["none", "waiting", "ready"] = Field(
        description="none: this model's back end hands over its video only once it is finished (or previews "
        "are off), so no preview will exist; waiting: none yet; ready: links.preview plays it."
    )
    validated: bool = Field(default=False, description="Always false: only the final video is gated.")
    number: int | None = Field(default=None, description="1 for the first preview, 2 for the next, ...")
    frames: int | None = Field(default=None, description="Frames rendered when it was made.")
    seconds: float | None = Field(default=None, description="The span it covers (video and its audio).")
    published_at: datetime | None = None
    message: str = ""


class EtaAssumptions(BaseModel):
    """What the forecast behind a job's ETA assumed."""

    competing_tenants: list[str] = Field(description="Tenants with jobs queued at the job's priority.")
    expected_jobs: int = Field(
        description="Arrivals it expected besides what was queued (from today's "
        "rates and what arrived a day ago)."
    )
    as_of: datetime = Field(description="When the forecast was made.")


class FairShareView(BaseModel):
    """A tenant's share of the cards that may run a job's model."""

    tenants: int = Field(description="Tenants queued at the job's priority, its own included.")
    fraction: float = Field(description="Its weight over the queued tenants' weights.")
    cards: int = Field(description="Cards of the online groups that may run the model.")
    text: str = Field(description='In words: "4 teams queued; you get 2 of 8 cards".')


class EtaRevision(BaseModel):
    """A move of a job's ETA and its cause."""

    at: datetime
    old: datetime
    new: datetime
    cause: str = Field(description='e.g. tenant "ads" started competing: your share 1/2 -> 1/3')


class JobView(BaseModel):
    """The public view of a job (``GET /jobs/<id>``)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    object: str = "job"
    task: str
    model: str
    status: str
    stage: str
    progress: float
    queue_position: int | None = Field(
        default=None,
        description="A queued job: how many jobs the dispatcher will start before it on the card groups "
        "that may run its model (0 = next), in the order its ETA comes from (fair share, priority and "
        "residency, the arrivals the forecast expects). Null when no group may run its model, or before "
        "the first forecast.",
    )
    cancel_requested: bool = False
    params: dict[str, Any]
    inputs: dict[str, Any]
    source: str
    attempts: int
    worker_id: str | None = None
    created_at: datetime
    claimed_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None
    error: ErrorView | None = None
    validation: ValidationView | None = None
    warnings: list[str] = Field(
        default_factory=list,
        description="What the run did differently from the request (e.g. a preset the model's "
        "checkout did not honour); details in the report's extra.",
    )
    timings: dict[str, Any] = Field(default_factory=dict)
    cold_start: bool | None = None
    tenant: str = "default"
    group_id: str | None = Field(
        default=None, description="The job group it was made in (POST /job-groups), if any."
    )
    group_row: int | None = Field(
        default=None, description="Its row in that group's manifest (1: the first job)."
    )
    expires_at: datetime | None = Field(
        default=None, description="When the job's files (inputs, video, report, log) will be deleted."
    )
    expired: bool = Field(default=False, description="The files were deleted by retention; the row stays.")
    usage: dict[str, Any] | None = Field(
        default=None,
        description="Card-seconds the job used once an attempt ended: card_seconds (charged: load + "
        "generate + finish, times its cards), phases {load, generate, finish}, cards, card_kind, attempts, "
        "and wasted_card_seconds (attempts the service lost, never charged).",
    )
    retry_on_validation_failure: int = Field(
        default=0, description="Tries with the next seed a failed gate may start (0: none)."
    )
    validation_attempts: list[TryView] = Field(
        default_factory=list,
        description="The tries the gate failed before the current one, oldest first; each names its "
        "seed, verdict and files (links.video of the job is the current or last try's).",
    )
    seed_used: int | None = Field(
        default=None,
        description="The seed of the current (or last) try: params.seed plus the tries before it. The "
        "video the job kept was made with it.",
    )
    estimated_start_at: datetime | None = Field(
        default=None,
        description="A queued job: when it should start (the fleet's forecast, refreshed every few seconds).",
    )
    estimated_finish_at: datetime | None = Field(
        default=None, description="A queued or running job: when it should end."
    )
    eta_basis: str | None = Field(
        default=None,
        description="forecast; not_measured (its model's speed is a default, not a measurement); no_group "
        "(no online card group may run its model: no ETA); unknown (no forecast yet). Null once it ended.",
    )
    eta_assumes: EtaAssumptions | None = Field(
        default=None, description="What the forecast behind the ETA assumed (queued and running jobs)."
    )
    fair_share: FairShareView | None = Field(
        default=None,
        description="The job's tenant's share of the cards that may run its model, as fair share gives "
        "it against the tenants queued at its priority.",
    )
    eta_revisions: list[EtaRevision] = Field(
        default_factory=list,
        description="The ETA's moves of more than max(60 s, a fifth of the wait), each with its cause "
        "(at most the last 20).",
    )
    preview: PreviewView | None = Field(
        default=None,
        description="A running job's preview of what it rendered so far (links.preview while ready); "
        "null when queued or ended (links.video is then the validated video).",
    )
    links: dict[str, str]


class JobDeleted(BaseModel):
    """The answer of ``DELETE /jobs/<id>``: the job is deleted (its files gone, and it is gone from
    every list and read: 404 ``job_deleted`` from now on)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    object: Literal["job.deleted"] = "job.deleted"
    deleted: Literal[True] = True
    deleted_at: datetime
