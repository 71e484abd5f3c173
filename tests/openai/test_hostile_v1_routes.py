"""Hostile requests that name videos on ``/v1/videos``: list queries, ids, methods, content, remix,
delete and keys; each a 4xx in OpenAI's error shape with the exact status and code."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from jobservice.jobs.transitions import claim_job
from jobservice.wiring import Services
from tests.openai.conftest import bearer, finish
from tests.openai.hostile_v1 import T2V, assert_v1_refusal, make_video, run_then_fail
from tests.unit.hostile import leftovers

LIST_CASES: dict[str, tuple[dict[str, str], str, str]] = {
    "limit 0": ({"limit": "0"}, "invalid_limit", "limit"),
    "limit 101": ({"limit": "101"}, "invalid_limit", "limit"),
    "limit abc": ({"limit": "abc"}, "invalid_limit", "limit"),
    "limit -1": ({"limit": "-1"}, "invalid_limit", "limit"),
    "limit 1.5": ({"limit": "1.5"}, "invalid_limit", "limit"),
    "limit in Arabic-Indic digits": ({"limit": "\u0663"}, "invalid_limit", "limit"),
    "limit huge": ({"limit": "9" * 400}, "invalid_limit", "limit"),
    "order sideways": ({"order": "sideways"}, "invalid_order", "order"),
    "order in capitals": ({"order": "DESC"}, "invalid_order", "order"),
    "after garbage": ({"after": "garbage"}, "invalid_after", "after"),
    "after a nonexistent id": ({"after": str(uuid.uuid4())}, "invalid_after", "after"),
    "after a path trick": ({"after": "../../etc/passwd"}, "invalid_after", "after"),
}


@pytest.mark.parametrize("name", list(LIST_CASES))
def test_a_hostile_list_query_is_a_400(keyed_client: tuple[FlaskClient, dict[str, str]], name: str) -> None:
    client, keys = keyed_client
    query, code, param = LIST_CASES[name]
    error = assert_v1_refusal(
        client.get("/v1/videos", query_string=query, headers=bearer(keys["alice"])), 400, code, param
    )
    assert len(error["message"]) < 300  # the input is quoted, never echoed in full


def test_after_another_tenants_video_is_refused_like_a_missing_one(
    keyed_client: tuple[FlaskClient, dict[str, str]],
) -> None:
    client, keys = keyed_client
    theirs = make_video(client, keys["bob"])
    refused = client.get(f"/v1/videos?after={theirs}", headers=bearer(keys["alice"]))
    error = assert_v1_refusal(refused, 400, "invalid_after", "after")
    assert error["message"] == f"'after' names no video of yours: '{theirs}'."


BAD_IDS = {
    "not a UUID": "not-a-uuid",
    "dot dot": "%2e%2e",
    "a very long id": "a" * 5000,
    "a UUID with junk after it": "00000000-0000-0000-0000-000000000000junk",
    "a nonexistent UUID": "00000000-0000-4000-8000-000000000000",
}


@pytest.mark.parametrize("route", ["", "/content", "DELETE", "/remix"])
@pytest.mark.parametrize("name", list(BAD_IDS))
def test_a_bad_video_id_is_a_404_on_every_route(
    hostile: tuple[FlaskClient, Services], name: str, route: str
) -> None:
    client, services = hostile
    path = f"/v1/videos/{BAD_IDS[name]}"
    if route == "DELETE":
        response = client.delete(path)
    elif route == "/remix":
        response = client.post(path + route, json={"prompt": "again"})
    else:
        response = client.get(path + route)
    error = assert_v1_refusal(response, 404, "video_not_found", "video_id")
    assert len(error["message"]) < 300
    assert leftovers(services) == []


ROUTING_CASES: dict[str, tuple[str, str, int, str]] = {
    "PUT on the collection": ("PUT", "/v1/videos", 405, "method_not_allowed"),
    "PATCH on a video": ("PATCH", "/v1/videos/00000000-0000-4000-8000-000000000000", 405, "method_not_allowed"),
    "GET on remix": ("GET", "/v1/videos/00000000-0000-4000-8000-000000000000/remix", 405, "method_not_allowed"),
    "POST on content": ("POST", "/v1/videos/00000000-0000-4000-8000-000000000000/content", 405,
                        "method_not_allowed"),
    "a path that escapes": ("GET", "/v1/videos/..%2F..%2Fjobs", 404, "not_found"),
    "an unknown /v1 route": ("GET", "/v1/models", 404, "not_found"),
    "a NUL in the path": ("GET", "/v1/videos/%00", 400, "invalid_text"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ROUTING_CASES))
def test_routing_refusals_under_v1_are_openai_errors_too(
    hostile: tuple[FlaskClient, Services], name: str
) -> None:
    client, services = hostile
    method, path, status, code = ROUTING_CASES[name]
    response = client.open(path, method=method)
    assert_v1_refusal(response, status, code, None)
    if status == 405:
        assert "GET" in response.headers["Allow"] or "POST" in response.headers["Allow"]
    assert leftovers(services) == []


def test_head_and_options_answer_without_side_effects(hostile: tuple[FlaskClient, Services]) -> None:
    client, services = hostile
    assert client.head("/v1/videos").status_code == 200
    options = client.options("/v1/videos")
    assert options.status_code == 200 and set(options.headers["Allow"].split(", ")) >= {"GET", "POST"}
    assert leftovers(services) == []


def test_content_of_an_unfinished_failed_or_deleted_video_and_a_bogus_variant(
    hostile: tuple[FlaskClient, Services], tiny_video: Path
) -> None:
    client, services = hostile
    queued, failed, done = (make_video(client, "") for _ in range(3))
    run_then_fail(services, failed)
    assert_v1_refusal(
        client.get(f"/v1/videos/{queued}/content?variant=bogus"), 400, "invalid_variant", "variant"
    )
    assert_v1_refusal(client.get(f"/v1/videos/{queued}/content"), 404, "video_not_ready", None)
    assert_v1_refusal(
        client.get(f"/v1/videos/{queued}/content?variant=thumbnail"), 404, "video_not_ready", None
    )
    assert_v1_refusal(client.get(f"/v1/videos/{failed}/content"), 404, "video_not_ready", None)
    finish(services, done, tiny_video)
    with client.get(f"/v1/videos/{done}/content") as served:
        assert served.status_code == 200 and served.mimetype == "video/mp4"
    assert client.delete(f"/v1/videos/{done}").status_code == 200
    assert_v1_refusal(client.get(f"/v1/videos/{done}/content"), 404, "video_not_found", "video_id")


def test_delete_twice_and_a_running_video(hostile: tuple[FlaskClient, Services]) -> None:
    client, services = hostile
    queued, running = make_video(client, ""), make_video(client, "")
    first = client.delete(f"/v1/videos/{queued}")
    assert first.status_code == 200 and first.get_json() == {
        "id": queued, "object": "video.deleted", "deleted": True
    }  # fmt: skip
    # Deleted is gone from this API, as from OpenAI's: a second delete and a retrieve are 404s.
    assert_v1_refusal(client.delete(f"/v1/videos/{queued}"), 404, "video_not_found", "video_id")
    assert_v1_refusal(client.get(f"/v1/videos/{queued}"), 404, "video_not_found", "video_id")
    native = client.get(f"/jobs/{queued}")  # one deletion (DELETE /jobs/<id>): gone there too
    assert native.status_code == 404 and native.get_json()["error"]["code"] == "job_deleted"
    with services.db.session() as session:
        assert claim_job(session, uuid.UUID(running), worker_id="w@h8", lease_seconds=30) is not None
    for _ in range(2):
        assert_v1_refusal(client.delete(f"/v1/videos/{running}"), 409, "cancel_pending", None)
    assert client.get(f"/v1/videos/{running}").get_json()["status"] == "in_progress"


def test_remix_refusals(keyed_client: tuple[FlaskClient, dict[str, str]]) -> None:
    client, keys = keyed_client
    alice = bearer(keys["alice"])
    mine, theirs = make_video(client, keys["alice"]), make_video(client, keys["bob"])
    canceled = make_video(client, keys["alice"])
    assert client.delete(f"/v1/videos/{canceled}", headers=alice).status_code == 200
    cases: list[tuple[Any, int, str, str | None]] = [
        (client.post(f"/v1/videos/{theirs}/remix", json={"prompt": "x"}, headers=alice), 404,
         "video_not_found", "video_id"),
        (client.post(f"/v1/videos/{uuid.uuid4()}/remix", json={"prompt": "x"}, headers=alice), 404,
         "video_not_found", "video_id"),
        (client.post(f"/v1/videos/{canceled}/remix", json={"prompt": "x"}, headers=alice), 404,
         "video_not_found", "video_id"),  # deleted: gone from /v1/videos
        (client.post(f"/v1/videos/{mine}/remix", json={}, headers=alice), 400, "missing_prompt", "prompt"),
        (client.post(f"/v1/videos/{mine}/remix", json={"prompt": ["x"]}, headers=alice), 400,
         "missing_prompt", "prompt"),
        (client.post(f"/v1/videos/{mine}/remix", json={"prompt": "x" * 5000}, headers=alice), 400,
         "invalid_parameters", "prompt"),
        (client.post(f"/v1/videos/{mine}/remix", json={"prompt": "a\x00b"}, headers=alice), 400,
         "invalid_text", "prompt"),
        (client.post(f"/v1/videos/{mine}/remix", data="{", content_type="application/json", headers=alice),
         400, "invalid_json", None),
        (client.post(f"/v1/videos/{mine}/remix", data="[1]", content_type="application/json", headers=alice),
         400, "invalid_json", None),
        (client.post(f"/v1/videos/{mine}/remix", data="prompt", content_type="text/plain", headers=alice),
         415, "unsupported_media_type", None),
        (client.post(f"/v1/videos/{mine}/remix", data={"prompt": ["a", "b"]}, content_type="multipart/form-data",
                     headers=alice), 400, "invalid_parameters", "prompt"),
    ]  # fmt: skip
    before = len(client.get("/v1/videos?limit=100", headers=alice).get_json()["data"])
    for response, status, code, param in cases:
        assert_v1_refusal(response, status, code, param)
    assert len(client.get("/v1/videos?limit=100", headers=alice).get_json()["data"]) == before


def test_a_failed_video_may_be_remixed(hostile: tuple[FlaskClient, Services]) -> None:
    client, services = hostile
    failed = make_video(client, "")
    run_then_fail(services, failed)
    remix = client.post(f"/v1/videos/{failed}/remix", json={"prompt": "try again"})
    assert remix.status_code == 200, remix.get_data(as_text=True)
    assert remix.get_json()["remixed_from_video_id"] == failed and remix.get_json()["status"] == "queued"


AUTH_CASES = {
    "no header": None,
    "Bearer without a key": "Bearer",
    "Bearer and spaces": "Bearer    ",
    "Basic credentials": "Basic YWxpY2U6c2VjcmV0",
    "a Token scheme": "Token {alice}",
    "a key with a byte more": "Bearer {alice}x",
    "a key of non-ASCII": "Bearer " + "\u00e9" * 10,
    "a key of 20 KB": "Bearer " + "a" * 20_000,
    "three words": "Bearer a b c",
}


@pytest.mark.parametrize("name", list(AUTH_CASES))
def test_a_malformed_authorization_is_a_401(
    keyed_client: tuple[FlaskClient, dict[str, str]], name: str
) -> None:
    client, keys = keyed_client
    raw = AUTH_CASES[name]
    headers = {} if raw is None else {"Authorization": raw.format(alice=keys["alice"])}
    for response in (
        client.get("/v1/videos", headers=headers),
        client.post("/v1/videos", json=T2V, headers=headers),
    ):
        assert_v1_refusal(response, 401, "unauthorized", None)
    assert client.get("/v1/videos", headers=bearer(keys["alice"])).get_json()["data"] == []
