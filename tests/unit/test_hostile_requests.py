"""Hostile request bodies: each is a 4xx with a code and a sentence, leaves nothing, and the service
stays healthy (``tests/unit/hostile.py``). Part of the corpus issue 9 asks for, with
test_hostile_urls.py, test_hostile_specs.py and test_hostile_media.py; each case names its class of hole."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from flask import Response
from werkzeug.test import EnvironBuilder

from tests.unit.hostile import Case, assert_refused

T2V = {"task": "text2video", "prompt": "a kite", "num_frames": 9}


def _json(body: str) -> Callable[[Any], Any]:
    return lambda client: client.post("/jobs", data=body, content_type="application/json")


def _chunked(client: Any, body: bytes) -> Any:
    """POST /jobs a body without a length, as a chunked one reaches the app (the test client would
    add a Content-Length, so the environ goes to the app directly)."""
    environ = EnvironBuilder(
        path="/jobs", method="POST", data=body, content_type="application/json"
    ).get_environ()
    del environ["CONTENT_LENGTH"]
    environ["wsgi.input_terminated"] = True  # what gunicorn says of a chunked body
    environ["HTTP_TRANSFER_ENCODING"] = "chunked"
    return Response.from_app(client.application, environ)


CASES: dict[str, Case] = {
    # numbers JSON has no room for
    "1e999 in a JSON job": (
        _json('{"task":"text2video","prompt":"x","guidance_scale":1e999}'),
        400,
        "invalid_json",
    ),
    "a 5000-digit number in a JSON job": (
        _json('{"task":"text2video","prompt":"x","seed":' + "9" * 5000 + "}"),
        400,
        "invalid_json",
    ),
    "a chunked JSON body of 400 KB": (
        lambda c: _chunked(c, b'{"prompt":"' + b"a" * 400_000 + b'"}'),
        413,
        "payload_too_large",
    ),
    "a JSON job as text/plain": (
        lambda c: c.post("/jobs", data='{"task":"text2video","prompt":"x"}', content_type="text/plain"),
        415,
        "unsupported_media_type",
    ),
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
def test_a_hostile_request_is_refused_and_leaves_nothing(hostile: Any, name: str) -> None:
    client, services = hostile
    assert_refused(client, services, CASES[name])


def test_a_date_like_prompt_stays_text(hostile: Any) -> None:
    client, _ = hostile
    spec = "name: dates\ncases:\n - {name: a, model: reference-t2v, params: {prompt: 2026-02-30, num_frames: 9}}\n"
    response = client.post("/batches", data=spec, content_type="application/yaml")
    assert response.status_code == 202, response.get_data(as_text=True)
    jobs = client.get(f"/batches/{response.get_json()['id']}/jobs").get_json()
    assert {job["params"]["prompt"] for job in jobs["jobs"]} == {"2026-02-30"}, jobs  # every repeat
