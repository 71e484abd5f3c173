"""Hostile request bodies: each is a 4xx with a code and a sentence, leaves nothing, and the service
stays healthy. The start of the corpus issue 9 asks for; each case names the class of hole it covers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from tests.unit.test_api import assert_error, job_count, stored_keys

T2V = {"task": "text2video", "prompt": "a kite", "num_frames": 9}


def _json(body: str) -> Callable[[Any], Any]:
    return lambda client: client.post("/jobs", data=body, content_type="application/json")


CASES: dict[str, tuple[Callable[[Any], Any], int, str]] = {
    # JSON that Python's parser cannot or should not take
    "nested 100k deep": (_json("[" * 100_000 + "]" * 100_000), 400, "invalid_json"),
    "nested past the depth cap": (_json('{"a":' + "[" * 40 + "]" * 40 + "}"), 400, "invalid_json"),
    "NaN is not JSON": (
        _json('{"task":"text2video","prompt":"x","guidance_scale":NaN}'),
        400,
        "invalid_json",
    ),
    "Infinity is not JSON": (
        _json('{"task":"text2video","prompt":"x","seed":-Infinity}'),
        400,
        "invalid_json",
    ),
    "a JSON list": (_json("[1, 2]"), 400, "invalid_json"),
    "truncated JSON": (_json('{"task": "text2'), 400, "invalid_json"),
    # NUL characters (PostgreSQL cannot store them)
    "NUL in a JSON prompt": (
        lambda c: c.post("/jobs", json={**T2V, "prompt": "a\x00b"}),
        422,
        "invalid_text",
    ),
    "NUL in a JSON key": (lambda c: c.post("/jobs", json={**T2V, "x\x00": 1}), 422, "invalid_text"),
    "NUL in a form field": (
        lambda c: c.post("/jobs", data={**T2V, "prompt": "a\x00b"}, content_type="multipart/form-data"),
        422,
        "invalid_text",
    ),
    "NUL in a batch spec": (
        lambda c: c.post(
            "/batches", json={"spec": {"name": "n\x00", "cases": [{"name": "a", "model": "reference-t2v"}]}}
        ),
        422,
        "invalid_text",
    ),
    "NUL escaped in batch YAML": (
        lambda c: c.post("/batches", data='name: "x\\0"\ncases: []', content_type="application/yaml"),
        422,
        "invalid_spec",
    ),
    # sizes
    "a JSON job of 400 KB": (
        lambda c: c.post("/jobs", json={**T2V, "prompt": "a" * 400_000}),
        413,
        "payload_too_large",
    ),
    "200 form parts": (
        lambda c: c.post(
            "/jobs", data={f"f{i}": "1" for i in range(200)}, content_type="multipart/form-data"
        ),
        413,
        "payload_too_large",
    ),
    # YAML scalars PyYAML would build into something else
    "impossible date in a batch spec": (
        lambda c: c.post(
            "/batches",
            data="name: x\ndate: 2026-02-30\ncases:\n - {name: a, model: reference-t2v}\n",
            content_type="application/yaml",
        ),
        422,
        "invalid_spec",
    ),
    "a python tag in YAML": (
        lambda c: c.post(
            "/batches", data="name: !!python/object:os.system x\n", content_type="application/yaml"
        ),
        422,
        "invalid_spec",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_hostile_request_is_refused_and_leaves_nothing(client: Any, services: Any, name: str) -> None:
    send, status, code = CASES[name]
    response = send(client)
    assert_error(response, status, code)
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert job_count(services) == 0 and stored_keys(services) == []
    with services.db.session() as session:
        assert session.execute(text("SELECT count(*) FROM batches")).scalar() == 0
    assert client.get("/healthz").status_code == 200


def test_a_date_like_prompt_stays_text(client: Any) -> None:
    spec = "name: dates\ncases:\n - {name: a, model: reference-t2v, params: {prompt: 2026-02-30, num_frames: 9}}\n"
    response = client.post("/batches", data=spec, content_type="application/yaml")
    assert response.status_code == 202, response.get_data(as_text=True)
    jobs = client.get(f"/batches/{response.get_json()['id']}/jobs").get_json()
    assert {job["params"]["prompt"] for job in jobs["jobs"]} == {"2026-02-30"}, jobs  # every repeat
