"""``/v1/videos`` through the Flask test client: the same jobs as /jobs, OpenAI's shapes, honest 4xx."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

from PIL import Image

from jobservice.db.tables import JobStatus
from jobservice.jobs.queries import events_of, get_job
from jobservice.jobs.transitions import claim_job
from tests.conftest import ffmpeg
from tests.openai.conftest import bearer, data_url, finish, post_multipart

T2V = {"model": "reference-t2v", "prompt": "a red kite", "size": "128x96", "seconds": "1"}


def openai_error(response: Any, status: int, code: str, param: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["code"] == code and error["param"] == param and len(error["message"]) > 10
    assert error["type"] == ("authentication_error" if status == 401 else "invalid_request_error")
    return error


def job_of(services: Any, video_id: str) -> Any:
    with services.db.session() as session:
        return get_job(session, uuid.UUID(video_id))


def test_a_video_is_a_queued_job_of_the_jobs_system(client: Any, services: Any) -> None:
    created = client.post("/v1/videos", json={**T2V, "num_inference_steps": 2, "seed": 5})
    assert created.status_code == 200, created.get_data(as_text=True)
    assert created.headers["openai-poll-after-ms"] == "1000"
    video = created.get_json()
    assert video["object"] == "video" and video["status"] == "queued" and video["progress"] == 0
    assert video["size"] == "128x96" and video["seconds"] == "1" and video["prompt"] == "a red kite"
    job = job_of(services, video["id"])
    assert job.source == "openai" and job.status == JobStatus.QUEUED
    assert job.dispatched_to is None, "no card group is online: it waits in the table"
    assert job.params["width"] == 128 and job.params["num_frames"] == 16 and job.params["seed"] == 5
    same = client.get(f"/jobs/{video['id']}").get_json()  # one system: the id works on /jobs too
    assert same["model"] == "reference-t2v" and same["status"] == "queued"
    again = client.get(f"/v1/videos/{video['id']}")
    assert again.get_json() == video and again.headers["openai-poll-after-ms"] == "1000"


def test_refusals_are_openai_errors_with_honest_statuses(client: Any, services: Any) -> None:
    openai_error(client.post("/v1/videos", json={**T2V, "model": "sora-2"}), 404, "model_not_found", "model")
    size = openai_error(
        client.post("/v1/videos", json={**T2V, "size": "4096x4096"}), 400, "invalid_size", "size"
    )
    assert "from 64 to 1280" in size["message"]
    openai_error(client.post("/v1/videos", json={**T2V, "seconds": "99"}), 400, "invalid_seconds", "seconds")
    openai_error(
        client.post("/v1/videos", json={**T2V, "flow_shift": 3}), 400, "invalid_parameters", "flow_shift"
    )
    openai_error(client.post("/v1/videos", json={**T2V, "prompt": ""}), 400, "invalid_parameters", "prompt")
    bad_json = client.post("/v1/videos", data=b"{", content_type="application/json")
    openai_error(bad_json, 400, "invalid_json")
    openai_error(
        client.post("/v1/videos", data=b"x", content_type="text/plain"), 415, "unsupported_media_type"
    )
    nobody = str(uuid.uuid4())
    openai_error(client.get(f"/v1/videos/{nobody}"), 404, "video_not_found", "video_id")
    openai_error(client.get("/v1/videos/not-a-uuid"), 404, "video_not_found", "video_id")
    openai_error(client.get("/v1/videos?limit=0"), 400, "invalid_limit", "limit")
    openai_error(client.get("/v1/videos?order=up"), 400, "invalid_order", "order")
    openai_error(client.get(f"/v1/videos?after={nobody}"), 400, "invalid_after", "after")
    video_id = client.post("/v1/videos", json=T2V).get_json()["id"]
    content = client.get(f"/v1/videos/{video_id}/content?variant=spritesheet")
    openai_error(content, 400, "invalid_variant", "variant")
    openai_error(client.get(f"/v1/videos/{video_id}/content"), 404, "video_not_ready")
    assert [o.key for o in services.store.list("jobs/")] == []  # a text2video job stores nothing


def test_audio2video_takes_the_portrait_and_speech_as_parts_or_data_urls(
    client: Any, services: Any, portrait: Path, short_speech: Path
) -> None:
    form = {
        "model": "reference-talking-head",
        "prompt": "the SDK always sends a prompt",
        "fps": "12",
        "input_reference": (io.BytesIO(portrait.read_bytes()), "face.png"),
        "audio": (io.BytesIO(short_speech.read_bytes()), "speech.mp3"),
    }
    parts = client.post("/v1/videos", data=form, content_type="multipart/form-data")
    assert parts.status_code == 200, parts.get_data(as_text=True)
    video = parts.get_json()
    job = job_of(services, video["id"])
    assert set(job.input_keys) == {"image", "audio"} and job.params["fps"] == 12
    assert video["prompt"] is None and float(video["seconds"]) == job.input_meta["audio"]["duration_s"]
    assert video["size"].count("x") == 1
    fields = {
        "model": "reference-talking-head",
        "prompt": "p",
        "input_reference": (io.BytesIO(portrait.read_bytes()), "face.png"),
        "audio": data_url(short_speech, "audio/mpeg"),  # as the SDK's extra_body sends it
    }
    as_field = client.post("/v1/videos", data=fields, content_type="multipart/form-data")
    assert as_field.status_code == 200, as_field.get_data(as_text=True)
    stored = job_of(services, as_field.get_json()["id"])
    assert stored.input_meta["audio"]["sha256"] == job.input_meta["audio"]["sha256"]
    json_body = {
        "model": "reference-talking-head",
        "prompt": "p",
        "input_reference": {"image_url": data_url(portrait, "image/png")},
    }
    no_audio = client.post("/v1/videos", json=json_body)
    assert "audio" in openai_error(no_audio, 400, "missing_input", "audio")["message"]
    garbage = client.post("/v1/videos", json={**json_body, "audio": data_url(portrait, "audio/wav")})
    assert garbage.status_code in (400, 415) and garbage.get_json()["error"]["param"] == "audio"
    remote = client.post("/v1/videos", json={**json_body, "audio": "https://example.com/a.wav"})
    openai_error(remote, 400, "unsupported_reference", "audio")
    image_for_t2v = client.post(
        "/v1/videos",
        data={**T2V, "input_reference": (io.BytesIO(portrait.read_bytes()), "face.png")},
        content_type="multipart/form-data",
    )
    openai_error(image_for_t2v, 400, "unexpected_input", "input_reference")


def test_an_idempotency_key_replays_the_same_video(client: Any) -> None:
    first = client.post("/v1/videos", json=T2V, headers={"Idempotency-Key": "k-1"})
    replay = client.post("/v1/videos", json=T2V, headers={"Idempotency-Key": "k-1"})
    assert replay.get_json()["id"] == first.get_json()["id"]
    assert replay.headers["Idempotent-Replayed"] == "true"
    other = client.post("/v1/videos", json={**T2V, "prompt": "a boat"}, headers={"Idempotency-Key": "k-1"})
    openai_error(other, 409, "idempotency_conflict")


def test_the_list_pages_with_after_limit_and_order(client: Any) -> None:
    ids = [client.post("/v1/videos", json={**T2V, "prompt": f"kite {i}"}).get_json()["id"] for i in range(3)]
    page = client.get("/v1/videos?limit=2").get_json()
    assert page["object"] == "list" and page["has_more"] is True
    assert [v["id"] for v in page["data"]] == ids[::-1][:2]
    assert page["first_id"] == ids[2] and page["last_id"] == ids[1]
    rest = client.get(f"/v1/videos?limit=2&after={page['last_id']}").get_json()
    assert [v["id"] for v in rest["data"]] == [ids[0]] and rest["has_more"] is False
    oldest_first = client.get("/v1/videos?order=asc").get_json()
    assert [v["id"] for v in oldest_first["data"]] == ids
    empty = client.get(f"/v1/videos?order=asc&after={ids[2]}").get_json()
    assert empty == {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False}


def test_delete_cancels_then_deletes_the_files_and_the_video_is_gone(
    client: Any, services: Any, tiny_video: Path
) -> None:
    """As with OpenAI's API, a deleted video is gone from /v1/videos (retrieve, list, content and a
    second delete answer 404); it is the native DELETE /jobs/<id>, so the job is gone there too."""
    queued = client.post("/v1/videos", json=T2V).get_json()["id"]
    deleted = client.delete(f"/v1/videos/{queued}")
    assert deleted.get_json() == {"id": queued, "object": "video.deleted", "deleted": True}
    job = job_of(services, queued)
    assert job.status == JobStatus.CANCELED and job.expired_at is not None
    openai_error(client.get(f"/v1/videos/{queued}"), 404, "video_not_found", "video_id")

    done = client.post("/v1/videos", json=T2V).get_json()["id"]
    kept = client.post("/v1/videos", json=T2V).get_json()["id"]
    finish(services, done, tiny_video)
    assert client.delete(f"/v1/videos/{done}").get_json()["deleted"] is True
    assert list(services.store.list(f"jobs/{done}/")) == []
    openai_error(client.get(f"/v1/videos/{done}/content"), 404, "video_not_found", "video_id")
    openai_error(client.get(f"/v1/videos/{done}"), 404, "video_not_found", "video_id")
    openai_error(client.delete(f"/v1/videos/{done}"), 404, "video_not_found", "video_id")
    assert [v["id"] for v in client.get("/v1/videos").get_json()["data"]] == [kept]
    gone = client.get(f"/jobs/{done}")
    assert gone.status_code == 404 and gone.get_json()["error"]["code"] == "job_deleted"
    with services.db.session() as session:
        events = [e.detail for e in events_of(session, uuid.UUID(done))]
    assert events.count("deleted on request") == 1 and job_of(services, done).deleted_at is not None

    running = client.post("/v1/videos", json=T2V).get_json()["id"]
    with services.db.session() as session:
        claim_job(session, uuid.UUID(running), worker_id="w1@test", lease_seconds=30)
    openai_error(client.delete(f"/v1/videos/{running}"), 409, "cancel_pending")
    assert job_of(services, running).cancel_requested_at is not None


def test_content_serves_the_mp4_and_a_cached_jpeg_thumbnail(
    client: Any, services: Any, tiny_video: Path
) -> None:
    video_id = client.post("/v1/videos", json=T2V).get_json()["id"]
    finish(services, video_id, tiny_video)
    completed = client.get(f"/v1/videos/{video_id}")
    assert completed.get_json()["status"] == "completed" and completed.get_json()["progress"] == 100
    assert "openai-poll-after-ms" not in completed.headers
    with client.get(f"/v1/videos/{video_id}/content") as mp4:
        assert mp4.status_code == 200 and mp4.mimetype == "video/mp4" and mp4.data == tiny_video.read_bytes()
    thumb = client.get(f"/v1/videos/{video_id}/content?variant=thumbnail")
    assert thumb.status_code == 200 and thumb.mimetype == "image/jpeg"
    image = Image.open(io.BytesIO(thumb.data))
    assert image.format == "JPEG" and image.size == (64, 48)
    assert services.store.get_bytes(f"jobs/{video_id}/thumbnail.jpg") == thumb.data  # kept beside the output
    assert client.get(f"/v1/videos/{video_id}/content?variant=thumbnail").data == thumb.data


def test_remix_is_a_new_video_with_the_same_inputs_and_a_new_prompt(
    client: Any, services: Any, portrait: Path, short_speech: Path
) -> None:
    source = client.post("/v1/videos", json={**T2V, "seed": 11}).get_json()["id"]
    remix = client.post(f"/v1/videos/{source}/remix", json={"prompt": "a blue kite"})
    assert remix.status_code == 200, remix.get_data(as_text=True)
    video = remix.get_json()
    assert video["id"] != source and video["remixed_from_video_id"] == source
    assert video["prompt"] == "a blue kite" and video["size"] == "128x96"
    job = job_of(services, video["id"])
    assert job.params["seed"] == 11 and job.params["num_frames"] == 16
    assert client.get(f"/v1/videos/{video['id']}").get_json()["remixed_from_video_id"] == source
    listed = {v["id"]: v for v in client.get("/v1/videos").get_json()["data"]}
    assert (
        listed[video["id"]]["remixed_from_video_id"] == source
        and listed[source]["remixed_from_video_id"] is None
    )
    openai_error(client.post(f"/v1/videos/{source}/remix", json={}), 400, "missing_prompt", "prompt")
    form = {
        "model": "reference-talking-head",
        "prompt": "p",
        "input_reference": (io.BytesIO(portrait.read_bytes()), "face.png"),
        "audio": (io.BytesIO(short_speech.read_bytes()), "speech.mp3"),
    }
    talking = client.post("/v1/videos", data=form, content_type="multipart/form-data").get_json()["id"]
    refused = client.post(f"/v1/videos/{talking}/remix", json={"prompt": "smile"})
    openai_error(refused, 400, "remix_unsupported", "prompt")


def test_a_retried_remix_with_its_idempotency_key_makes_one_video_and_keeps_the_webhook(
    client: Any, services: Any
) -> None:
    body = {**T2V, "webhook": "https://hooks.example.com/v", "webhook_events_filter": "completed"}
    source = client.post("/v1/videos", json=body).get_json()["id"]
    headers = {"Idempotency-Key": "remix-1"}
    first = client.post(f"/v1/videos/{source}/remix", json={"prompt": "a blue kite"}, headers=headers)
    again = client.post(f"/v1/videos/{source}/remix", json={"prompt": "a blue kite"}, headers=headers)
    assert first.status_code == 200 and again.status_code == 200, again.get_data(as_text=True)
    assert first.get_json()["id"] == again.get_json()["id"]
    remixed = job_of(services, first.get_json()["id"])
    assert remixed.webhook_url == "https://hooks.example.com/v" and remixed.webhook_events == "completed"


def test_bearer_keys_and_tenants_apply_as_on_jobs(keyed_client: tuple[Any, dict[str, str]]) -> None:
    client, keys = keyed_client
    openai_error(client.get("/v1/videos"), 401, "unauthorized")
    mine = client.post("/v1/videos", json=T2V, headers=bearer(keys["alice"]))
    assert mine.status_code == 200, mine.get_data(as_text=True)
    video_id = mine.get_json()["id"]
    assert client.get(f"/jobs/{video_id}", headers=bearer(keys["alice"])).get_json()["tenant"] == "acme"
    openai_error(
        client.get(f"/v1/videos/{video_id}", headers=bearer(keys["bob"])), 404, "video_not_found", "video_id"
    )
    openai_error(
        client.delete(f"/v1/videos/{video_id}", headers=bearer(keys["bob"])),
        404,
        "video_not_found",
        "video_id",
    )
    assert client.get("/v1/videos", headers=bearer(keys["bob"])).get_json()["data"] == []
    assert [v["id"] for v in client.get("/v1/videos", headers=bearer(keys["alice"])).get_json()["data"]] == [
        video_id
    ]


def test_a_data_url_field_may_be_larger_than_the_apps_form_field_limit(
    client: Any, services: Any, portrait: Path, media_dir: Path
) -> None:
    speech = media_dir / "long-speech.wav"  # 40 s of 16 kHz mono: 1.3 MB, 1.7 MB as base64
    if not speech.exists():
        ffmpeg("-f", "lavfi", "-i", "sine=frequency=220:duration=40", "-ar", "16000", "-ac", "1", str(speech))
    form = {
        "model": "reference-talking-head",
        "prompt": "p",
        "input_reference": (io.BytesIO(portrait.read_bytes()), "face.png"),
        "audio": data_url(speech, "audio/wav"),
    }
    created = post_multipart(client, "/v1/videos", form)
    assert created.status_code == 200, created.get_data(as_text=True)
    assert created.get_json()["seconds"] == "40"
    too_big = {**form, "input_reference": "x" * (17 * 2**20)}
    openai_error(post_multipart(client, "/v1/videos", too_big), 413, "payload_too_large")


def test_webhook_fields_flow_through_to_the_job_as_on_jobs(client: Any, services: Any) -> None:
    hook = {"webhook": "https://example.com/hooks/videos", "webhook_events_filter": "completed"}
    as_json = client.post("/v1/videos", json={**T2V, **hook}).get_json()["id"]
    as_form = client.post("/v1/videos", data={**T2V, **hook}, content_type="multipart/form-data").get_json()[
        "id"
    ]
    for video_id in (as_json, as_form):
        job = job_of(services, video_id)
        assert job.webhook_url == hook["webhook"] and job.webhook_events == "completed"
        assert "webhook" not in job.params
    refused = client.post("/v1/videos", json={**T2V, "webhook": "http://169.254.169.254/latest"})
    assert refused.status_code == 400 and refused.get_json()["error"]["type"] == "invalid_request_error"


def test_odd_bodies_are_4xx_never_5xx(client: Any) -> None:
    odd: list[dict[str, Any]] = [
        {**T2V, "input_reference": 5},
        {**T2V, "input_reference": {"file_id": "file_1"}},
        {**T2V, "input_reference": {"image_url": None}},
        {**T2V, "audio": {"a": 1}},
        {**T2V, "audio": "data:audio/wav;base64,%%%"},
        {**T2V, "size": None, "seconds": 1e308},
        {**T2V, "size": ["64", "64"]},
        {**T2V, "model": 7},
        {**T2V, "prompt": ["a"]},
        {**T2V, "fps": "0"},
        {"prompt": "no model: the text2video default"},
    ]
    for body in odd:
        answer = client.post("/v1/videos", json=body)
        assert answer.status_code in (200, 400, 404, 415), (body, answer.get_data(as_text=True))
        if answer.status_code != 200:
            assert answer.get_json()["error"]["type"] == "invalid_request_error", body
    assert client.post("/v1/videos", json={"prompt": "default model"}).get_json()["model"] == "reference-t2v"
