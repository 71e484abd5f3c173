"""``/v1/videos`` with the official ``openai`` package and a vLLM-Omni-style multipart client, end to end:
the real app over HTTP (werkzeug's threaded server), API keys on, a real Celery worker process and the
reference models at tiny sizes. The SDK marks its video methods deprecated (Sora's shutdown notice);
that warning is not ours and is ignored here."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
import requests
from openai import OpenAI
from openai.types import Video
from PIL import Image

from jobservice.auth.keys import create_key
from jobservice.media.probe import probe_media
from tests.browser.server import serve
from tests.integration.conftest import Stack, build_stack
from tests.openai.conftest import bearer, data_url

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The Sora API is scheduled:DeprecationWarning"),
]

SERVED = ["reference-t2v", "reference-talking-head"]
# 8 frames of 64x64 at 8 fps, 2 denoising steps: a second of real generation on a CPU.
TINY: dict[str, Any] = {"fps": 8, "num_inference_steps": 2, "seed": 1}
# The SDK types size and seconds as Sora's values only; any "WxH" and number go through as strings.
SMALL: Any = "64x64"
ONE_SECOND: Any = "1"


@dataclass
class Served:
    """The stack, its base URL, an API key, and an SDK client using that key."""

    stack: Stack
    base: str
    key: str
    sdk: OpenAI


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A stack with keys on and one CPU worker for the reference models, served over HTTP."""
    stack = build_stack(tmp_path_factory.mktemp("openai"), auth="keys")
    stack.start_worker("openai", extra_env={"JOBSERVICE_WORKER_MODELS": json.dumps(SERVED)})
    with stack.services.db.session() as session:
        _, key = create_key(session, name="sdk", tenant="acme", role="user")
    try:
        with serve(stack.services) as base:
            sdk = OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)
            yield Served(stack=stack, base=base, key=key, sdk=sdk)
    finally:
        stack.close()


def test_text2video_create_and_poll_then_download_video_and_thumbnail(served: Served, tmp_path: Path) -> None:
    sdk = served.sdk
    raw = sdk.videos.with_raw_response.create(
        model="reference-t2v",
        prompt="green hills",
        size=SMALL,
        seconds=ONE_SECOND,
        extra_body=TINY,
    )
    assert raw.headers["openai-poll-after-ms"] == "1000"  # what videos.poll sleeps between retrieves
    created = raw.parse()
    assert isinstance(created, Video) and created.status == "queued" and created.size == "64x64"
    video = sdk.videos.poll(created.id)
    assert video.status == "completed", video.error
    assert video.progress == 100 and video.seconds == "1" and isinstance(video.completed_at, int)
    assert sdk.videos.retrieve(video.id) == video

    path = tmp_path / "hills.mp4"
    sdk.videos.download_content(video.id).write_to_file(path)
    facts = probe_media(path)  # ffprobe: a real MP4 of the size and length asked for
    assert facts.video is not None and (facts.video.width, facts.video.height) == (64, 64)
    assert facts.video.nb_frames == 8 and facts.video.fps == pytest.approx(8)
    thumbnail = sdk.videos.download_content(video.id, variant="thumbnail").read()
    image = Image.open(io.BytesIO(thumbnail))
    assert image.format == "JPEG" and image.size == (64, 64)

    # The same job on /jobs, through the same gate, with the same key.
    job = requests.get(f"{served.base}/jobs/{video.id}", headers=bearer(served.key), timeout=30).json()
    assert (
        job["status"] == "succeeded" and job["validation"]["verdict"] == "passed" and job["tenant"] == "acme"
    )


def test_text2video_create_and_poll_in_one_call(served: Served) -> None:
    video = served.sdk.videos.create_and_poll(
        model="reference-t2v",
        prompt="a kite",
        size=SMALL,
        seconds=ONE_SECOND,
        extra_body=TINY,
    )
    assert video.status == "completed" and video.prompt == "a kite", video.error


def test_audio2video_with_the_portrait_as_input_reference_and_speech_in_extra_body(
    served: Served, tmp_path: Path, portrait: Path, short_speech: Path
) -> None:
    video = served.sdk.videos.create_and_poll(
        model="reference-talking-head",
        prompt="(audio2video takes no prompt; the SDK requires one)",
        input_reference=("portrait.png", portrait.read_bytes(), "image/png"),
        extra_body={"audio": data_url(short_speech, "audio/mpeg"), "max_size": 128, "fps": 10},
    )
    assert video.status == "completed", video.error
    assert float(video.seconds) == pytest.approx(2.0, abs=0.1)
    path = tmp_path / "face.mp4"
    served.sdk.videos.download_content(video.id).write_to_file(path)
    facts = probe_media(path)
    assert facts.video is not None and facts.audio is not None
    assert video.size == f"{facts.video.width}x{facts.video.height}"  # the framing the model chose
    assert abs((facts.duration_s or 0) - float(video.seconds)) < 0.15


def test_audio2video_with_both_files_as_parts_through_the_sdks_post(
    served: Served, portrait: Path, short_speech: Path
) -> None:
    created = served.sdk.post(
        "/videos",
        cast_to=Video,
        body={"model": "reference-talking-head", "prompt": "p", "max_size": 128, "fps": 10},
        files=[
            ("input_reference", ("portrait.png", portrait.read_bytes(), "image/png")),
            ("audio", ("speech.mp3", short_speech.read_bytes(), "audio/mpeg")),
        ],
        options={"headers": {"Content-Type": "multipart/form-data"}},
    )
    assert created.status == "queued"
    assert served.sdk.videos.poll(created.id).status == "completed"


def test_list_remix_delete_and_refusals(served: Served) -> None:
    sdk = served.sdk
    source = sdk.videos.create(
        model="reference-t2v", prompt="a red kite", size=SMALL, extra_body={**TINY, "num_frames": 8}
    )
    remix = sdk.videos.remix(source.id, prompt="a blue kite")
    assert remix.remixed_from_video_id == source.id and remix.prompt == "a blue kite"
    done = sdk.videos.poll(remix.id)
    assert done.status == "completed" and done.size == "64x64", done.error
    listed = [v.id for v in sdk.videos.list(limit=1)]  # one per page: the SDK follows after=last_id
    assert listed[:2] == [remix.id, source.id] and len(listed) == len(set(listed))

    deleted = sdk.videos.delete(remix.id)
    assert deleted.deleted is True and deleted.id == remix.id and deleted.object == "video.deleted"
    # Gone, as from OpenAI's API (issue 26): a client that deletes and then confirms sees a 404.
    for confirm in (sdk.videos.retrieve, sdk.videos.download_content, sdk.videos.delete):
        with pytest.raises(openai.NotFoundError) as gone:
            confirm(remix.id)
        assert gone.value.code == "video_not_found"
    assert remix.id not in [v.id for v in sdk.videos.list(limit=100)]

    with pytest.raises(openai.NotFoundError) as unknown:
        sdk.videos.create(model="sora-2", prompt="x")
    assert unknown.value.code == "model_not_found" and unknown.value.param == "model"
    with pytest.raises(openai.BadRequestError) as too_big:
        sdk.videos.create(model="reference-t2v", prompt="x", size="1792x1024")
    assert too_big.value.param == "size" and "from 64 to 1280" in too_big.value.message
    with pytest.raises(openai.AuthenticationError):
        OpenAI(base_url=f"{served.base}/v1", api_key="wrong", max_retries=0).videos.list()


def _poll(base: str, key: str, video_id: str, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        video = requests.get(f"{base}/v1/videos/{video_id}", headers=bearer(key), timeout=30).json()
        if video["status"] in ("completed", "failed"):
            return dict(video)
        time.sleep(0.5)
    raise AssertionError(f"video {video_id} did not finish in {timeout} s")


def test_a_vllm_omni_style_multipart_client(served: Served, tmp_path: Path) -> None:
    # As vLLM-Omni's examples send it (curl -F): every field a multipart form field.
    form = {
        "prompt": "a lighthouse at dusk",
        "model": "reference-t2v",
        "width": "64",
        "height": "64",
        "num_frames": "8",
        "fps": "8",
        "num_inference_steps": "2",
        "guidance_scale": "4.0",
        "seed": "42",
        "negative_prompt": "",
    }
    files = {name: (None, value) for name, value in form.items()}
    created = requests.post(f"{served.base}/v1/videos", files=files, headers=bearer(served.key), timeout=30)
    assert created.status_code == 200, created.text
    video = _poll(served.base, served.key, created.json()["id"])
    assert video["status"] == "completed" and video["size"] == "64x64" and video["seconds"] == "1", video
    content = requests.get(
        f"{served.base}/v1/videos/{video['id']}/content", headers=bearer(served.key), timeout=30
    )
    assert content.status_code == 200 and content.headers["Content-Type"] == "video/mp4"
    path = tmp_path / "lighthouse.mp4"
    path.write_bytes(content.content)
    facts = probe_media(path)
    assert facts.video is not None and facts.video.nb_frames == 8
