"""Standard Webhooks signatures: ``webhook-signature: v1,<base64 HMAC-SHA256 of id.timestamp.body>``.

The key is the base64 part of the tenant's ``whsec_...`` secret, decoded. During a rotation's
grace period a message carries two signatures (new and previous), space-separated, as the
specification allows; a receiver that knows either secret verifies it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh random secret in the ``whsec_<base64>`` form."""
    return PREFIX + base64.b64encode(os.urandom(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a ``whsec_`` secret (its base64 part, decoded)."""
    return base64.b64decode(secret.removeprefix(PREFIX))


def sign(secret: str, *, message_id: str, timestamp: int, body: str) -> str:
    """One ``v1,<base64>`` signature of ``body`` sent as ``message_id`` at ``timestamp``."""
    content = f"{message_id}.{timestamp}.{body}".encode()
    digest = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def webhook_headers(secrets: list[str], *, message_id: str, timestamp: int, body: str) -> dict[str, str]:
    """The three ``webhook-*`` headers (one signature per secret) plus the JSON content type."""
    signatures = " ".join(sign(s, message_id=message_id, timestamp=timestamp, body=body) for s in secrets)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signatures,
        "content-type": "application/json",
    }
