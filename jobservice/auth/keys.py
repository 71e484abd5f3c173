"""API keys: create (the secret is shown once), list, revoke, and verify a presented secret.

A secret looks like ``jsk_<32 url-safe characters>``; the table keeps its SHA-256 (a random
192-bit secret needs no slow hash) and a short hint (``jsk_ab12...``) to tell keys apart. A
presented secret is looked up by its hash, then compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from jobservice.auth.principal import ROLES, Principal, Role, check_tenant
from jobservice.db.tables import ApiKey, utcnow
from jobservice.errors import Invalid, NotFound

PREFIX = "jsk_"
LIMIT_NAMES = (
    "active_jobs",
    "batch_jobs",
    "group_jobs",
    "jobs_per_hour",
    "requests_per_minute",
    "retention_hours",
    "pending_uploads",
    "pending_upload_mb",
)
LAST_USED_EVERY = timedelta(minutes=1)  # last_used_at is refreshed at most this often


def hash_secret(secret: str) -> str:
    """The stored form of a secret."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def looks_like_key(secret: str) -> bool:
    """Whether ``secret`` has a key's shape (to say 'not a key' rather than 'unknown key')."""
    return secret.startswith(PREFIX) and 20 <= len(secret) <= 128 and secret.isascii()


def check_limits(limits: Mapping[str, Any]) -> dict[str, Any]:
    """Validated per-key or per-tenant overrides (known names, non-negative numbers)."""
    clean: dict[str, Any] = {}
    for name, value in limits.items():
        if name not in LIMIT_NAMES:
            raise Invalid("invalid_limit", f"Unknown limit {name!r}; known: {', '.join(LIMIT_NAMES)}.")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise Invalid("invalid_limit", f"Limit {name!r} must be a number of at least 0.")
        if name == "retention_hours" and value <= 0:
            raise Invalid("invalid_limit", "retention_hours must be greater than 0.")
        clean[name] = value if name == "retention_hours" else int(value)
    return clean


def create_key(
    session: Session,
    *,
    name: str,
    tenant: str,
    role: Role = "user",
    limits: Mapping[str, Any] | None = None,
) -> tuple[ApiKey, str]:
    """A new key and its secret (the only time the secret exists outside the caller's hands)."""
    if role not in ROLES:
        raise Invalid("invalid_role", f"A role is one of {', '.join(ROLES)}.")
    if not name.strip() or len(name) > 128:
        raise Invalid("invalid_name", "A key's name is 1-128 characters.")
    secret = PREFIX + secrets.token_urlsafe(24)
    key = ApiKey(
        id="key_" + secrets.token_hex(6),
        name=name.strip(),
        tenant=check_tenant(tenant),
        role=role,
        secret_hash=hash_secret(secret),
        hint=secret[:8] + "...",
        limits=check_limits(limits or {}),
        created_at=utcnow(),
    )
    session.add(key)
    session.flush()
    return key, secret


def list_keys(session: Session, *, tenant: str | None = None) -> list[ApiKey]:
    """Keys, oldest first (revoked ones included, marked by ``revoked_at``)."""
    query = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
    if tenant is not None:
        query = query.where(ApiKey.tenant == tenant)
    return list(session.scalars(query))


def revoke_key(session: Session, key_id: str) -> ApiKey:
    """Revoke a key at once (idempotent); raises NotFound for an unknown id."""
    key = session.get(ApiKey, key_id)
    if key is None:
        raise NotFound("key_not_found", f"No API key has the id {key_id!r}.")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
    session.flush()
    return key


def verify(session: Session, secret: str) -> ApiKey | None:
    """The live key whose secret this is, or None (unknown, malformed or revoked)."""
    if not looks_like_key(secret):
        return None
    digest = hash_secret(secret)
    key = session.scalar(select(ApiKey).where(ApiKey.secret_hash == digest))
    if key is None or not hmac.compare_digest(key.secret_hash, digest) or key.revoked_at is not None:
        return None
    now = utcnow()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_EVERY:
        session.execute(update(ApiKey).where(ApiKey.id == key.id).values(last_used_at=now))
    return key


def principal_of(key: ApiKey) -> Principal:
    """The caller a verified key stands for."""
    role: Role = "admin" if key.role == "admin" else "user"
    return Principal(tenant=key.tenant, role=role, key_id=key.id, key_name=key.name, limits=dict(key.limits))
