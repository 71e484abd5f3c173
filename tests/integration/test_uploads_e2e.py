"""Direct uploads end to end, over HTTP, with a real Celery worker running the jobs.

On S3 (moto's server) and PostgreSQL, as production runs: the test itself PUTs to the presigned
URLs with plain HTTP requests (no API key: they go to S3, not the API), one PUT and multipart; then a
job and a /v1/videos request name the uploads and the worker makes the videos. On the local store,
the Python client's ``upload`` does the same two calls, the API taking the bytes. A multipart upload
deleted halfway is aborted in the bucket.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from jobservice.client import ApiError, Client, UploadId
from jobservice.storage import S3Store
from tests.browser.server import serve
from tests.conftest import ffmpeg
from tests.integration.conftest import Stack, build_stack
from tests.integration.test_retention_stores import raw_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MIB = 2**20
MODELS = json.dumps(["reference-talking-head"])


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("e2e") / "speech.wav"
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=220:sample_rate=16000:duration=2", str(out))
    return out


@pytest.fixture(scope="module")
def long_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("e2e") / "long.wav"  # 30 s of 48 kHz stereo, 5.5 MiB: two parts of 5
    ffmpeg("-f", "lavfi", "-i", "sine=frequency=220:sample_rate=48000:duration=30", "-ac", "2", str(out))
    return out


def declare_put_complete(base: str, path: Path, ctype: str, **extra: Any) -> requests.Response:
    """What a client in any language does: declare, PUT each part to its URL, complete."""
    data = path.read_bytes()
    declared = requests.post(
        f"{base}/uploads",
        json={"filename": path.name, "size": len(data), "content_type": ctype, **extra},
        timeout=30,
    )
    assert declared.status_code == 201, declared.text
    view = declared.json()
    for part in view["parts"]:
        assert part["url"].startswith("http") and "X-Amz-Signature" in part["url"]  # presigned: S3 directly
        put = requests.put(part["url"], data=data[part["offset"] : part["offset"] + part["size"]], timeout=60)
        assert put.status_code == 200, put.text
    return requests.post(base + view["complete_url"], timeout=60)


def test_s3_uploads_feed_jobs_and_v1_videos(
    prod_stack: Stack, portrait: Path, speech_wav: Path, long_wav: Path
) -> None:
    prod_stack.start_worker("uploads", extra_env={"JOBSERVICE_WORKER_MODELS": MODELS})
    with serve(prod_stack.services) as base:
        image = declare_put_complete(base, portrait, "image/png")
        audio = declare_put_complete(base, speech_wav, "audio/wav")
        assert image.status_code == audio.status_code == 200, (image.text, audio.text)
        assert image.json()["status"] == "ready" and image.json()["facts"]["width"] > 0
        assert audio.json()["facts"]["duration_s"] == pytest.approx(2.0, abs=0.01)

        parted = declare_put_complete(base, long_wav, "audio/wav", part_size=5 * MIB)
        assert parted.status_code == 200, parted.text
        assert parted.json()["multipart"] and parted.json()["facts"]["duration_s"] == pytest.approx(
            30.0, abs=0.01
        )
        assert (
            prod_stack.services.store.get_bytes(f"uploads/{parted.json()['id']}/audio")
            == long_wav.read_bytes()
        )

        not_audio = declare_put_complete(base, portrait, "audio/wav")  # a PNG declared as audio
        assert not_audio.status_code == 422 and not_audio.json()["error"]["code"] == "invalid_audio"

        job = requests.post(
            f"{base}/jobs",
            json={
                "task": "audio2video",
                "image": image.json()["id"],
                "audio": audio.json()["id"],
                "max_size": 128,
            },
            timeout=30,
        )
        assert job.status_code == 202, job.text
        video = requests.post(
            f"{base}/v1/videos",
            json={
                "model": "reference-talking-head",
                "input_reference": {"file_id": image.json()["id"]},
                "audio": {"file_id": audio.json()["id"]},
                "prompt": "a face",
            },
            timeout=30,
        )
        assert video.status_code == 200, video.text
        for job_id in (job.json()["id"], video.json()["id"]):
            done = prod_stack.wait(job_id, timeout=300)
            assert done.status == "succeeded", (done.error_code, done.error_message)
            assert done.input_keys["audio"] == f"jobs/{job_id}/inputs/audio.wav"
        got = requests.get(f"{base}/jobs/{job.json()['id']}/video", allow_redirects=False, timeout=30)
        assert (
            got.status_code == 302
            and requests.get(got.headers["Location"], timeout=30).content[4:8] == b"ftyp"
        )


@pytest.fixture
def local_api(tmp_path: Path) -> Iterator[tuple[Stack, Client]]:
    stack = build_stack(tmp_path)
    stack.start_worker("local-uploads", extra_env={"JOBSERVICE_WORKER_MODELS": MODELS})
    try:
        with serve(stack.services) as base, Client(base, timeout=60) as client:
            yield stack, client
    finally:
        stack.close()


def test_python_client_uploads_on_the_local_store(
    local_api: tuple[Stack, Client], portrait: Path, speech_wav: Path, long_wav: Path
) -> None:
    stack, api = local_api
    seen: list[tuple[int, int]] = []
    parted = api.upload(
        long_wav, part_size=5 * MIB, on_progress=lambda sent, total: seen.append((sent, total))
    )
    size = long_wav.stat().st_size
    assert seen == [(0, size), (5 * MIB, size), (size, size)]  # progress after each part
    assert api.get_upload(parted).status == "ready"
    image, audio = api.upload(portrait), api.upload(speech_wav)
    assert isinstance(image, UploadId)
    job = api.submit_audio2video(image=image, audio=audio, max_size=128)
    final = api.wait(job.id, timeout=300)
    assert final.status == "succeeded", final.error
    assert final.inputs["audio"]["upload_id"] == audio


def test_cli_submit_sends_large_files_as_uploads(
    local_api: tuple[Stack, Client], portrait: Path, speech_wav: Path
) -> None:
    stack, api = local_api
    ran = stack.cli(
        "submit", "--url", api.base_url, "--image", str(portrait), "--audio", str(speech_wav),
        "--upload-above", "0", "-p", "max_size=128", "--json", "--timeout", "300",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "uploading speech.wav: 100%" in ran.stderr  # the progress line
    job = json.loads(ran.stdout)
    assert job["status"] == "succeeded"
    assert job["inputs"]["image"]["upload_id"] and job["inputs"]["audio"]["upload_id"]
    small = stack.cli(
        "submit", "--url", api.base_url, "--image", str(portrait), "--audio", str(speech_wav),
        "-p", "max_size=128", "--json", "--no-wait",
    )  # fmt: skip
    assert small.returncode == 0, small.stderr
    assert "upload_id" not in json.loads(small.stdout)["inputs"]["audio"]  # under 32 MB: in the request


def test_client_sends_a_failed_part_again_straight_to_s3(prod_stack: Stack, long_wav: Path) -> None:
    with serve(prod_stack.services) as base, Client(base, timeout=60, sleep=lambda _s: None) as api:
        real_put = api.http.session.put
        tries: list[str] = []

        def flaky_put(url: str, **kwargs: Any) -> requests.Response:
            tries.append(url.split("partNumber=")[-1].split("&")[0])
            assert "Authorization" not in (kwargs.get("headers") or {})  # no API key to S3
            if len(tries) == 2:  # the first try of part 2 is lost on the way
                raise requests.ConnectionError("connection reset by peer")
            return real_put(url, **kwargs)

        api.http.session.put = flaky_put  # type: ignore[method-assign,assignment]
        upload_id = api.upload(long_wav, part_size=5 * MIB)
    assert tries == ["1", "2", "2"]  # part 2 again, part 1 not
    assert prod_stack.services.store.get_bytes(f"uploads/{upload_id}/audio") == long_wav.read_bytes()


def test_deleting_a_multipart_upload_halfway_aborts_it_in_the_bucket(
    prod_stack: Stack, long_wav: Path
) -> None:
    store = prod_stack.services.store
    assert isinstance(store, S3Store) and store.endpoint_url is not None
    s3 = raw_client(store.endpoint_url)
    with serve(prod_stack.services) as base, Client(base, timeout=60) as api:
        view = api.declare_upload(long_wav, part_size=5 * MIB)
        assert view.parts is not None and len(view.parts) == 2
        api.put_part(view.parts[0], long_wav.read_bytes()[: view.parts[0].size])  # part 1 of 2
        listed = s3.list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
        assert [u["Key"] for u in listed] == [f"uploads/{view.id}/audio"]
        api.delete_upload(view.id)
        assert s3.list_multipart_uploads(Bucket=store.bucket).get("Uploads", []) == []
        with pytest.raises(ApiError) as gone:
            api.get_upload(view.id)
        assert gone.value.code == "upload_not_found"
