"""Each tenant's webhook signing secret: created on first use; a rotation keeps the old one a while."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import Session

from jobservice.db.rows import insert_missing
from jobservice.db.tables import WebhookSecret, utcnow
from jobservice.webhooks.signing import new_secret

# After a rotation, messages are signed with both secrets this long, so receivers can switch over.
GRACE = timedelta(hours=24)


def current_secret(session: Session, tenant: str) -> WebhookSecret:
    """The tenant's secret row, created when it has none yet (a concurrent creator's row wins)."""
    row = session.get(WebhookSecret, tenant)
    if row is not None:
        return row
    insert_missing(
        session, WebhookSecret, {"tenant": tenant, "secret": new_secret(), "created_at": utcnow()}, ["tenant"]
    )
    row = session.get(WebhookSecret, tenant, populate_existing=True)
    assert row is not None
    return row


def rotate_secret(session: Session, tenant: str) -> WebhookSecret:
    """Give the tenant a new secret; the previous one keeps signing for ``GRACE``."""
    row = current_secret(session, tenant)
    row.previous_secret = row.secret
    row.secret = new_secret()
    row.rotated_at = utcnow()
    session.flush()
    return row


def signing_secrets(session: Session, tenant: str) -> list[str]:
    """The secrets a message is signed with now: the current one, and the previous one in its grace."""
    row = current_secret(session, tenant)
    secrets = [row.secret]
    if row.previous_secret and row.rotated_at and utcnow() - row.rotated_at < GRACE:
        secrets.append(row.previous_secret)
    return secrets
