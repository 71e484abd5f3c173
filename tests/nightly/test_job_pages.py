"""``GET /batches/<id>/jobs`` a page at a time: every job once, oldest first, with queue positions."""

from __future__ import annotations

from typing import Any

import pytest

from tests.nightly.helpers import spec, t2v_case

pytestmark = pytest.mark.integration


def test_batch_jobs_paged_by_cursor(bclient: Any) -> None:
    created = bclient.post("/batches", json={"spec": spec(t2v_case(repeat=5), t2v_case("kite", repeat=2))})
    assert created.status_code == 202, created.get_data(as_text=True)
    batch_id = created.get_json()["id"]
    everything = bclient.get(f"/batches/{batch_id}/jobs").get_json()
    assert len(everything["jobs"]) == 7 and everything["next_cursor"] is None
    seen: list[dict[str, Any]] = []
    cursor = ""
    for _ in range(10):
        page = bclient.get(f"/batches/{batch_id}/jobs?limit=3&cursor={cursor}").get_json()
        seen.extend(page["jobs"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert [j["id"] for j in seen] == [j["id"] for j in everything["jobs"]], "same jobs, same order, once"
    assert [j["batch"] for j in seen] == [j["batch"] for j in everything["jobs"]]
    # No group may run them yet: no place in the dispatcher's order (tests/unit/test_api.py has one).
    assert all(j["queue_position"] is None for j in seen)
    for bad in ("0", "1001", "x", "-1"):
        answer = bclient.get(f"/batches/{batch_id}/jobs?limit={bad}")
        assert answer.status_code == 422 and answer.get_json()["error"]["code"] == "invalid_limit"
    refused = bclient.get(f"/batches/{batch_id}/jobs?limit=2&cursor=%%%")
    assert refused.status_code == 400 and refused.get_json()["error"]["code"] == "invalid_cursor"
