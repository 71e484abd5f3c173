"""Settings of the fleet: fair share and ETAs (jobservice.fleet)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class FleetSettings(BaseModel):
    """The fleet.

    Read by `jobservice.fleet` (dispatch, fair share, the ETA forecast, retiring card groups;
    docs/fleet.md).
    """

    fair_share_half_life_seconds: float = Field(
        default=3600.0,
        gt=0,
        description="Fair share weighs a tenant's card-seconds by age: halved every this many seconds.",
    )
    fair_share_newcomer_credit_seconds: float = Field(
        default=60.0,
        ge=0,
        description="A tenant that starts competing comes in at the level of the tenants already "
        "waiting, less this many seconds of every online card (so idleness banks nothing beyond it).",
    )
    forecast_interval_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often the queued jobs' ETAs are worked out again (by one process at a time).",
    )
    group_retention_hours: float = Field(
        default=24.0,
        gt=0,
        description="A card group down this long with no worker is retired: its ledger closed, gone from "
        "/fleet and /metrics, its history kept (`jobservice fleet forget GROUP` retires one at once).",
    )
    forecast_expects_yesterday: bool = Field(
        default=True,
        description="ETAs expect again the batch jobs, and the bunches of interactive jobs, that "
        "arrived a day ago over the next 12 hours (nightly batches recur); false: only the arrival "
        "rates of now.",
    )
