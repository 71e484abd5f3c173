"""Batches belong to a tenant too; a batch over the cap is refused up front; per-key request rates."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from jobservice.db.tables import ApiKey, Batch, Job
from tests.auth.conftest import Keys, bearer
from tests.auth.test_keys_and_tenants import assert_refused
from tests.conftest import caches_expired
from tests.nightly.helpers import spec, t2v_case


def test_another_tenants_batch_is_a_404(kclient: Any, keys: Keys) -> None:
    created = kclient.post("/batches", json={"spec": spec(t2v_case(repeat=1))}, headers=bearer(keys.alice))
    assert created.status_code == 202, created.get_data(as_text=True)
    batch_id = created.get_json()["id"]
    for path in ("", "/jobs", "/report"):
        assert_refused(
            kclient.get(f"/batches/{batch_id}{path}", headers=bearer(keys.bob)), 404, "batch_not_found"
        )
    for action in ("cancel", "resume", "pin", "unpin"):
        refused = kclient.post(f"/batches/{batch_id}/{action}", headers=bearer(keys.bob))
        assert_refused(refused, 404, "batch_not_found")
    assert kclient.get("/batches", headers=bearer(keys.bob)).get_json()["batches"] == []
    mine = kclient.get("/batches", headers=bearer(keys.alice)).get_json()["batches"]
    assert [b["id"] for b in mine] == [batch_id]
    jobs = kclient.get(f"/batches/{batch_id}/jobs", headers=bearer(keys.alice)).get_json()["jobs"]
    assert jobs and {j["tenant"] for j in jobs} == {"acme"}


def test_a_batch_over_the_cap_is_refused_before_anything_is_stored(
    kclient: Any, keys: Keys, keyed_services: Any
) -> None:
    with keyed_services.db.session() as session:
        session.get(ApiKey, keys.ids["alice"]).limits = {"batch_jobs": 4}
    caches_expired(keyed_services)
    refused = kclient.post(
        "/batches",
        json={"spec": spec(t2v_case("a", repeat=3), t2v_case("b", repeat=2))},
        headers=bearer(keys.alice),
    )
    assert_refused(refused, 429, "quota_exceeded")
    assert "Retry-After" in refused.headers
    with keyed_services.db.session() as session:
        assert session.scalar(select(func.count()).select_from(Batch)) == 0
        assert session.scalar(select(func.count()).select_from(Job)) == 0
    assert not list(keyed_services.store.list("groups/"))


def test_request_rate_per_key_is_a_429_with_retry_after(
    kclient: Any, keys: Keys, keyed_services: Any
) -> None:
    with keyed_services.db.session() as session:
        session.get(ApiKey, keys.ids["alice"]).limits = {"requests_per_minute": 3}
    caches_expired(keyed_services)
    answers = [kclient.get("/jobs", headers=bearer(keys.alice)) for _ in range(5)]
    assert [a.status_code for a in answers[:3]] == [200, 200, 200]
    assert_refused(answers[3], 429, "rate_limited")
    assert 1 <= int(answers[3].headers["Retry-After"]) <= 60
    assert kclient.get("/jobs", headers=bearer(keys.bob)).status_code == 200, "other keys are not affected"


def test_a_spec_cannot_name_another_tenants_stored_object(
    kclient: Any, keys: Keys, keyed_services: Any
) -> None:
    from tests.nightly.helpers import a2v_case

    theirs = kclient.post(
        "/jobs",
        data={"task": "text2video", "prompt": "secret plans"},
        headers=bearer(keys.bob),
    ).get_json()["id"]
    for name in ("image.png", "audio.wav"):
        keyed_services.store.put_bytes(f"jobs/{theirs}/inputs/{name}", b"not really media")
    inputs = {
        "image": {"key": f"jobs/{theirs}/inputs/image.png"},
        "audio": {"key": f"jobs/{theirs}/inputs/audio.wav"},
    }
    case = a2v_case(inputs=inputs)
    refused = kclient.post("/batches", json={"spec": spec(case)}, headers=bearer(keys.alice))
    body = assert_refused(refused, 422, "invalid_spec")
    assert "no object" in body["error"]["message"]
