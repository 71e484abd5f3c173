"""Admission: refuse a submission that would take a tenant over its job quotas, creating nothing.

``admit_jobs`` runs inside the transaction that inserts the new rows, just before the insert: it
first takes a per-tenant lock held until that transaction ends (PostgreSQL: a transaction-scoped
advisory lock; SQLite: the database's write lock, taken by a no-op write), then counts and
decides. Two submissions of one tenant are thus serialized from count to commit, and cannot
both pass when only one fits.

Batch jobs and ``active_jobs``: a batch is admitted as a whole when it is created (``batch=True``,
``count`` = cases x repeats), against ``batch_jobs`` and ``jobs_per_hour`` only. ``active_jobs``
limits interactive jobs: a nightly batch of 500 must fit under the default cap of 100 active jobs,
its jobs queue at a lower priority than interactive ones, and its size is already bounded by
``batch_jobs`` (per batch) and ``jobs_per_hour`` (batches per hour). The jobs of an admitted batch
are then inserted one by one without a second admission.

Job groups (``jobservice.groups``) are admitted the same way, as a whole in the transaction that
inserts all their jobs (``group=True``, ``count`` = manifest rows): against ``group_jobs`` and
``jobs_per_hour``; their jobs also queue at batch priority and are not in ``active_jobs``.

Direct uploads (``jobservice.uploads``): ``admit_upload`` admits one declaration against
``pending_uploads`` (how many are declared and not completed) and ``pending_upload_mb`` (their
declared sizes together), under the same lock, in the transaction that inserts the upload's row.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from sqlalchemy import text, update
from sqlalchemy.orm import Session

from jobservice.auth.principal import Principal
from jobservice.db.tables import Tenant, utcnow
from jobservice.errors import TooMany
from jobservice.quotas.limits import Limits, effective_limits
from jobservice.quotas.usage import HOUR, MIB, admission_usage, nth_oldest_since, pending_uploads
from jobservice.settings import Settings

QUOTA_LOCK_CLASS = 0x4A53  # the first key of pg_advisory_xact_lock(int, int): quota locks ("JS")
ACTIVE_RETRY_SECONDS = 30.0  # when active jobs will finish is unknown: a polite polling interval
NEVER_FITS_RETRY_SECONDS = 3600.0  # a request over a cap will never fit; retrying soon cannot help


def lock_tenant(session: Session, tenant: str) -> None:
    """Serialize admissions of ``tenant`` until the current transaction ends."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            text("SELECT pg_advisory_xact_lock(:cls, hashtext(:tenant))"),
            {"cls": QUOTA_LOCK_CLASS, "tenant": tenant},
        )
    else:
        # SQLite has one writer at a time: a write that changes nothing still takes the write lock
        # (and begins the transaction), so the counts below and the insert after are one unit.
        no_op = update(Tenant).where(Tenant.name == tenant).values(name=Tenant.name)
        session.execute(no_op.execution_options(synchronize_session=False))


def admit_jobs(
    session: Session,
    settings: Settings,
    principal: Principal,
    count: int,
    *,
    batch: bool = False,
    group: bool = False,
    now: datetime | None = None,
    inserted: int = 0,
    limits: Limits | None = None,
) -> Limits:
    """Admit ``count`` new jobs of ``principal``'s tenant, or raise TooMany (429 ``quota_exceeded``).

    Call it in the transaction that inserts the rows: before the insert, or after it with
    ``inserted`` = how many of the ``count`` rows it already holds (they are then in the counts;
    inserting first keeps the tenant's lock, held until commit, around the counts alone: a tenant's
    submissions queue on it). ``batch=True`` admits a whole batch (``count`` = cases x repeats),
    ``group=True`` a whole job group (``count`` = its rows).
    Returns the limits it applied (``retention_hours`` sets the new jobs' ``expires_at``);
    ``limits``: the caller's ``effective_limits`` when it has them.
    """
    tenant = principal.tenant
    lock_tenant(session, tenant)
    limits = limits or effective_limits(session, settings, principal)
    now = now or utcnow()
    if batch and count > limits.batch_jobs:
        raise _refusal(
            principal,
            "batch_jobs",
            limits.batch_jobs,
            f"A batch of tenant '{tenant}' may have at most {limits.batch_jobs} jobs (cases x repeats); "
            f"this one has {count}. Split it into smaller batches",
            NEVER_FITS_RETRY_SECONDS,
            usage=count,
            count=count,
        )
    if group and count > limits.group_jobs:
        raise _refusal(
            principal,
            "group_jobs",
            limits.group_jobs,
            f"A job group of tenant '{tenant}' may have at most {limits.group_jobs} jobs (manifest rows); "
            f"this one has {count}. Split the manifest",
            NEVER_FITS_RETRY_SECONDS,
            usage=count,
            count=count,
        )
    if not (batch or group):
        active, created = admission_usage(session, tenant, now - HOUR, inserted=inserted)
        if active + count > limits.active_jobs:
            raise _refusal(
                principal,
                "active_jobs",
                limits.active_jobs,
                f"Tenant '{tenant}' may have {limits.active_jobs} jobs queued or running at once; it has "
                f"{active} and this request adds {count}. Wait for some to finish or cancel some",
                ACTIVE_RETRY_SECONDS if count <= limits.active_jobs else NEVER_FITS_RETRY_SECONDS,
                usage=active,
                count=count,
            )
    else:
        created = admission_usage(session, tenant, now - HOUR, inserted=inserted)[1]
    _admit_hourly(session, principal, limits, count, now, created)
    return limits


def admit_upload(
    session: Session, principal: Principal, limits: Limits, size: int, *, now: datetime | None = None
) -> None:
    """Admit one declared upload of ``size`` bytes, or raise TooMany (429 ``quota_exceeded``).

    Call it first in the transaction that inserts the upload's row (on SQLite the lock must be the
    transaction's first statement; ``limits``: the caller's, read before): the tenant's lock is
    held until commit, so two declarations cannot both take the last place.
    """
    tenant = principal.tenant
    lock_tenant(session, tenant)
    now = now or utcnow()
    pending = pending_uploads(session, tenant, now=now)
    free = (
        ". Complete them (POST /uploads/<id>/complete) or delete them (DELETE /uploads/<id>)"
        if pending.count
        else ""
    )
    # Places free up when the client completes or deletes an upload, or as the oldest one expires.
    expiry = (pending.first_expiry - now).total_seconds() if pending.first_expiry else 60.0
    if pending.count + 1 > limits.pending_uploads:
        raise _refusal(
            principal,
            "pending_uploads",
            limits.pending_uploads,
            f"Tenant '{tenant}' may have {limits.pending_uploads} uploads declared and not yet "
            f"completed; it has {pending.count}{free}",
            expiry if limits.pending_uploads else NEVER_FITS_RETRY_SECONDS,
            usage=pending.count,
            count=1,
        )
    cap = limits.pending_upload_mb * MIB
    if pending.bytes + size > cap:
        raise _refusal(
            principal,
            "pending_upload_mb",
            limits.pending_upload_mb,
            f"Tenant '{tenant}' may have {limits.pending_upload_mb} MiB of uploads declared and not yet "
            f"completed; it has {pending.bytes / MIB:.1f} MiB in {pending.count} and this one adds "
            f"{size / MIB:.1f} MiB{free}",
            expiry if size <= cap else NEVER_FITS_RETRY_SECONDS,
            usage=math.ceil(pending.bytes / MIB),
            count=math.ceil(size / MIB),
        )


def _admit_hourly(
    session: Session, principal: Principal, limits: Limits, count: int, now: datetime, used: int
) -> None:
    tenant, cap = principal.tenant, limits.jobs_per_hour
    since = now - HOUR
    if used + count <= cap:
        return
    if count > cap:
        retry_after = NEVER_FITS_RETRY_SECONDS
    else:
        # Enough of the hour's jobs must age out: the (used + count - cap)-th oldest one's hour ends.
        oldest = nth_oldest_since(session, tenant, since, used + count - cap)
        retry_after = (oldest + HOUR - now).total_seconds() if oldest is not None else 60.0
    raise _refusal(
        principal,
        "jobs_per_hour",
        cap,
        f"Tenant '{tenant}' may create {cap} jobs per hour; it created {used} in the last hour and "
        f"this request adds {count}. Try again in {math.ceil(max(1.0, retry_after))} s",
        retry_after,
        usage=used,
        count=count,
    )


def _refusal(
    principal: Principal, name: str, value: int, sentence: str, retry_after: float, *, usage: int, count: int
) -> TooMany:
    detail: dict[str, Any] = {"limit": name, "value": value, "usage": usage, "requested": count}
    return TooMany(
        "quota_exceeded",
        f"{sentence}, or {_how_to_raise(principal, name)}. Nothing was created.",
        retry_after=max(1.0, retry_after),
        details=[detail],
    )


def _how_to_raise(principal: Principal, name: str) -> str:
    option = "--" + name.replace("_", "-")
    if principal.limits.get(name) is not None:
        return f"ask an admin for a key with a higher {option} (this key sets its own {name})"
    return f"ask an admin to raise it (jobservice tenants set {principal.tenant} {option} N)"
