"""A caller's limits next to its current usage: what ``GET /quota`` answers."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from jobservice.auth.principal import Principal
from jobservice.quotas.limits import effective_limits
from jobservice.quotas.rate import RateCounter
from jobservice.quotas.usage import tenant_usage
from jobservice.settings import Settings


def quota_summary(
    session: Session, settings: Settings, principal: Principal, counter: RateCounter
) -> dict[str, Any]:
    """``{"tenant", "limits", "usage"}`` for ``principal``; ``requests_this_minute`` is None when
    Redis cannot be asked, and counts this key's requests (the tenant's when auth is off)."""
    usage: dict[str, Any] = tenant_usage(session, principal.tenant).as_dict()
    usage["requests_this_minute"] = counter.this_minute(principal)
    return {
        "tenant": principal.tenant,
        "limits": effective_limits(session, settings, principal).as_dict(),
        "usage": usage,
    }
