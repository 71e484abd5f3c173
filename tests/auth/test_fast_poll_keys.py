"""The fast poll path (jobservice.http.api.native.fast_poll) with keys on: tenants, request rates and metrics
hold as they do through Flask."""

from __future__ import annotations

from typing import Any

from flask import Flask

from jobservice.db.tables import ApiKey
from jobservice.http.api.policy import auth
from tests.auth.conftest import Keys, bearer
from tests.conftest import caches_expired
from tests.factories import new_job
from tests.unit.test_fast_poll import STATES, Counted, set_row


def test_keys_tenants_rates_and_metrics_hold_on_the_fast_path(
    keyed_app: Flask, keyed_services: Any, keys: Keys
) -> None:
    client = keyed_app.test_client()
    before = poll_counts(client, keys)
    calls = Counted(keyed_app.wsgi_app)  # type: ignore[arg-type]
    job_id = new_job(keyed_services.db)
    set_row(keyed_services.db, job_id, tenant="acme", **STATES["running"])
    path = f"/jobs/{job_id}"
    assert client.get(path, headers=bearer(keys.alice)).status_code == 200
    assert client.get(path, headers=bearer(keys.admin)).status_code == 200
    assert calls.calls == 0
    assert client.get(path, headers=bearer(keys.bob)).get_json()["error"]["code"] == "job_not_found"
    assert client.get(path).get_json()["error"]["code"] == "unauthorized"
    assert client.get(path, headers=bearer("js_not_a_key")).status_code == 401
    assert calls.calls == 3

    with keyed_services.db.session() as session:
        session.get(ApiKey, keys.ids["alice"]).limits = {"requests_per_minute": 4}
    caches_expired(keyed_services)
    answers = [client.get(path, headers=bearer(keys.alice)) for _ in range(6)]
    # One request earlier this minute: three more fit, each counted once, then the refusal.
    assert [a.status_code for a in answers] == [200, 200, 200, 429, 429, 429]
    refused = answers[3]
    assert refused.get_json()["error"]["code"] == "rate_limited" and int(refused.headers["Retry-After"]) >= 1
    assert calls.calls == 3  # refused beneath Flask too

    after = poll_counts(client, keys)
    counted = {status: n - before.get(status, 0.0) for status, n in after.items() if n != before.get(status)}
    assert counted == {"200": 5.0, "404": 1.0, "401": 2.0, "429": 3.0}


def poll_counts(client: Any, keys: Keys) -> dict[str, float]:
    """This process's count of ``GET /jobs/<job_id>`` answers by status, from ``/metrics``."""
    text = client.get("/metrics", headers=bearer(keys.admin)).get_data(as_text=True)
    prefix = 'jobservice_http_requests_total{method="GET",route="/jobs/<job_id>",status="'
    return {
        line[len(prefix) :].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def test_a_poll_flask_answers_after_the_fast_path_is_counted_once(
    keyed_app: Flask, keyed_services: Any, keys: Keys
) -> None:
    """A queued job (its position needs a query) and another tenant's job are answered by Flask after
    the fast path ran the policy: the key's request rate counts each poll once, not twice."""
    client = keyed_app.test_client()
    calls = Counted(keyed_app.wsgi_app)  # type: ignore[arg-type]
    running = new_job(keyed_services.db)
    set_row(keyed_services.db, running, tenant="acme", **STATES["running"])
    queued = new_job(keyed_services.db)
    set_row(keyed_services.db, queued, tenant="acme")
    alice = auth.principal_for_secret(keyed_services, keys.alice)
    bob = auth.principal_for_secret(keyed_services, keys.bob)
    assert alice is not None and bob is not None
    for secret, who, path, status in (
        (keys.alice, alice, f"/jobs/{queued}", 200),
        (keys.bob, bob, f"/jobs/{running}", 404),
        (keys.alice, alice, f"/jobs/{running}", 200),  # beneath Flask
    ):
        before = keyed_services.rate_counter.this_minute(who) or 0
        assert client.get(path, headers=bearer(secret)).status_code == status
        assert keyed_services.rate_counter.this_minute(who) == before + 1, path
    assert calls.calls == 2


def test_the_fast_paths_refusal_carries_what_every_answer_does(
    keyed_app: Flask, keyed_services: Any, keys: Keys
) -> None:
    client = keyed_app.test_client()
    calls = Counted(keyed_app.wsgi_app)  # type: ignore[arg-type]
    job_id = new_job(keyed_services.db)
    set_row(keyed_services.db, job_id, tenant="acme", **STATES["running"])
    with keyed_services.db.session() as session:
        session.get(ApiKey, keys.ids["alice"]).limits = {"requests_per_minute": 1}
    caches_expired(keyed_services)
    answers = [client.get(f"/jobs/{job_id}", headers=bearer(keys.alice)) for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 429] and calls.calls == 0
    assert all(a.headers["X-Content-Type-Options"] == "nosniff" for a in answers)
