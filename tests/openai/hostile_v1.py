"""What the ``/v1/videos`` hostile tests share: the one assertion (OpenAI's error shape with the exact
status and code), a multipart poster that can repeat a field, and videos in each state."""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Callable
from typing import Any

from flask.testing import FlaskClient
from openai.types import Video, VideoCreateError
from werkzeug.datastructures import FileStorage, MultiDict
from werkzeug.test import encode_multipart

from jobservice.jobs.transitions import Owner, claim_job, mark_failed
from jobservice.wiring import Services
from tests.openai.conftest import bearer

Send = Callable[[FlaskClient], Any]
T2V = {"model": "reference-t2v", "prompt": "a red kite", "size": "128x96", "seconds": "1"}
PORTRAIT_MODEL = {"model": "reference-talking-head", "prompt": "p"}


def assert_v1_refusal(response: Any, status: int, code: str, param: str | None = "*") -> dict[str, Any]:
    """``response`` is ``status`` with an OpenAI error of ``code`` (and ``param`` unless "*")."""
    assert response.status_code == status, response.get_data(as_text=True)[:500]
    assert response.is_json, response.get_data(as_text=True)[:300]
    error = response.get_json()["error"]
    assert {"message", "type", "param", "code"} <= set(error), error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and len(error["message"]) > 10, error
    want_type = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error"}
    assert error["type"] == want_type.get(status, "invalid_request_error"), error
    if param != "*":
        assert error["param"] == param, error
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    return dict(error)


def post_multipart(client: Any, path: str, form: dict[str, Any], **kw: Any) -> Any:
    """POST ``form`` as multipart from memory: a value may be a list (the field repeated), a file a
    ``(stream, filename)`` tuple."""
    values: MultiDict[str, Any] = MultiDict()
    for key, value in form.items():
        for one in value if isinstance(value, list) else [value]:
            if isinstance(one, tuple):
                values.add(key, FileStorage(stream=one[0], filename=one[1], name=key))
            else:
                values.add(key, one)
    boundary, body = encode_multipart(values)
    return client.post(path, data=body, content_type=f"multipart/form-data; boundary={boundary}", **kw)


def json_body(body: str | bytes, path: str = "/v1/videos") -> Send:
    return lambda c: c.post(path, data=body, content_type="application/json")


def create(**fields: Any) -> Send:
    return lambda c: c.post("/v1/videos", json={**T2V, **fields})


def form(**fields: Any) -> Send:
    return lambda c: post_multipart(c, "/v1/videos", {**T2V, **fields})


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


# (request, status, code, param)
def make_video(client: FlaskClient, secret: str) -> str:
    created = client.post("/v1/videos", json=T2V, headers=bearer(secret) if secret else {})
    assert created.status_code == 200, created.get_data(as_text=True)
    return str(created.get_json()["id"])


def run_then_fail(services: Services, video_id: str) -> None:
    with services.db.session() as session:
        assert claim_job(session, uuid.UUID(video_id), worker_id="w@h8", lease_seconds=30) is not None
    with services.db.session() as session:
        owner = Owner(worker_id="w@h8", attempt=1)
        mark_failed(session, uuid.UUID(video_id), code="oom", message="out of memory", owner=owner)


def sdk_video(body: dict[str, Any]) -> Video:
    """``body`` as ``openai.types.Video``, validated field by field (the SDK's ``size`` is a literal of
    OpenAI's own four sizes, so it is checked as a WxH string here)."""
    assert set(body) >= {"id", "object", "model", "status", "progress", "created_at", "size", "seconds"}
    video = Video.model_validate(
        {**body, "size": "1280x720"}, strict=True
    )  # no coercion: our types are its types
    assert set(Video.model_fields) <= set(body), set(Video.model_fields) - set(body)
    assert body["object"] == "video" and isinstance(body["progress"], int) and 0 <= body["progress"] <= 100
    assert isinstance(body["created_at"], int) and isinstance(body["seconds"], str)
    assert re.fullmatch(r"\d+x\d+", body["size"]), body["size"]
    assert float(body["seconds"]) >= 0
    for stamp in ("completed_at", "expires_at"):
        assert body[stamp] is None or isinstance(body[stamp], int)
    if body["error"] is not None:
        assert VideoCreateError.model_validate(body["error"]).code and isinstance(
            video.error, VideoCreateError
        )
    return video
