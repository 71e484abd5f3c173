"""What ``/v1/videos`` answers, read by the official ``openai`` package's own pydantic models: a video
in every state (strictly, no coercion), a talking head, a remix, the list page and a deletion."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

from flask.testing import FlaskClient
from openai.pagination import SyncConversationCursorPage
from openai.types import Video, VideoDeleteResponse

from jobservice.jobs.transitions import claim_job
from jobservice.wiring import Services
from tests.openai.conftest import finish
from tests.openai.hostile_v1 import PORTRAIT_MODEL, make_video, post_multipart, run_then_fail, sdk_video


def test_every_state_parses_as_the_sdks_video_and_the_list_as_its_page(
    hostile: tuple[FlaskClient, Services], tiny_video: Path
) -> None:
    client, services = hostile
    queued, running, done, failed, canceled = (make_video(client, "") for _ in range(5))
    with services.db.session() as session:
        assert claim_job(session, uuid.UUID(running), worker_id="w@h8", lease_seconds=30) is not None
    finish(services, done, tiny_video)
    run_then_fail(services, failed)
    assert client.post(f"/jobs/{canceled}/cancel").status_code == 202  # canceled, not deleted: still listed
    want = {queued: ("queued", None), running: ("in_progress", None), done: ("completed", None),
            failed: ("failed", "oom"), canceled: ("failed", "canceled")}  # fmt: skip
    for video_id, (status, code) in want.items():
        video = sdk_video(client.get(f"/v1/videos/{video_id}").get_json())
        assert video.status == status and (video.error.code if video.error else None) == code
        assert (video.completed_at is not None) == (status in ("completed", "failed"))
        assert video.progress == (100 if status == "completed" else 0)
    body = client.get("/v1/videos?limit=3&order=asc").get_json()
    page = SyncConversationCursorPage[Video].model_validate(
        {**body, "data": [{**v, "size": "1280x720"} for v in body["data"]]}
    )
    assert [v.id for v in page.data] == [queued, running, done] and page.has_more is True
    assert page.last_id == done and body["first_id"] == queued and body["object"] == "list"
    rest = client.get(f"/v1/videos?limit=3&order=asc&after={page.last_id}").get_json()
    assert [v["id"] for v in rest["data"]] == [failed, canceled] and rest["has_more"] is False
    deleted = VideoDeleteResponse.model_validate(client.delete(f"/v1/videos/{done}").get_json())
    assert deleted.deleted is True and deleted.id == done and deleted.object == "video.deleted"


def test_a_talking_head_and_a_remix_parse_as_the_sdks_video(
    hostile: tuple[FlaskClient, Services], portrait: Path, short_speech: Path
) -> None:
    client, _ = hostile
    form = {
        **PORTRAIT_MODEL,
        "input_reference": (io.BytesIO(portrait.read_bytes()), "face.png"),
        "audio": (io.BytesIO(short_speech.read_bytes()), "s.mp3"),
    }
    talking = sdk_video(post_multipart(client, "/v1/videos", form).get_json())
    assert talking.prompt is None and talking.seconds == "2" and talking.model == "reference-talking-head"
    source = make_video(client, "")
    remix = sdk_video(client.post(f"/v1/videos/{source}/remix", json={"prompt": "again"}).get_json())
    assert remix.remixed_from_video_id == source and remix.prompt == "again" and remix.status == "queued"
