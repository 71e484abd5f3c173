"""One error handler: domain errors by kind, outages as 503s, pydantic errors as 422s; pages as HTML."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy.exc import OperationalError

from jobservice.errors import (
    Conflict,
    DomainError,
    Forbidden,
    Invalid,
    Malformed,
    NotFound,
    TooLarge,
    Unavailable,
    Unsupported,
    invalid_parameters,
    pydantic_problems,
)
from jobservice.storage import StoreUnavailable


class Size(BaseModel):
    width: int
    height: int


def _raise(error: Exception) -> Any:
    def view() -> Any:
        raise error

    return view


def _validation_error() -> Exception:
    try:
        Size.model_validate({"width": "wide"})
    except Exception as exc:  # noqa: BLE001 - the pydantic error itself is what the test needs
        return exc
    raise AssertionError("expected a ValidationError")


RAISED = {
    "malformed": (Malformed("invalid_json", "Not JSON."), 400, "invalid_json"),
    "forbidden": (Forbidden("cross_site_request", "No."), 403, "cross_site_request"),
    "missing": (NotFound("job_not_found", "No job."), 404, "job_not_found"),
    "conflict": (Conflict("job_finished", "Done."), 409, "job_finished"),
    "large": (TooLarge("file_too_large", "Big."), 413, "file_too_large"),
    "unsupported": (Unsupported("unsupported_media_type", "XML?"), 415, "unsupported_media_type"),
    "invalid": (Invalid("invalid_limit", "1 to 100."), 422, "invalid_limit"),
    "tools": (Unavailable("media_tools_missing", "No ffprobe."), 503, "media_tools_missing"),
    "store": (StoreUnavailable("connection refused"), 503, "storage_unavailable"),
    "database": (OperationalError("SELECT 1", {}, Exception("gone")), 503, "database_unavailable"),
    # Request models turn their pydantic errors into invalid_parameters where they are read; one
    # that reaches the handler came from our own data (a bad row or report): a bug, not a 422.
    "pydantic": (_validation_error(), 500, "internal_error"),
    "bug": (RuntimeError("oops"), 500, "internal_error"),
}


@pytest.fixture
def raising_client(app: Any) -> Any:
    for name, (error, _status, _code) in RAISED.items():
        app.add_url_rule(f"/raise/{name}", f"raise_{name}", _raise(error))
    return app.test_client()


@pytest.mark.parametrize("name", list(RAISED))
def test_the_api_answers_each_kind_with_its_status_and_code(raising_client: Any, name: str) -> None:
    _error, status, code = RAISED[name]
    response = raising_client.get(f"/raise/{name}")
    assert response.status_code == status
    body = response.get_json()["error"]
    assert body["code"] == code and body["message"]
    if name == "store":
        assert "connection refused" not in body["message"]  # the store's own words stay in the log


def test_a_pydantic_error_lists_every_problem() -> None:
    error = invalid_parameters(_validation_error())  # type: ignore[arg-type]
    assert error.status == 422 and error.code == "invalid_parameters"
    body = error.body()["error"]
    assert body["message"].startswith("Invalid parameter 'width':")
    assert {d["field"] for d in body["details"]} == {"width", "height"}
    assert "1 more problem" in body["message"]


def test_pydantic_problems_names_the_root_when_there_is_no_field() -> None:
    class Pair(BaseModel):
        a: int

    try:
        Pair.model_validate([1])
    except Exception as exc:  # noqa: BLE001
        message, details = pydantic_problems(exc, root="(spec)")  # type: ignore[arg-type]
    assert details[0]["field"] == "(spec)" and message.startswith("'(spec)':")


def test_pages_answer_outages_with_an_html_error_page(app: Any) -> None:
    # Endpoints named web.* are the web blueprint's: its page handlers answer them.
    app.add_url_rule("/ui/raise-store", "web.raise_store", _raise(StoreUnavailable("down")))
    app.add_url_rule("/ui/raise-domain", "web.raise_domain", _raise(Conflict("job_finished", "Done.")))
    client = app.test_client()
    page = client.get("/ui/raise-store", headers={"Accept": "text/html"})
    assert page.status_code == 503 and page.mimetype == "text/html"
    assert "Temporarily unavailable" in page.get_data(as_text=True)
    conflict = client.get("/ui/raise-domain", headers={"Accept": "text/html"})
    assert conflict.status_code == 409 and "Not possible right now" in conflict.get_data(as_text=True)


def test_every_kind_is_a_domain_error_with_a_field() -> None:
    error = Invalid("duplicate_input", "Send one 'image' file, not 2.", field="image")
    assert isinstance(error, DomainError) and error.field == "image" and error.status == 422
    assert error.body() == {"error": {"code": "duplicate_input", "message": "Send one 'image' file, not 2."}}
