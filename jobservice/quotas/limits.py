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
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy.orm import Session

from jobservice.auth.keys import LIMIT_NAMES
from jobservice.auth.principal import Principal
from jobservice.db.engine import Database
from jobservice.db.tables import Tenant
from jobservice.settings import Settings

log = logging.getLogger(__name__)

UNLIMITED_RATE = 1_000_000_000  # requests per minute at or above this are not counted at all
OVERRIDES_SECONDS = 5.0  # how long a process keeps a tenant's overrides (as it keeps verified keys)
OVERRIDES_KEPT = 4096


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


_kept: weakref.WeakKeyDictionary[Database, dict[str, tuple[float, dict[str, Any]]]] = (
    weakref.WeakKeyDictionary()
)
_kept_lock = threading.Lock()


def recent_limits(db: Database, settings: Settings, principal: Principal) -> Limits:
    """``effective_limits`` with the tenant's overrides read at most every ``OVERRIDES_SECONDS``
    per process (a submission or a rate check then needs no read of its own), so a change made
    with ``jobservice tenants set`` applies everywhere within that time."""
    now = time.monotonic()
    with _kept_lock:
        kept = _kept.setdefault(db, {})
        hit = kept.get(principal.tenant)
    if hit is None or hit[0] <= now:
        with db.session() as session:
            hit = (now + OVERRIDES_SECONDS, tenant_overrides(session, principal.tenant))
        with _kept_lock:
            if len(kept) >= OVERRIDES_KEPT:
                kept.clear()
            kept[principal.tenant] = hit
    return resolve_limits(settings, tenant=hit[1], key=principal.limits)


def forget_recent_limits() -> None:
    """Drop every kept tenant override (after a change in this process)."""
    with _kept_lock:
        _kept.clear()


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
