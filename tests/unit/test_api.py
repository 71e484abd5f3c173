"""The HTTP API on happy paths and bad input: every refusal is a 4xx with a code, nothing is left behind."""

from __future__ import annotations

import io
import json
import struct
import uuid
import zlib
from pathlib import Path
from typing import Any

import pytest
import redis
from PIL import Image

from jobservice.broker import BrokerInspector, group_queue
from jobservice.db.tables import FleetGroup, Job, JobStatus
from jobservice.jobs.queries import get_job
from tests.factories import online_group

pytestmark = pytest.mark.integration


def png_bytes(width: int = 256, height: int = 320, color: tuple[int, int, int] = (200, 150, 120)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


def a2v_form(image: bytes | None, audio: bytes | None, **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"task": "audio2video", **{k: str(v) for k, v in fields.items()}}
    if image is not None:
        data["image"] = (io.BytesIO(image), "face.png")
    if audio is not None:
        data["audio"] = (io.BytesIO(audio), "speech.wav")
    return data


def post_form(client: Any, form: dict[str, Any]) -> Any:
    """POST multipart without the test client's temp file (which Werkzeug never closes above 500 KB)."""
    from werkzeug.datastructures import FileStorage, MultiDict
    from werkzeug.test import encode_multipart

    values: MultiDict[str, Any] = MultiDict()
    for key, value in form.items():
        if isinstance(value, tuple):
            stream, name = value
            values.add(key, FileStorage(stream=stream, filename=name, name=key))
        else:
            values.add(key, value)
    boundary, body = encode_multipart(values)
    return client.post("/jobs", data=body, content_type=f"multipart/form-data; boundary={boundary}")


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and len(body["error"]["message"]) > 10
    return body


def job_count(services: Any) -> int:
    with services.db.session() as s:
        return s.query(Job).count()


def stored_keys(services: Any) -> list[str]:
    return [o.key for o in services.store.list("jobs/")]


# --- text2video -------------------------------------------------------------------------------
def test_text2video_is_accepted_queued_and_sent(client: Any, services: Any) -> None:
    """With a free card group that may serve the model, the submission wakes a worker's dispatcher,
    which hands the job to it and sends its message to the group's own queue."""
    from workers.dispatcher import Dispatcher

    online_group(services.db, "cpu@test-host", ["reference-t2v"])
    response = client.post(
        "/jobs", json={"task": "text2video", "prompt": "a red kite over the sea", "num_frames": 17}
    )
    assert response.status_code == 202
    body = response.get_json()
    assert response.headers["Location"] == f"/jobs/{body['id']}"
    assert body["status"] == "queued" and body["stage"] == "queued" and body["progress"] == 0
    assert body["queue_position"] is None  # no forecast yet, and not handed out yet
    assert body["model"] == "reference-t2v"
    params = body["params"]
    assert params["num_frames"] == 17 and params["width"] == 512 and params["guidance_scale"] == 5.0
    assert isinstance(params["seed"], int), "a seed is chosen and recorded when absent"
    dispatcher = Dispatcher(services)  # what a worker's main process runs when the bell rings
    assert dispatcher.run_once(wait_seconds=1.0), "the submission rang the dispatcher's bell"
    inspector = BrokerInspector(services.settings.broker_url)
    assert body["id"] in inspector.pending_job_ids({group_queue("cpu@test-host")})
    with services.db.session() as s:
        job = s.get(Job, uuid.UUID(body["id"]))
        group = s.get(FleetGroup, "cpu@test-host")
    assert job is not None and job.dispatched_to == "cpu@test-host" and job.enqueued_at is not None
    assert group is not None and group.next_job_id == job.id  # the group is busy with it now
    assert client.get(f"/jobs/{body['id']}").get_json()["queue_position"] == 0  # next on its group
    other = client.post("/jobs", json={"task": "text2video", "prompt": "a second kite"}).get_json()
    assert not dispatcher.run_once(wait_seconds=0.2), "the group is busy: nothing to wake for"
    dispatcher.bell.close()
    assert other["id"] not in inspector.pending_job_ids({group_queue("cpu@test-host")}), "one at a time"

    shown = client.get(f"/jobs/{body['id']}").get_json()
    assert shown["id"] == body["id"] and shown["status"] == "queued"
    assert client.get(f"/jobs/{body['id']}").headers["X-Poll-After-Ms"] == "1000"


def test_a_jobs_position_is_the_dispatchers_order(client: Any, services: Any) -> None:
    """Positions come from the forecast's order (the one the ETAs come from): the job handed to the
    group starts first (0), interactive jobs before a batch's, a job submitted after the forecast gets
    its tenant's what-if place plus its own jobs since, and GET shows what the answer showed."""
    from sqlalchemy import update

    from jobservice.db.tables import Job as JobRow
    from jobservice.fleet.eta import refresh
    from workers.dispatcher import Dispatcher

    online_group(services.db, "cpu@test-host", ["reference-t2v"])

    def submit() -> dict[str, Any]:
        response = client.post("/jobs", json={"model": "reference-t2v", "prompt": "x"})
        assert response.status_code == 202, response.get_json()
        return dict(response.get_json())

    first = submit()
    assert Dispatcher(services).run_once(wait_seconds=1.0)  # a worker's dispatcher hands it out
    batch_like = submit()
    with services.db.session() as s:  # as a batch's job: queued at a lower priority
        s.execute(update(JobRow).where(JobRow.id == uuid.UUID(batch_like["id"])).values(priority=6))
    answers = [submit(), submit()]
    assert refresh(services.db, services.catalog, services.settings, force=True)
    services.caches.forecast.drop(None)  # this process replaced the forecast
    shown = {
        a["id"]: client.get(f"/jobs/{a['id']}").get_json()["queue_position"]
        for a in [first, batch_like, *answers]
    }
    # The handed job starts first (0), then the interactive ones, then the batch's.
    assert shown == {first["id"]: 0, answers[0]["id"]: 1, answers[1]["id"]: 2, batch_like["id"]: 3}
    late = [submit(), submit()]  # after the forecast: its what-if place, then one more each
    assert [a["queue_position"] for a in late] == [3, 4]
    for answer in late:
        assert client.get(f"/jobs/{answer['id']}").get_json()["queue_position"] == answer["queue_position"]
    assert all(a["eta_basis"] != "unknown" for a in late)
    assert late[0]["fair_share"]["text"] == "1 team queued; you get 1 of 1 cards"


def test_model_can_be_inferred_and_task_checked(client: Any) -> None:
    assert client.post("/jobs", json={"model": "reference-t2v", "prompt": "x"}).status_code == 202
    assert_error(
        client.post("/jobs", json={"task": "audio2video", "model": "reference-t2v", "prompt": "x"}),
        422,
        "model_task_mismatch",
    )
    assert_error(
        client.post("/jobs", json={"task": "text2video", "model": "nope", "prompt": "x"}),
        404,
        "unknown_model",
    )
    assert_error(client.post("/jobs", json={"task": "dance", "prompt": "x"}), 422, "invalid_task")
    assert_error(client.post("/jobs", json={"prompt": "x"}), 422, "missing_task")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prompt": ""}, "prompt"),
        ({}, "prompt"),
        ({"prompt": "x", "width": 500}, "width"),
        ({"prompt": "x", "width": 4096}, "width"),
        ({"prompt": "x", "num_frames": 10_000}, "num_frames"),
        ({"prompt": "x", "num_inference_steps": 0}, "num_inference_steps"),
        ({"prompt": "x", "guidance_scale": "lots"}, "guidance_scale"),
        ({"prompt": "x", "seed": -1}, "seed"),
        ({"prompt": "x", "colour": "blue"}, "colour"),
        ({"prompt": "x", "width": 1280, "height": 1280}, "(body)"),
    ],
)
def test_text2video_parameters_are_checked(
    client: Any, services: Any, body: dict[str, Any], field: str
) -> None:
    result = assert_error(
        client.post("/jobs", json={"task": "text2video", **body}), 422, "invalid_parameters"
    )
    assert field in [d["field"] for d in result["error"]["details"]]
    assert job_count(services) == 0


def test_malformed_requests(client: Any, services: Any) -> None:
    assert_error(client.post("/jobs", data="{not json", content_type="application/json"), 400, "invalid_json")
    assert_error(client.post("/jobs", data="[1, 2]", content_type="application/json"), 400, "invalid_json")
    assert_error(
        client.post("/jobs", data="prompt", content_type="text/plain"), 415, "unsupported_media_type"
    )
    assert_error(client.get("/jobs/not-a-uuid"), 404, "job_not_found")
    assert_error(client.get("/jobs/00000000-0000-0000-0000-000000000000"), 404, "job_not_found")
    assert_error(client.delete("/jobs"), 405, "method_not_allowed")
    assert_error(client.get("/nowhere"), 404, "not_found")
    assert_error(
        client.post("/jobs", json={"task": "text2video", "prompt": "x"}, headers={"Idempotency-Key": " "}),
        400,
        "invalid_idempotency_key",
    )
    assert job_count(services) == 0


# --- audio2video ------------------------------------------------------------------------------
def test_audio2video_upload_is_checked_and_stored(
    client: Any, services: Any, portrait: Path, speech: Path
) -> None:
    response = client.post(
        "/jobs",
        data=a2v_form(portrait.read_bytes(), speech.read_bytes(), seed=7, fps="25"),
        content_type="multipart/form-data",
    )
    assert response.status_code == 202, response.get_data(as_text=True)
    body = response.get_json()
    assert body["model"] == "reference-talking-head" and body["params"]["seed"] == 7
    assert body["inputs"]["image"]["format"] == "PNG" and body["inputs"]["audio"]["duration_s"] > 1
    keys = stored_keys(services)
    assert sorted(keys) == sorted(
        [f"jobs/{body['id']}/inputs/image.png", f"jobs/{body['id']}/inputs/audio.wav"]
    )
    assert services.store.get_bytes(f"jobs/{body['id']}/inputs/image.png") == portrait.read_bytes()
    spool = services.settings.resolved_spool_dir()
    assert list(spool.iterdir()) == [], "spool files are removed after the request"


def test_audio2video_accepts_mp3(client: Any, portrait: Path, short_speech: Path) -> None:
    response = post_form(client, a2v_form(portrait.read_bytes(), short_speech.read_bytes()))
    assert response.status_code == 202
    assert response.get_json()["inputs"]["audio"]["format"] == "mp3"


def _tiny_wav(seconds: float) -> bytes:
    rate = 16000
    frames = b"\x00\x00" * int(rate * seconds)
    header = (
        b"RIFF"
        + struct.pack("<I", 36 + len(frames))
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    )
    return header + b"data" + struct.pack("<I", len(frames)) + frames


def _bomb_png(width: int, height: int) -> bytes:
    # A valid PNG header declaring a huge canvas, with a tiny (wrong) body: must be refused before decode.
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize(
    ("image", "audio", "status", "code"),
    [
        (None, "speech", 422, "missing_input"),
        ("png", None, 422, "missing_input"),
        (b"not an image at all", "speech", 422, "invalid_image"),
        ("gif", "speech", 415, "unsupported_image_type"),
        ("bomb", "speech", 422, "image_too_large"),
        ("tiny", "speech", 422, "image_too_small"),
        ("truncated", "speech", 422, "invalid_image"),
        ("png", b"RIFF....WAVEnot really", 422, "invalid_audio"),
        ("png", "png", 422, "invalid_audio"),
        ("png", "short", 422, "audio_too_short"),
        ("png", "long", 422, "audio_too_long"),
        ("png", b"", 422, "invalid_audio"),
    ],
)
def test_bad_uploads_are_refused_and_leave_nothing(
    client: Any,
    services: Any,
    portrait: Path,
    speech: Path,
    image: str | bytes | None,
    audio: str | bytes | None,
    status: int,
    code: str,
) -> None:
    pngs = {"png": portrait.read_bytes(), "tiny": png_bytes(20, 20), "bomb": _bomb_png(30000, 30000)}
    gif = io.BytesIO()
    Image.new("RGB", (100, 100)).save(gif, format="GIF")
    pngs["gif"] = gif.getvalue()
    pngs["truncated"] = portrait.read_bytes()[: len(portrait.read_bytes()) // 2]
    audios = {
        "speech": speech.read_bytes(),
        "png": portrait.read_bytes(),
        "short": _tiny_wav(0.2),
        "long": _tiny_wav(301),
    }
    # A name must be one of the samples above (a typo raises here, not as a confusing upload).
    image_bytes = pngs[image] if isinstance(image, str) else image
    audio_bytes = audios[audio] if isinstance(audio, str) else audio
    response = post_form(client, a2v_form(image_bytes, audio_bytes))
    assert_error(response, status, code)
    assert job_count(services) == 0
    assert stored_keys(services) == []
    assert list(services.settings.resolved_spool_dir().iterdir()) == []


def test_oversized_upload_is_refused_while_streaming(
    tmp_path: Path, clean_redis: str, portrait: Path
) -> None:
    from jobservice.db.migrate import upgrade
    from jobservice.http.app import create_app
    from tests.conftest import make_settings

    settings = make_settings(tmp_path / "var", broker_url=clean_redis, max_request_mb=2, max_image_mb=1)
    upgrade(settings.resolved_database_url())
    client = create_app(settings).test_client()
    big = b"\x00" * (3 * 2**20)
    response = post_form(client, a2v_form(big, big))
    assert_error(response, 413, "payload_too_large")
    too_big_image = png_bytes() + b"\x00" * (2**20)
    response = post_form(client, a2v_form(too_big_image, b"x"))
    assert_error(response, 413, "file_too_large")
    assert list(settings.resolved_spool_dir().iterdir()) == []


def test_form_fields_are_validated_like_json(client: Any, portrait: Path, speech: Path) -> None:
    response = post_form(client, a2v_form(portrait.read_bytes(), speech.read_bytes(), max_size="100"))
    body = assert_error(response, 422, "invalid_parameters")
    assert body["error"]["details"][0]["field"] == "max_size"


# --- listing, cancel, idempotency ------------------------------------------------------------------
def test_list_filters_and_paginates(client: Any) -> None:
    ids = [
        client.post("/jobs", json={"task": "text2video", "prompt": f"p{i}"}).get_json()["id"]
        for i in range(5)
    ]
    client.post(f"/jobs/{ids[0]}/cancel")
    page1 = client.get("/jobs?limit=2").get_json()
    assert [j["id"] for j in page1["jobs"]] == ids[::-1][:2]
    page2 = client.get(f"/jobs?limit=2&cursor={page1['next_cursor']}").get_json()
    page3 = client.get(f"/jobs?limit=2&cursor={page2['next_cursor']}").get_json()
    assert [j["id"] for j in page2["jobs"] + page3["jobs"]] == ids[::-1][2:]
    assert page3["next_cursor"] is None
    canceled = client.get("/jobs?status=canceled").get_json()["jobs"]
    assert [j["id"] for j in canceled] == [ids[0]]
    queued = client.get("/jobs?status=queued&model=reference-t2v").get_json()["jobs"]
    assert len(queued) == 4 and all(j["queue_position"] is None for j in queued)  # no group may run it
    assert client.get("/jobs?model=reference-talking-head").get_json()["jobs"] == []
    assert_error(client.get("/jobs?status=done"), 422, "invalid_status")
    assert_error(client.get("/jobs?limit=0"), 422, "invalid_limit")
    assert_error(client.get("/jobs?cursor=%%%"), 400, "invalid_cursor")


def test_cancel_queued_then_finished_conflict(client: Any, services: Any) -> None:
    job_id = client.post("/jobs", json={"task": "text2video", "prompt": "x"}).get_json()["id"]
    response = client.post(f"/jobs/{job_id}/cancel")
    assert response.status_code == 202 and response.get_json()["status"] == "canceled"
    assert_error(client.post(f"/jobs/{job_id}/cancel"), 409, "job_finished")
    events = client.get(f"/jobs/{job_id}/events").get_json()["events"]
    assert [(e["from"], e["to"]) for e in events] == [(None, "queued"), ("queued", "canceled")]
    assert_error(client.get(f"/jobs/{job_id}/video"), 404, "video_not_ready")
    assert_error(client.get(f"/jobs/{job_id}/report"), 404, "report_not_ready")


def test_idempotency_key_replays_and_conflicts(client: Any, services: Any) -> None:
    headers = {"Idempotency-Key": "nightly-42"}
    first = client.post("/jobs", json={"task": "text2video", "prompt": "same"}, headers=headers)
    again = client.post("/jobs", json={"task": "text2video", "prompt": "same"}, headers=headers)
    assert first.status_code == 202 and again.status_code == 200
    assert again.get_json()["id"] == first.get_json()["id"] and again.headers["Idempotent-Replayed"] == "true"
    assert_error(
        client.post("/jobs", json={"task": "text2video", "prompt": "other"}, headers=headers),
        409,
        "idempotency_conflict",
    )
    assert job_count(services) == 1


def test_broker_down_still_accepts_and_remembers_to_send(tmp_path: Path, clean_redis: str) -> None:
    from jobservice.db.migrate import upgrade
    from jobservice.http.app import create_app
    from jobservice.wiring import build_services
    from tests.conftest import make_settings

    settings = make_settings(
        tmp_path / "var", broker_url="redis://127.0.0.1:1/0", publish_timeout_seconds=0.3
    )
    upgrade(settings.resolved_database_url())
    services = build_services(settings)
    client = create_app(services=services).test_client()
    response = client.post("/jobs", json={"task": "text2video", "prompt": "x"})
    assert response.status_code == 202
    with services.db.session() as s:
        job = get_job(s, __import__("uuid").UUID(response.get_json()["id"]))
        assert job is not None and job.status == JobStatus.QUEUED and job.enqueued_at is None
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.get_json()["checks"]["broker"]["ok"] is False


# --- catalog and health ----------------------------------------------------------------------------
def test_models_health_ready_openapi(client: Any) -> None:
    models = client.get("/models").get_json()["models"]
    by_id = {m["id"]: m for m in models}
    assert set(by_id) == {"reference-t2v", "reference-talking-head"}
    t2v = by_id["reference-t2v"]
    assert t2v["maturity"] == "reference" and t2v["online"] is False
    assert t2v["parameters"]["properties"]["width"]["multipleOf"] == 16
    assert t2v["parameters"]["properties"]["num_frames"]["maximum"] == 241
    assert client.get("/healthz").get_json() == {"ok": True}
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.get_json()
    assert all(check["ok"] for check in ready.get_json()["checks"].values())
    assert ready.get_json()["version"] == __import__("jobservice").__version__
    spec = client.get("/openapi.json").get_json()
    assert spec["openapi"].startswith("3.1")
    for path in [
        "/jobs",
        "/jobs/{job_id}",
        "/jobs/{job_id}/cancel",
        "/jobs/{job_id}/video",
        "/jobs/{job_id}/report",
        "/models",
        "/healthz",
        "/readyz",
    ]:
        assert path in spec["paths"]
    assert (
        "RunReport" in spec["components"]["schemas"] and "ReferenceT2VParams" in spec["components"]["schemas"]
    )
    json.dumps(spec)


def test_api_process_never_imports_torch(tmp_path: Path, clean_redis: str) -> None:
    import subprocess
    import sys

    code = (
        "import sys, io\n"
        "from jobservice.http.app import create_app\n"
        "from jobservice.db.migrate import upgrade\n"
        "from tests.conftest import make_settings\n"
        f"s = make_settings(__import__('pathlib').Path({str(tmp_path)!r}), broker_url={clean_redis!r})\n"
        "upgrade(s.resolved_database_url())\n"
        "c = create_app(s).test_client()\n"
        "assert c.post('/jobs', json={'task': 'text2video', 'prompt': 'x'}).status_code == 202\n"
        "c.get('/models'); c.get('/openapi.json'); c.get('/readyz')\n"
        "print('torch' in sys.modules, 'numpy' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
        check=True,
    )
    assert out.stdout.split()[0] == "False", "the API imported torch"
    redis.Redis.from_url(clean_redis).flushdb()


def test_cross_site_posts_are_refused_but_same_site_and_non_browsers_pass(client: Any, services: Any) -> None:
    body = {"task": "text2video", "prompt": "x"}
    assert_error(
        client.post("/jobs", json=body, headers={"Origin": "https://evil.example"}), 403, "cross_site_request"
    )
    assert_error(
        client.post("/jobs", data=body, headers={"Sec-Fetch-Site": "cross-site"}), 403, "cross_site_request"
    )
    assert_error(client.post("/jobs", json=body, headers={"Origin": "null"}), 403, "cross_site_request")
    assert job_count(services) == 0
    assert client.post("/jobs", json=body, headers={"Origin": "http://localhost"}).status_code == 202
    assert client.post("/jobs", json=body, headers={"Sec-Fetch-Site": "same-origin"}).status_code == 202
    assert client.post("/jobs", json=body).status_code == 202  # curl, SDKs, the CLI
    assert client.get("/jobs", headers={"Origin": "https://evil.example"}).status_code == 200


def test_odd_json_types_and_limits_are_4xx(client: Any) -> None:
    assert_error(client.post("/jobs", json={"task": ["text2video"], "prompt": "x"}), 422, "invalid_task")
    assert_error(
        client.post("/jobs", json={"task": "text2video", "model": {}, "prompt": "x"}), 422, "invalid_model"
    )
    assert_error(client.get("/jobs?limit=²"), 422, "invalid_limit")


def test_api_idempotency_keys_cannot_collide_with_batch_slots(client: Any, services: Any) -> None:
    response = client.post(
        "/jobs", json={"task": "text2video", "prompt": "x"}, headers={"Idempotency-Key": "batch:1:case:0"}
    )
    assert response.status_code == 202
    with services.db.session() as s:
        assert s.query(Job).one().idempotency_key == "api:batch:1:case:0"
