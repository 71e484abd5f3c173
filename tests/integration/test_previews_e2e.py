"""Previews while a job renders, end to end: a real Celery worker runs the reference talking head
for many chunks; the API shows ``links.preview`` and the stream sends ``preview`` events before
the job ends, the Python client downloads a preview that plays (video and audio of the span so
far), the CLI's ``status --follow`` prints it, and once the job has ended the validated video
replaces it. The reference text2video model, whose decoder streams the clip once denoising ends,
publishes video-only previews the same way.

The app is served over real HTTP (tests/browser/server.py); the worker publishes a preview at most
every half second (``JOBSERVICE_PREVIEW_INTERVAL_SECONDS``) so a test-sized job shows several.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from jobservice.client import ApiError, Client, JobView
from jobservice.media.probe import probe_media
from tests.browser.server import serve
from tests.conftest import ROOT, SAMPLES, ffmpeg
from tests.integration.conftest import Stack, build_stack
from tests.integration.test_streams_e2e import follow

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "reference-talking-head"
T2V = "reference-t2v"
NO_PREVIEWS = "fake-good"  # a test model whose spec says it publishes no previews (ModelSpec.previews)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """A served stack with one CPU worker of the reference talking head, previews every 0.5 s."""
    tmp = tmp_path_factory.mktemp("previews")
    stack = build_stack(
        tmp,
        preview_interval_seconds=0.5,
        watch_interval_seconds=0.1,
        stream_heartbeat_seconds=1.0,
        stream_max_seconds=5.0,
    )
    stack.start_worker(
        "previews", extra_env={"JOBSERVICE_WORKER_MODELS": json.dumps([MODEL, NO_PREVIEWS, T2V])}
    )
    try:
        with serve(stack.services) as base:
            yield stack, base
    finally:
        stack.close()


@pytest.fixture(scope="module")
def long_speech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample speech four times over (about 29 s: some 26 chunks of the reference model)."""
    out = tmp_path_factory.mktemp("speech") / "long.wav"
    ffmpeg("-stream_loop", "3", "-i", str(SAMPLES / "speech.wav"), "-c:a", "pcm_s16le", str(out))
    return out


def warm_up(api: Client) -> None:
    """One short job first, so the model is loaded before the timed one."""
    job = api.submit_audio2video(image=SAMPLES / "portrait.png", audio=SAMPLES / "speech.wav", model=MODEL)
    assert api.wait(job.id, timeout=300).status == "succeeded"


def test_a_running_job_publishes_previews_that_the_validated_video_replaces(
    served: tuple[Stack, str], long_speech: Path, tmp_path: Path
) -> None:
    stack, base = served
    with Client(base, timeout=60) as api:
        warm_up(api)
        job = api.submit_audio2video(
            image=SAMPLES / "portrait.png", audio=long_speech, model=MODEL, max_size=512
        )
        # Everything a client sees, at once: the raw stream, the CLI's follow, the client's wait.
        stream: dict[str, Any] = {}
        reader = threading.Thread(
            target=lambda: stream.update(got=follow(f"{base}/jobs/{job.id}/stream", deadline_s=240)),
            daemon=True,
        )
        reader.start()
        cli = subprocess.Popen(
            [sys.executable, "-m", "jobservice.cli.main", "status", job.id, "--follow", "--url", base],
            env=stack.env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen: list[JobView] = []
        downloaded: list[tuple[JobView, Path]] = []

        def on_update(view: JobView) -> None:
            seen.append(view)
            if view.preview is not None and view.preview.state == "ready" and len(downloaded) < 2:
                path = tmp_path / f"preview-{view.preview.number}.mp4"
                try:
                    downloaded.append((view, api.download_preview(view.id, path)))
                except ApiError as exc:  # the job ended between the event and the download
                    assert exc.code == "preview_replaced", exc

        final = api.wait(job.id, timeout=300, on_update=on_update)
        out, err = cli.communicate(timeout=120)
        reader.join(timeout=60)

    assert final.status == "succeeded", final.error
    running = [v for v in seen if v.status == "running" and v.preview is not None]
    ready = [v for v in running if v.preview is not None and v.preview.state == "ready"]
    assert ready, [(v.status, v.stage, v.preview) for v in seen]
    numbers = [v.preview.number or 0 for v in ready if v.preview is not None]
    assert numbers == sorted(numbers) and len(set(numbers)) >= 2, numbers
    for view in ready:
        assert view.preview is not None and view.preview.validated is False
        assert "not yet validated" in view.preview.message
        assert view.links["preview"] == f"/jobs/{job.id}/preview?n={view.preview.number}"
        assert "video" not in view.links

    # A preview plays: video and audio, as long as the record says, shorter than the whole.
    assert downloaded, "no preview could be downloaded while the job ran"
    for view, path in downloaded:
        facts = probe_media(path, count_frames=True)
        assert view.preview is not None and view.preview.seconds is not None
        assert facts.video is not None and facts.audio is not None, facts
        assert facts.video.nb_read_frames == view.preview.frames
        assert facts.duration_s is not None and abs(facts.duration_s - view.preview.seconds) < 0.05
        assert facts.duration_s < 28.0

    # The stream sent preview events before the end, each naming its preview.
    events = stream["got"].events
    names = [e["event"] for e in events]
    assert "preview" in names and names[-1] == "end", names
    assert names.index("preview") < names.index("end")
    for event in events:
        if event["event"] == "preview":
            assert event["view"]["status"] == "running" and "preview" in event["view"]["links"]

    # Ended: the validated video replaces the preview.
    assert final.preview is None and "preview" not in final.links and "video" in final.links
    assert "preview" not in final.timings
    assert events[-1]["view"]["links"].get("video") == f"/jobs/{job.id}/video"
    gone = requests.get(f"{base}/jobs/{job.id}/preview", timeout=30)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "preview_replaced"
    with Client(base, timeout=60) as after:
        video = probe_media(after.download(job.id, tmp_path / "final.mp4"))
    assert video.duration_s is not None and video.duration_s > 28.0

    # The CLI's follow printed each new preview on its own line, with its link (the first it saw is
    # the one published when it connected: on a loaded machine that may be after preview 1).
    assert cli.returncode == 0, err
    printed = [int(n) for n in re.findall(r"preview (\d+) \([0-9.]+ s, not yet validated\)", err)]
    assert len(printed) >= 2 and printed == sorted(set(printed)), err
    assert all(f"/jobs/{job.id}/preview?n={n}" in err for n in printed), err

    # The run's report says what it published, and how soon after the first frames.
    with Client(base, timeout=60) as reader_api:
        report = reader_api.report(job.id)
    published = report["extra"]["preview"]
    assert published["published"] >= len(set(numbers)) and published["failures"] == 0
    assert published["first_delay_ms"] is not None and published["first_delay_ms"] < 5000
    # Old previews were deleted as new ones came (the last three stay until retention).
    kept = [i.key for i in stack.services.store.list(f"jobs/{job.id}/") if "/preview-" in i.key]
    assert 1 <= len(kept) <= 3, kept


def test_a_text2video_job_publishes_video_only_previews_while_its_decoder_streams(
    served: tuple[Stack, str], tmp_path: Path
) -> None:
    """The whole clip is denoised at once (one step here), then decoded 16 frames at a time into the
    encoder: 241 frames of 640x368 are 16 chunks, seconds of decoding and encoding on any CPU, while
    the first preview goes out as soon as the first chunk is encoded (its remux takes tenths of a
    second)."""
    stack, base = served
    with Client(base, timeout=60) as api:
        job = api.submit(
            model=T2V,
            prompt="a red kite over the sea",
            width=640,
            height=368,
            num_frames=241,
            fps=16,
            num_inference_steps=1,
            seed=7,
        )
        stream: dict[str, Any] = {}
        reader = threading.Thread(
            target=lambda: stream.update(got=follow(f"{base}/jobs/{job.id}/stream", deadline_s=240)),
            daemon=True,
        )
        reader.start()
        seen: list[JobView] = []
        downloaded: list[tuple[JobView, Path]] = []

        def on_update(view: JobView) -> None:
            seen.append(view)
            preview = view.preview
            got = {v.preview.number for v, _ in downloaded if v.preview is not None}
            if preview is None or preview.state != "ready" or preview.number in got or len(got) == 2:
                return
            try:  # this very preview: a newer one may be out by now
                path = tmp_path / f"preview-{preview.number}.mp4"
                downloaded.append((view, api.download_preview(view.id, path, number=preview.number)))
            except ApiError as exc:  # the job ended, or three newer ones came, since the event
                assert exc.code in {"preview_replaced", "preview_not_found"}, exc

        final = api.wait(job.id, timeout=300, on_update=on_update)
        reader.join(timeout=60)
        with Client(base, timeout=60) as after:
            whole = probe_media(after.download(job.id, tmp_path / "final.mp4"))

    assert final.status == "succeeded", final.error
    ready = [
        v for v in seen if v.status == "running" and v.preview is not None and v.preview.state == "ready"
    ]
    assert ready, [(v.status, v.stage, v.preview) for v in seen]
    assert all(
        v.links["preview"] == f"/jobs/{job.id}/preview?n={v.preview.number}" for v in ready if v.preview
    )

    # A preview plays: H.264 video and no audio (text2video has none), shorter than the whole.
    assert downloaded, "no preview could be downloaded while the job ran"
    assert whole.video is not None and whole.audio is None and whole.duration_s is not None
    for view, path in downloaded:
        facts = probe_media(path, count_frames=True)
        assert view.preview is not None and view.preview.seconds is not None
        assert facts.video is not None and facts.audio is None, facts
        assert facts.video.codec_name == "h264" and (facts.video.width, facts.video.height) == (640, 368)
        assert facts.video.nb_read_frames == view.preview.frames
        assert facts.duration_s is not None and 0 < facts.duration_s < whole.duration_s
        assert abs(facts.duration_s - view.preview.seconds) < 0.05

    # The stream sent a preview event before the end.
    names = [e["event"] for e in stream["got"].events]
    assert "preview" in names and names[-1] == "end", names
    assert names.index("preview") < names.index("end")

    # Ended: the validated video replaces the preview.
    assert final.preview is None and "preview" not in final.links and "video" in final.links
    gone = requests.get(f"{base}/jobs/{job.id}/preview", timeout=30)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "preview_replaced"
    with Client(base, timeout=60) as reader_api:
        published = reader_api.report(job.id)["extra"]["preview"]
    assert published["published"] >= len({v.preview.number for v in ready if v.preview})


def test_a_queued_job_has_no_preview_and_a_bad_number_is_refused(served: tuple[Stack, str]) -> None:
    _stack, base = served
    with Client(base, timeout=60) as api:
        job = api.submit_audio2video(
            image=SAMPLES / "portrait.png", audio=SAMPLES / "speech.wav", model=MODEL
        )
        bad = requests.get(f"{base}/jobs/{job.id}/preview?n=zero", timeout=30)
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_preview_number"
        assert bad.json()["error"]["message"]
        early = requests.get(f"{base}/jobs/{job.id}/preview", timeout=30)
        assert early.status_code == 404
        assert early.json()["error"]["code"] in {"preview_not_ready", "preview_replaced"}
        api.wait(job.id, timeout=300)


def test_a_model_without_previews_says_so_while_it_runs(served: tuple[Stack, str]) -> None:
    _stack, base = served
    with Client(base, timeout=60) as api:
        job = api.submit(model=NO_PREVIEWS, prompt="no preview", num_frames=60, step_seconds=0.05)
        views: list[JobView] = []
        final = api.wait(job.id, timeout=300, on_update=views.append)
        during = [v for v in views if v.status == "running" and v.preview is not None]
        # Waiting from the claim until the run starts generating, then "none" for good.
        states = [v.preview.state for v in during if v.preview is not None]
        assert states and states[-1] == "none" and "ready" not in states, states
        assert during[-1].preview is not None and "only once it is finished" in during[-1].preview.message
        assert all("preview" not in v.links for v in views)
        assert final.status == "succeeded" and final.preview is None
        models = {m["id"]: m for m in requests.get(f"{base}/models", timeout=30).json()["models"]}
        assert models[NO_PREVIEWS]["previews"] is False and models[MODEL]["previews"] is True


def test_previews_on_postgresql_and_s3(prod_stack: Stack, long_speech: Path, tmp_path: Path) -> None:
    """As production runs: the preview record in PostgreSQL's JSON, the previews in S3 (moto's
    server), the API answering with a presigned redirect that a client follows."""
    prod_stack.start_worker(
        "previews-s3",
        extra_env={
            "JOBSERVICE_WORKER_MODELS": json.dumps([MODEL]),
            "JOBSERVICE_PREVIEW_INTERVAL_SECONDS": "0.5",
        },
    )
    with serve(prod_stack.services) as base, Client(base, timeout=60) as api:
        job = api.submit_audio2video(
            image=SAMPLES / "portrait.png", audio=long_speech, model=MODEL, max_size=256
        )
        view = api.get(job.id)
        deadline = time.monotonic() + 300
        while not (view.preview is not None and view.preview.state == "ready") and view.status in (
            "queued",
            "running",
        ):
            assert time.monotonic() < deadline, view
            time.sleep(0.2)
            view = api.get(job.id)
        assert view.status == "running" and view.preview is not None, view
        redirect = requests.get(f"{base}{view.links['preview']}", allow_redirects=False, timeout=30)
        assert redirect.status_code == 302 and redirect.headers["Location"].startswith("http"), redirect.text
        path = api.download_preview(job.id, tmp_path / "s3-preview.mp4", number=view.preview.number)
        facts = probe_media(path)
        assert facts.video is not None and facts.audio is not None
        assert facts.duration_s is not None and abs(facts.duration_s - (view.preview.seconds or 0)) < 0.05
        final = api.wait(job.id, timeout=300)
    assert final.status == "succeeded" and final.preview is None and "video" in final.links
    keys = [i.key for i in prod_stack.services.store.list(f"jobs/{job.id}/")]
    assert any("/preview-" in k for k in keys) and f"jobs/{job.id}/output.mp4" in keys, keys
