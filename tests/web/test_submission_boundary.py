"""One submission parser for ``POST /jobs`` and the web form; outages answered the same way by both."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from werkzeug.datastructures import MultiDict
from werkzeug.test import encode_multipart

from jobservice.db.tables import Job
from jobservice.storage import StoreUnavailable
from jobservice.wiring import Services
from tests.web.conftest import Browser


def _jobs(services: Services) -> int:
    with services.db.session() as session:
        return int(session.scalar(select(func.count()).select_from(Job)) or 0)


def test_the_api_refuses_repeated_fields_and_files(client: Any, portrait: Path) -> None:
    repeated = client.post(
        "/jobs", data={"task": "text2video", "prompt": ["a", "b"]}, content_type="multipart/form-data"
    )
    assert repeated.status_code == 422
    assert repeated.get_json()["error"]["code"] == "invalid_parameters"
    assert "given 2 times" in repeated.get_json()["error"]["message"]
    image = portrait.read_bytes()
    twice = client.post(
        "/jobs",
        data={"task": "audio2video", "image": [(io.BytesIO(image), "a.png"), (io.BytesIO(image), "b.png")]},
        content_type="multipart/form-data",
    )
    assert twice.status_code == 422 and twice.get_json()["error"]["code"] == "duplicate_input"


def test_missing_files_are_named_in_details(client: Any) -> None:
    response = client.post("/jobs", data={"task": "audio2video"}, content_type="multipart/form-data")
    error = response.get_json()["error"]
    assert response.status_code == 422 and error["code"] == "missing_input"
    assert "'image' and 'audio'" in error["message"]
    assert [d["field"] for d in error["details"]] == ["image", "audio"]


def test_the_form_lets_a_repeated_field_s_last_value_win(browser: Browser, services: Services) -> None:
    # A checkbox arrives after its hidden fallback; the API would refuse the repeat.
    values = MultiDict(
        [("csrf_token", browser.token()), ("task", "text2video"), ("prompt", "first"), ("prompt", "last")]
    )
    boundary, body = encode_multipart(values)
    response = browser.client.post(
        "/ui/jobs",
        data=body,
        content_type=f"multipart/form-data; boundary={boundary}",
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 202, response.get_json()
    with services.db.session() as session:
        job = session.scalars(select(Job)).one()
    assert job.params["prompt"] == "last" and job.source == "web"


@pytest.fixture
def store_down(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise StoreUnavailable("connection refused")

    monkeypatch.setattr(services.store, "put_file", refuse)


def test_a_store_outage_is_a_503_for_the_api_and_the_form(
    client: Any, browser: Browser, services: Services, portrait: Path, speech: Path, store_down: None
) -> None:
    files = {"image": (portrait.read_bytes(), "p.png"), "audio": (speech.read_bytes(), "s.wav")}
    api = client.post(
        "/jobs",
        data={"task": "audio2video", **{k: (io.BytesIO(d), n) for k, (d, n) in files.items()}},
        content_type="multipart/form-data",
    )
    assert api.status_code == 503 and api.get_json()["error"]["code"] == "storage_unavailable"
    script = browser.post("/ui/jobs", {"task": "audio2video"}, files, headers={"Accept": "application/json"})
    assert script.status_code == 503
    assert "object store is unavailable" in script.get_json()["fields"]["__all__"]
    page = browser.post("/ui/jobs", {"task": "audio2video"}, files)
    assert page.status_code == 503 and page.mimetype == "text/html"
    assert "object store is unavailable" in page.get_data(as_text=True)
    assert _jobs(services) == 0
