"""Signatures in the Standard Webhooks format, verified with the `standardwebhooks` package."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from jobservice.db.engine import Database
from jobservice.db.tables import utcnow
from jobservice.webhooks.signing import new_secret, sign, webhook_headers
from jobservice.webhooks.tenant_secrets import current_secret, rotate_secret, signing_secrets
from tests.factories import copy_template


def test_a_signed_message_verifies_with_the_reference_library() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    body = json.dumps({"type": "job.completed", "data": {"id": "x", "status": "succeeded"}})
    headers = webhook_headers([secret], message_id="msg_1", timestamp=int(time.time()), body=body)
    assert Webhook(secret).verify(body, headers) == json.loads(body)
    assert headers["webhook-signature"].startswith("v1,")


def test_a_tampered_body_or_another_secret_fails() -> None:
    secret = new_secret()
    body = '{"a":1}'
    headers = webhook_headers([secret], message_id="msg_2", timestamp=int(time.time()), body=body)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify('{"a":2}', headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)


def test_known_vector() -> None:
    # The example of the Standard Webhooks specification (github.com/standard-webhooks).
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = '{"test": 2432232314}'
    expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert (
        sign(secret, message_id="msg_p5jXN8AQM9LWM0D4loKWxJek", timestamp=1614265330, body=body) == expected
    )


def test_secrets_are_created_once_and_rotation_signs_with_both(tmp_path: Path, migrated_sqlite: Path) -> None:
    copy_template(migrated_sqlite, tmp_path, "w.db")
    db = Database(f"sqlite:///{tmp_path}/w.db")
    try:
        with db.session() as session:
            first = current_secret(session, "acme").secret
        with db.session() as session:
            assert current_secret(session, "acme").secret == first
            assert current_secret(session, "other").secret != first
        with db.session() as session:
            rotated = rotate_secret(session, "acme").secret
        with db.session() as session:
            both = signing_secrets(session, "acme")
        assert both == [rotated, first]
        body = '{"a":1}'
        headers = webhook_headers(both, message_id="msg_3", timestamp=int(time.time()), body=body)
        assert Webhook(first).verify(body, headers) == {"a": 1}  # a receiver not yet switched over
        assert Webhook(rotated).verify(body, headers) == {"a": 1}
        with db.session() as session:
            current_secret(session, "acme").rotated_at = utcnow() - timedelta(hours=25)
        with db.session() as session:
            assert signing_secrets(session, "acme") == [rotated]
    finally:
        db.dispose()
