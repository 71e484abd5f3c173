"""Idempotency-Key headers, shared by POST /jobs and POST /batches."""

from __future__ import annotations

import hashlib

from jobservice.errors import Malformed

MAX_IDEMPOTENCY_KEY = 255  # the column's width


def parse_idempotency_key(header: str | None) -> str | None:
    """The stored form of an ``Idempotency-Key`` header (1-255 ASCII characters, as on /jobs).

    Stored as ``api:<key>``; a key too long for the 255-character column with that prefix is
    stored as its sha256 instead (under another prefix, so it can never equal a short key's form).
    """
    if header is None:
        return None
    key = header.strip()
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not key.isascii():
        raise Malformed(
            "invalid_idempotency_key",
            f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY} ASCII characters.",
        )
    stored = f"api:{key}"
    if len(stored) > MAX_IDEMPOTENCY_KEY:
        stored = f"api-sha256:{hashlib.sha256(key.encode()).hexdigest()}"
    return stored


def scoped_key(stored: str | None, tenant: str) -> str | None:
    """``stored`` made unique per tenant: the default tenant keeps the plain form (existing rows),
    others get an ``@tenant/`` prefix (no plain form starts with ``@``), hashed if too long."""
    if stored is None or tenant == "default":
        return stored
    scoped = f"@{tenant}/{stored}"
    if len(scoped) > MAX_IDEMPOTENCY_KEY:
        scoped = f"@{tenant}/sha256:{hashlib.sha256(stored.encode()).hexdigest()}"
    return scoped
