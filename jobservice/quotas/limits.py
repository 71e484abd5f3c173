"""A caller's limits: the key's override, else the tenant's, else the settings' default.

What 0 means, per limit (an operator who writes 0 gets the safe reading):

- ``active_jobs``, ``batch_jobs``, ``group_jobs``, ``jobs_per_hour``: 0 allows no such jobs (the
  tenant can still read what it has). There is no "unlimited" value; a large number is one.
- ``pending_uploads``, ``pending_upload_mb``: 0 allows no direct uploads (``POST /uploads``).
- ``requests_per_minute``: 0 is no rate limit (refusing every request is what revoking a key
  does), and so is any value of ``UNLIMITED_RATE`` or more.
- ``retention_hours``: always greater than 0 (``jobservice.auth.keys.check_limits``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from sqlalchemy.orm import Session

from jobservice.auth.keys import LIMIT_NAMES
from jobservice.auth.principal import Principal
from jobservice.caches import Caches
from jobservice.db.engine import Database
from jobservice.db.tables import Tenant
from jobservice.settings import Settings

log = logging.getLogger(__name__)

UNLIMITED_RATE = 1_000_000_000  # requests per minute at or above this are not counted at all


@dataclass(frozen=True)
class Limits:
    """The limits that apply to one caller."""

    active_jobs: int  # interactive jobs queued + running at once (batch and group jobs are not counted)
    batch_jobs: int  # jobs (cases x repeats) in one batch
    jobs_per_hour: int  # jobs created in any rolling hour, batch jobs included
    requests_per_minute: int  # API requests per minute per key (0: no limit)
    retention_hours: float  # a job's files are deleted this long after it was created
    group_jobs: int = 5000  # jobs (manifest rows) in one job group (jobservice.groups)
    pending_uploads: int = 100  # direct uploads declared and not completed (jobservice.uploads)
    pending_upload_mb: int = 65536  # their declared sizes together, in MiB

    @property
    def rate_limited(self) -> bool:
        """Whether requests are counted at all (see the module docstring for 0)."""
        return 0 < self.requests_per_minute < UNLIMITED_RATE

    def as_dict(self) -> dict[str, int | float]:
        """The limits by name, as ``GET /quota`` shows them."""
        return asdict(self)


def default_limits(settings: Settings) -> Limits:
    """The limits of a tenant and key that override nothing."""
    return Limits(
        active_jobs=settings.quota_active_jobs,
        batch_jobs=settings.quota_batch_jobs,
        jobs_per_hour=settings.quota_jobs_per_hour,
        requests_per_minute=settings.quota_requests_per_minute,
        retention_hours=settings.retention_hours,
        group_jobs=settings.quota_group_jobs,
        pending_uploads=settings.quota_pending_uploads,
        pending_upload_mb=settings.quota_pending_upload_mb,
    )


def resolve_limits(
    settings: Settings, *, tenant: Mapping[str, Any] | None = None, key: Mapping[str, Any] | None = None
) -> Limits:
    """The defaults, overridden by the tenant's overrides, overridden by the key's (no database)."""
    values: dict[str, Any] = default_limits(settings).as_dict()
    for source in (tenant or {}, key or {}):
        for name in LIMIT_NAMES:
            value = _usable(name, source.get(name))
            if value is not None:
                values[name] = value
    return Limits(**values)


def tenant_overrides(session: Session, tenant: str) -> dict[str, Any]:
    """The overrides stored for ``tenant`` (``{}`` when it has no row)."""
    row = session.get(Tenant, tenant)
    return dict(row.limits or {}) if row is not None else {}


def effective_limits(session: Session, settings: Settings, principal: Principal) -> Limits:
    """The limits that apply to ``principal``: key override > tenant override > settings default."""
    return resolve_limits(settings, tenant=tenant_overrides(session, principal.tenant), key=principal.limits)


class LimitsHost(Protocol):
    """What ``recent_limits`` reads of ``Services``."""

    @property
    def db(self) -> Database:
        """Where the overrides are."""
        ...

    @property
    def settings(self) -> Settings:
        """The defaults."""
        ...

    @property
    def caches(self) -> Caches:
        """Where a tenant's overrides are kept for ``caches.OVERRIDES_SECONDS``."""
        ...


def recent_limits(services: LimitsHost, principal: Principal) -> Limits:
    """``effective_limits`` with the tenant's overrides read at most every ``caches.OVERRIDES_SECONDS`` per
    process (``Services.caches``: a submission or a rate check then needs no read of its own), so a
    change made with ``jobservice tenants set`` applies everywhere within that time."""

    def read(_old: dict[str, Any] | None) -> dict[str, Any]:
        with services.db.session() as session:
            return tenant_overrides(session, principal.tenant)

    overrides = services.caches.tenant_overrides.get(principal.tenant, read)
    return resolve_limits(services.settings, tenant=overrides, key=principal.limits)


def _usable(name: str, value: Any) -> int | float | None:
    """An override's value, or None when it is absent or unusable (a hand-edited row, say)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        log.warning("ignoring the override %s=%r: not a number of at least 0", name, value)
        return None
    if name == "retention_hours":
        return float(value) if value > 0 else None
    return int(value)
