"""``jobservice.client`` end to end: the real app over HTTP (werkzeug's threaded server), a real
Celery worker process, the reference models. Streams close every 3 s, so ``wait`` also resumes
with ``Last-Event-ID`` on the way, as it does behind proxies that cut long requests."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from jobservice.client import ApiError, BatchView, Client, JobView
from jobservice.media.probe import probe_media
from tests.browser.server import serve
from tests.conftest import SAMPLES
from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVED = ["fake-good", "reference-t2v", "reference-talking-head"]
UNSERVED = "fake-frozen"  # no worker of this stack takes it: its jobs stay queued
SENT: list[tuple[str, str | None]] = []  # every request the client sent: path, Last-Event-ID


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """A client of a served stack with one CPU worker."""
    tmp = tmp_path_factory.mktemp("client")
    root = tmp / "root"
    root.mkdir()
    for name in ("portrait.png", "speech.wav"):
        shutil.copy(SAMPLES / name, root / name)
    stack: Stack = build_stack(
        tmp, batch_root=root, stream_heartbeat_seconds=1.0, stream_max_seconds=3.0, watch_interval_seconds=0.1
    )
    stack.start_worker("client", extra_env={"JOBSERVICE_WORKER_MODELS": json.dumps(SERVED)})
    try:
        with serve(stack.services) as base, Client(base, timeout=60) as client:
            client.http.session.hooks["response"].append(record)
            yield client
    finally:
        stack.close()


def record(response: requests.Response, *args: object, **kwargs: object) -> None:
    last_id = response.request.headers.get("Last-Event-ID")
    SENT.append((response.request.path_url, str(last_id) if last_id is not None else None))


def test_text2video_submit_wait_download_report_list(api: Client, tmp_path: Path) -> None:
    job = api.submit_text2video(
        prompt="green hills", model="reference-t2v", width=64, height=64, num_frames=8, seed=1
    )
    assert isinstance(job, JobView) and job.task == "text2video" and job.status == "queued"
    updates: list[JobView] = []
    SENT.clear()
    final = api.wait(job.id, timeout=240, on_update=updates.append)
    assert {path for path, _ in SENT} == {f"/jobs/{job.id}/stream"}, SENT  # followed live: not one poll
    assert final.status == "succeeded", final.error
    assert final.validation is not None and final.validation.verdict == "passed"
    assert updates[-1] == final and {"queued", "running"} & {u.status for u in updates[:-1]}
    assert api.get(job.id) == final

    video = api.download(job.id, tmp_path / "hills.mp4")
    facts = probe_media(video)  # ffprobe: a real MP4 with the size asked for
    assert facts.video is not None and (facts.video.width, facts.video.height) == (64, 64)
    report = api.report(job.id)
    assert report["validation"]["verdict"] == "passed"

    page = api.list(model="reference-t2v", status=["succeeded"], limit=1)
    assert [j.id for j in page.jobs] == [job.id]
    assert job.id in {j.id for j in api.iter_jobs(page_size=1)}


def test_audio2video_with_files(api: Client, tmp_path: Path, portrait: Path, short_speech: Path) -> None:
    job = api.submit_audio2video(image=portrait, audio=short_speech.read_bytes(), max_size=128)
    final = api.wait(job.id, timeout=240)
    assert final.status == "succeeded", final.error
    assert final.inputs["audio"]["duration_s"] == pytest.approx(2.0, abs=0.1)
    facts = probe_media(api.download(final.id, tmp_path / "face.mp4"))
    assert facts.video is not None and facts.audio is not None
    assert abs((facts.duration_s or 0) - final.inputs["audio"]["duration_s"]) < 0.1


def test_cancel_idempotency_and_errors(api: Client) -> None:
    first = api.submit_text2video(prompt="nobody runs me", model=UNSERVED, idempotency_key="client-e2e-1")
    again = api.submit_text2video(prompt="nobody runs me", model=UNSERVED, idempotency_key="client-e2e-1")
    assert again.id == first.id  # the same key: the same job, not a second one
    assert api.cancel(first.id).status == "canceled"
    assert api.wait(first.id, timeout=30, stream=False).status == "canceled"  # polling only
    with pytest.raises(ApiError) as finished:
        api.cancel(first.id)
    assert (finished.value.status, finished.value.code) == (409, "job_finished")
    with pytest.raises(ApiError) as missing:
        api.wait("00000000-0000-0000-0000-000000000000", timeout=10)
    assert (missing.value.status, missing.value.code) == (404, "job_not_found")
    with pytest.raises(ApiError) as bad:
        api.submit_text2video(prompt="x", model="no-such-model")
    assert bad.value.status in (404, 422) and bad.value.message


def test_wait_resumes_streams_the_server_closes(api: Client) -> None:
    job = api.submit_text2video(prompt="waits for a cancel", model=UNSERVED)
    # canceled once the server has closed the first stream (after 3 s): the wait must have resumed
    later = threading.Timer(4.5, lambda: Client(api.base_url).cancel(job.id))
    SENT.clear()
    later.start()
    try:
        final = api.wait(job.id, timeout=60)
    finally:
        later.join()
    assert final.status == "canceled"
    streams = [last_id for path, last_id in SENT if path == f"/jobs/{job.id}/stream"]
    assert len(streams) == len(SENT) >= 2, SENT
    assert streams[0] is None and all(streams[1:]), streams  # each reconnect says where it left off


def test_a_batch(api: Client) -> None:
    case = {"name": "t2v", "model": "fake-good", "params": {"prompt": "b", "num_frames": 8}, "repeat": 2}
    batch = api.submit_batch({"name": "client-batch", "cases": [case]})
    assert isinstance(batch, BatchView) and batch.progress.total == 2
    seen: list[BatchView] = []
    final = api.wait_batch(batch.id, timeout=240, on_update=seen.append)
    # Disturbed repeats are run again (at most 2 more per case): at least the 2 planned ones, all done.
    assert final.status == "finished" and final.progress.succeeded == final.progress.total >= 2
    jobs = api.batch_jobs(batch.id, page_size=1)  # a page per job
    total = final.progress.total
    assert len(jobs) == total and {(j.batch.case, j.status) for j in jobs} == {("t2v", "succeeded")}
    assert batch.id in {b.id for b in api.list_batches(name="client-batch")}
    report = api.batch_report(batch.id)
    assert report["object"] == "batch_report" and [(c["case"], c["passed"]) for c in report["cases"]] == [
        ("t2v", total)
    ]
    assert "t2v" in api.batch_report(batch.id, format="md")
    other = api.submit_batch({"name": "client-cancel", "cases": [{**case, "model": UNSERVED}]})
    assert api.cancel_batch(other.id).status == "canceled"
