"""The public shapes of the fleet (``GET /fleet``) and of usage (``GET /usage``): plain pydantic
models, importable without the database (the Python client and the CLI read the API into them)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class ResidentView(BaseModel):
    """A model a card group holds."""

    model: str
    since: datetime | None = None
    last_used: datetime | None = None
    memory_gb_per_card: float = Field(description="What it takes on each of the group's first cards.")


class SpanView(BaseModel):
    """A stretch of the group's ledger in one state."""

    state: str = Field(
        description="generating, loading, finishing, idle_warm, idle_empty, unhealthy or down."
    )
    model: str | None = None
    job_id: str | None = Field(default=None, description="Admins only.")
    start: datetime
    end: datetime
    open: bool = Field(description="The group is still in it.")


class FleetEventView(BaseModel):
    """A load, a failed load or an eviction."""

    at: datetime
    kind: str = Field(description="load, load_failed or evict.")
    model: str
    reason: str
    seconds: float | None = Field(default=None, description="A load: how long it took; an eviction: the age.")
    job_id: str | None = Field(default=None, description="Admins only.")


class CardGroupView(BaseModel):
    """One card group: what it may serve, holds and runs, and its recent ledger."""

    id: str
    devices: str
    kind: str
    cards: int
    hostname: str
    online: bool
    last_seen_at: datetime | None = None
    memory_gb_per_card: float | None = Field(description="null: not declared and not read (no limit).")
    memory_used_gb_per_card: float
    eligible: list[str] = Field(description="The models it may serve (the deployment's `models:`).")
    resident: list[ResidentView]
    state: str = Field(
        description="Its ledger state: generating, loading, finishing, idle_warm, idle_empty, unhealthy "
        "(a card is not healthy and it runs no job) or down."
    )
    state_model: str | None = None
    state_since: datetime | None = None
    accepting: bool = Field(
        default=True,
        description="Whether the dispatcher may give it a job now (online, not draining, not unhealthy).",
    )
    draining_since: datetime | None = Field(
        default=None,
        description="Its worker was asked to stop: it finishes the job it runs and takes no other.",
    )
    unhealthy_since: datetime | None = Field(
        default=None, description="A card of the group is not healthy since then: it takes no job."
    )
    health: list[str] = Field(
        default_factory=list, description="Why it is unhealthy: each card's problems, as its tool says."
    )
    job_id: str | None = Field(default=None, description="Loading or generating now (admins only).")
    next_job_id: str | None = Field(default=None, description="Dispatched to it, not claimed (admins only).")
    ledger_seconds: dict[str, float] = Field(description="Seconds in each state over the window.")
    timeline: list[SpanView]
    loads: list[FleetEventView]
    evictions: list[FleetEventView]


class RetiredCardGroupView(BaseModel):
    """``DELETE /fleet/groups/<id>``: a card group retired (gone from /fleet and /metrics; its
    ledger, loads and usage stay as history)."""

    object: str = "card_group"
    id: str
    retired_at: datetime


class ModelCostView(BaseModel):
    """What a model costs on one kind of card (measured, else the deployment's defaults)."""

    seconds_per_output_second: float | None = None
    seconds_per_job: float = 0.0
    load_s: float | None = None
    samples: float = 0.0


class ModelFleetView(BaseModel):
    """One model across the fleet."""

    id: str
    cards: int
    memory_gb: float
    per_run: bool = Field(description="Nothing stays resident (a process per job, or an operator's server).")
    queued: int
    queued_by_priority: dict[str, int]
    eligible_groups: list[str]
    resident_on: list[str]
    cost: dict[str, ModelCostView] = Field(description="By card kind (`default` until measured).")


class FleetView(BaseModel):
    """``GET /fleet``."""

    object: str = "fleet"
    at: datetime
    since: datetime
    groups: list[CardGroupView]
    models: list[ModelFleetView]


class UsageRowView(BaseModel):
    """Card-seconds of one bucket and group of keys (tenant, model ...)."""

    bucket: datetime | None = Field(description="The hour or day it starts (null without buckets).")
    tenant: str | None = None
    model: str | None = None
    group: str | None = None
    card_kind: str | None = None
    outcome: str | None = None
    jobs: int
    attempts: int
    card_seconds: float = Field(description="Charged: load + generate + finish, times the cards.")
    load: float
    generate: float
    finish: float
    wasted_card_seconds: float = Field(
        description="The service's loss (a worker or lease lost): not charged."
    )
    failed: int = Field(description="Charged attempts that failed.")
    canceled: int = Field(description="Charged attempts that were canceled.")


class UsageView(BaseModel):
    """``GET /usage``."""

    object: str = "usage"
    group_by: list[str]
    bucket: str
    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")
    tenant: str | None = Field(description="The caller's tenant (null: an admin, every tenant).")
    rows: list[UsageRowView]
    total_card_seconds: float

    model_config = {"populate_by_name": True}


def eta_words(moment: datetime | None, now: datetime, *, verb: str = "starts") -> str | None:
    """An ETA as people say it: "starts in about 4 min", "starts any moment"; None without one."""
    if moment is None:
        return None
    seconds = (moment - now).total_seconds()
    if seconds < 20:
        return f"{verb} any moment"
    if seconds < 90:
        return f"{verb} in about a minute"
    if seconds < 3600:
        return f"{verb} in about {round(seconds / 60)} min"
    if seconds < 48 * 3600:
        hours = seconds / 3600
        return f"{verb} in about {hours:.1f} h" if hours < 10 else f"{verb} in about {round(hours)} h"
    return f"{verb} in about {round(seconds / 86400)} days"
