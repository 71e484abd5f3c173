"""API keys and tenants through the HTTP API: 401s, isolation (404, never 403), admins, who-did-it."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import pytest
from sqlalchemy import func, select, text, update

from jobservice.db.tables import ApiKey, Job
from tests.auth.conftest import Keys, bearer, t2v
from tests.conftest import caches_expired


def assert_refused(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert body["error"]["code"] == code and body["error"]["message"]
    return dict(body)


def test_no_wrong_malformed_or_revoked_key_is_a_401(kclient: Any, keys: Keys, keyed_services: Any) -> None:
    for headers in ({}, bearer("jsk_" + "x" * 32), bearer("not-a-key"), {"Authorization": "Basic abc"}):
        response = kclient.get("/jobs", headers=headers)
        assert_refused(response, 401, "unauthorized")
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert kclient.get("/jobs", headers=bearer(keys.alice)).status_code == 200
    with keyed_services.db.session() as session:
        from jobservice.auth.keys import revoke_key

        revoke_key(session, keys.ids["alice"])
    caches_expired(keyed_services)  # a revoked key stops working within caches.PRINCIPAL_SECONDS
    assert_refused(kclient.get("/jobs", headers=bearer(keys.alice)), 401, "unauthorized")
    # Liveness and the API document need no key; readiness answers without details.
    assert kclient.get("/healthz").status_code == 200
    assert kclient.get("/openapi.json").status_code == 200
    ready = kclient.get("/readyz").get_json()
    assert "workers" not in ready and all(set(c) == {"ok"} for c in ready["checks"].values())


def test_only_a_hash_is_stored_and_secrets_never_reach_logs(
    kclient: Any, keys: Keys, keyed_services: Any, caplog: pytest.LogCaptureFixture
) -> None:
    assert keys.alice.startswith("jsk_") and len(keys.alice) >= 36
    with keyed_services.db.session() as session:
        rows = session.execute(text("SELECT * FROM api_keys")).all()
    dumped = json.dumps([list(map(str, r)) for r in rows])
    assert keys.alice not in dumped and keys.bob not in dumped and keys.admin not in dumped
    caplog.set_level(logging.DEBUG)
    t2v(kclient, keys.alice)
    wrong = keys.alice[:-4] + "AAAA"
    body = kclient.get("/jobs", headers=bearer(wrong)).get_data(as_text=True)
    assert wrong not in body and keys.alice not in caplog.text and wrong not in caplog.text


def test_another_tenants_job_is_a_404_everywhere(kclient: Any, keys: Keys) -> None:
    job = t2v(kclient, keys.alice).get_json()
    own = kclient.get(f"/jobs/{job['id']}", headers=bearer(keys.alice))
    assert own.status_code == 200 and own.get_json()["tenant"] == "acme"
    for path in ("", "/events", "/video", "/report", "/log"):
        assert_refused(
            kclient.get(f"/jobs/{job['id']}{path}", headers=bearer(keys.bob)), 404, "job_not_found"
        )
    assert_refused(kclient.post(f"/jobs/{job['id']}/cancel", headers=bearer(keys.bob)), 404, "job_not_found")
    assert kclient.get("/jobs", headers=bearer(keys.bob)).get_json()["jobs"] == []
    assert [j["id"] for j in kclient.get("/jobs", headers=bearer(keys.alice)).get_json()["jobs"]] == [
        job["id"]
    ]
    # An admin sees every tenant, or one with ?tenant=.
    bobs = t2v(kclient, keys.bob).get_json()
    every = {j["id"] for j in kclient.get("/jobs", headers=bearer(keys.admin)).get_json()["jobs"]}
    assert every == {job["id"], bobs["id"]}
    only = kclient.get("/jobs?tenant=beta", headers=bearer(keys.admin)).get_json()["jobs"]
    assert [j["id"] for j in only] == [bobs["id"]]
    assert kclient.get(f"/jobs/{job['id']}", headers=bearer(keys.admin)).status_code == 200


def test_idempotency_keys_are_per_tenant_and_events_name_the_key(
    kclient: Any, keys: Keys, keyed_services: Any
) -> None:
    first = t2v(kclient, keys.alice, **{"Idempotency-Key": "nightly-1"})
    other = t2v(kclient, keys.bob, **{"Idempotency-Key": "nightly-1"})
    again = t2v(kclient, keys.alice, **{"Idempotency-Key": "nightly-1"})
    assert first.status_code == 202 and other.status_code == 202 and again.status_code == 200
    assert first.get_json()["id"] == again.get_json()["id"] != other.get_json()["id"]
    job_id = first.get_json()["id"]
    assert kclient.post(f"/jobs/{job_id}/cancel", headers=bearer(keys.alice)).status_code == 202
    events = kclient.get(f"/jobs/{job_id}/events", headers=bearer(keys.alice)).get_json()["events"]
    assert [e["actor"] for e in events] == [keys.ids["alice"], keys.ids["alice"]]
    with keyed_services.db.session() as session:
        assert (
            session.scalar(select(Job.submitted_by).where(Job.id == uuid.UUID(job_id))) == keys.ids["alice"]
        )


def test_reports_hide_deployment_details_from_tenants(kclient: Any, keys: Keys, keyed_services: Any) -> None:
    job_id = t2v(kclient, keys.alice).get_json()["id"]
    report = {
        "job_id": job_id,
        "worker_id": "cpu@host-7",
        "device_placement": {"model": "cuda:3"},
        "extra": {
            "instance": "http://10.0.0.7:8091",
            "diffusers": {"path": "/models/wan"},
            "warnings": ["w"],
        },
    }
    keyed_services.store.put_bytes(f"jobs/{job_id}/report.json", json.dumps(report).encode())
    with keyed_services.db.session() as session:
        session.execute(
            update(Job).where(Job.id == uuid.UUID(job_id)).values(report_key=f"jobs/{job_id}/report.json")
        )
    seen = kclient.get(f"/jobs/{job_id}/report", headers=bearer(keys.alice)).get_json()
    assert seen["extra"] == {"warnings": ["w"]} and seen["device_placement"] == {}
    assert "10.0.0.7" not in json.dumps(seen) and "/models/wan" not in json.dumps(seen)
    assert set(seen["redacted"]) >= {"extra.instance", "extra.diffusers", "device_placement", "worker_id"}
    full = kclient.get(f"/jobs/{job_id}/report", headers=bearer(keys.admin)).get_json()
    assert full["extra"]["instance"] == "http://10.0.0.7:8091" and "redacted" not in full


def test_only_admins_see_workers(kclient: Any, keys: Keys) -> None:
    assert "workers" not in kclient.get("/readyz", headers=bearer(keys.alice)).get_json()
    assert "workers" in kclient.get("/readyz", headers=bearer(keys.admin)).get_json()
    models = kclient.get("/models", headers=bearer(keys.alice)).get_json()["models"]
    assert models and all("workers" not in m for m in models)


def test_quota_over_active_jobs_is_a_429_and_creates_nothing(
    kclient: Any, keys: Keys, keyed_services: Any
) -> None:
    with keyed_services.db.session() as session:
        session.get(ApiKey, keys.ids["alice"]).limits = {"active_jobs": 1}
    caches_expired(keyed_services)
    assert t2v(kclient, keys.alice).status_code == 202
    refused = t2v(kclient, keys.alice)
    assert_refused(refused, 429, "quota_exceeded")
    assert int(refused.headers["Retry-After"]) >= 1
    with keyed_services.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Job).where(Job.tenant == "acme")) == 1
    assert t2v(kclient, keys.bob).status_code == 202, "another tenant is not affected"
    quota = kclient.get("/quota", headers=bearer(keys.alice)).get_json()
    assert quota["limits"]["active_jobs"] == 1 and quota["usage"]["active_jobs"] == 1


def test_disk_floor_is_a_507_and_stores_nothing(settings: Any, keys: Keys) -> None:
    from jobservice.http.app import create_app
    from jobservice.wiring import build_services

    svc = build_services(settings.model_copy(update={"auth": "keys", "min_free_mb": 10**9}))
    client = create_app(services=svc).test_client()
    try:
        assert_refused(t2v(client, keys.alice), 507, "insufficient_storage")
        assert not list(svc.store.list("jobs/"))
        ready = client.get("/readyz", headers=bearer(keys.admin)).get_json()
        assert ready["accepting_jobs"] is False and ready["storage_problems"]
    finally:
        svc.db.dispose()
