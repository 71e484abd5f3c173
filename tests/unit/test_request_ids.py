"""``X-Request-Id``: taken from the caller or made, echoed on every answer (refusals and the fast
path's polls too), and a malformed one refused with a machine-readable code."""

from __future__ import annotations

import re
from typing import Any

import pytest

from jobservice.errors import Malformed
from jobservice.http.api.policy.request_ids import MAX_LENGTH, request_id
from tests.factories import new_job


def test_the_callers_id_is_echoed_and_one_is_made_when_none_came(client: Any) -> None:
    given = client.get("/models", headers={"X-Request-Id": "nginx-4f1c:9/a+b=c@d"})
    assert given.headers["X-Request-Id"] == "nginx-4f1c:9/a+b=c@d"
    made = [client.get("/models").headers["X-Request-Id"] for _ in range(2)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", m) for m in made) and made[0] != made[1]


def test_refusals_and_fast_polls_carry_it_too(client: Any, services: Any) -> None:
    refused = client.get("/models", headers={"Host": "evil.example", "X-Request-Id": "r-421"})
    assert refused.status_code == 421 and refused.headers["X-Request-Id"] == "r-421"
    job_id = new_job(services.db)
    polled = client.get(f"/jobs/{job_id}", headers={"X-Request-Id": "poll-7"})
    assert polled.status_code == 200 and polled.headers["X-Request-Id"] == "poll-7"


@pytest.mark.parametrize("bad", ["has space", "x" * (MAX_LENGTH + 1), "tab\there", "ünïcode"])
def test_a_malformed_id_is_a_400_with_its_code(client: Any, bad: str) -> None:
    response = client.get("/models", headers={"X-Request-Id": bad})
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid_request_id" and "X-Request-Id" in error["message"]


def test_the_rule_itself() -> None:
    assert request_id("a" * MAX_LENGTH) == "a" * MAX_LENGTH
    assert len(request_id(None)) == 32 and len(request_id("")) == 32
    with pytest.raises(Malformed):
        request_id("a\r\nSet-Cookie: x=1")
