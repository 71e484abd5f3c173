"""A job's page: live state, result, validation timeline, timings, report, cancel and resubmit."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from jobservice.db.tables import JobStatus
from jobservice.jobs.submit import resubmit_job
from jobservice.reports.run_report import Segment
from tests.conftest import ffmpeg
from tests.factories import online_group
from tests.web.conftest import Browser, finish_job, load
from workers.dispatcher import Dispatcher

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def clip(media_dir: Path) -> Path:
    """A 2-second 64x64 H.264 clip."""
    out = media_dir / "clip.mp4"
    if not out.exists():
        ffmpeg("-f", "lavfi", "-i", "testsrc=size=64x64:rate=24:duration=2", "-pix_fmt", "yuv420p", str(out))
    return out


def submit(browser: Browser, prompt: str = "a kite", **fields: Any) -> str:
    body = {"task": "text2video", "model": "reference-t2v", "prompt": prompt, **fields}
    response = browser.post("/ui/jobs", body)
    assert response.status_code == 303, response.get_data(as_text=True)
    return str(response.headers["Location"].rsplit("/", 1)[1])


def submit_a2v(browser: Browser, portrait: Path, short_speech: Path) -> str:
    response = browser.post(
        "/ui/jobs",
        {"task": "audio2video", "seed": "11"},
        {"image": (portrait.read_bytes(), "face.png"), "audio": (short_speech.read_bytes(), "s.mp3")},
    )
    assert response.status_code == 303, response.get_data(as_text=True)
    return str(response.headers["Location"].rsplit("/", 1)[1])


def test_queued_job_page_refreshes_without_script_and_cancels(browser: Browser, services: Any) -> None:
    online_group(services.db, "cpu@test", ["reference-t2v", "reference-talking-head"])
    job_id = submit(browser)
    assert Dispatcher(services).run_once(wait_seconds=1.0)  # a worker's dispatcher hands it out
    html = browser.text(f"/ui/jobs/{job_id}")
    assert '<noscript><meta http-equiv="refresh" content="3"></noscript>' in html
    assert f'data-poll-url="/jobs/{job_id}"' in html and 'data-terminal="0"' in html
    assert "Waiting in the queue" in html and "next in line" in html
    assert 'id="cancel-job"' in html and "<video" not in html

    assert browser.post(f"/ui/jobs/{job_id}/cancel", csrf=False).status_code == 400
    assert load(services, job_id).status == JobStatus.QUEUED
    response = browser.post(f"/ui/jobs/{job_id}/cancel")
    assert response.status_code == 303 and response.headers["Location"] == f"/ui/jobs/{job_id}"
    html = browser.text(f"/ui/jobs/{job_id}")
    assert "The job was canceled." in html
    assert 'http-equiv="refresh"' not in html and 'id="cancel-job"' not in html
    again = browser.post(f"/ui/jobs/{job_id}/cancel")
    assert "already canceled" in browser.text(again.headers["Location"])


def test_succeeded_job_shows_video_validation_timings_and_report(
    browser: Browser, services: Any, client: Any, clip: Path
) -> None:
    job_id = submit(browser)
    finish_job(services, job_id, video=clip, black=[Segment(start_s=0.5, end_s=1.0, duration_s=0.5)])
    html = browser.text(f"/ui/jobs/{job_id}")
    assert (
        f'<video id="result-video" controls preload="metadata" playsinline src="/jobs/{job_id}/video">'
        in html
    )
    assert f'href="/jobs/{job_id}/video?download=1"' in html
    assert 'data-terminal="1"' in html and "refresh" not in html.split("</head>")[0]
    # the timeline: one black stretch from 25% to 50% of 2 s, ticks along the axis
    assert 'class="seg-black" data-segment="black" x="25.0%" y="0" width="25.0%"' in html
    assert "black 0.50–1.00 s (0.50 s)" in html and ">2 s</text>" in html
    # each check, expected against actual
    assert re.search(r"<td>frame_count</td><td>pass</td>\s*<td>48</td><td>48</td>", html)
    # the stage bar: every stage, and the rest as "other"
    for stage in (
        "fetch inputs",
        "load model",
        "generate",
        "encode",
        "validate",
        "upload",
        "outside the named",
    ):
        assert f"</span>{stage} " in html
    assert 'class="s-generate" x="22.778%"' in html and "1.8 s in all" in html
    assert "render fps" in html and "yes (this run loaded the model)" in html
    assert "&#34;frames_generated&#34;: 48" in html  # the RunReport, escaped JSON
    with client.get(f"/jobs/{job_id}/video", headers={"Range": "bytes=0-99"}) as video:
        assert video.status_code == 206 and len(video.data) == 100


def test_failed_job_explains_itself(browser: Browser, services: Any, clip: Path) -> None:
    job_id = submit(browser)
    finish_job(
        services,
        job_id,
        video=clip,
        verdict="failed",
        black=[Segment(start_s=0.0, end_s=2.0, duration_s=2.0, open_ended=True)],
    )
    html = browser.text(f"/ui/jobs/{job_id}")
    assert "<code>validation_failed</code>" in html
    assert "did not pass the quality checks" in html and "black (2.0 s of black frames)" in html
    assert "(kept for inspection)" in html and 'id="verdict">failed<' in html
    # the failed check comes first
    assert html.index("<td>black</td><td>FAIL</td>") < html.index("<td>frame_count</td>")
    assert 'id="resubmit-job"' in html and 'id="cancel-job"' not in html


def test_resubmit_copies_model_params_seed_and_inputs(
    browser: Browser, services: Any, portrait: Path, short_speech: Path
) -> None:
    job_id = submit_a2v(browser, portrait, short_speech)
    first = load(services, job_id)
    page = browser.text(f"/ui/jobs/{job_id}")
    assert f'src="/ui/jobs/{job_id}/inputs/image"' in page and "<audio controls" in page
    response = browser.post(f"/ui/jobs/{job_id}/resubmit")
    assert response.status_code == 303
    new_id = response.headers["Location"].rsplit("/", 1)[1]
    assert new_id != job_id
    second = load(services, new_id)
    assert second.model == first.model and second.params == first.params and second.params["seed"] == 11
    assert second.source == "web" and second.input_meta == first.input_meta
    for name, key in second.input_keys.items():
        assert key.startswith(f"jobs/{new_id}/inputs/")
        assert services.store.get_bytes(key) == services.store.get_bytes(first.input_keys[name])
    assert f"Resubmitted job {job_id[:8]}" in browser.text(f"/ui/jobs/{new_id}")
    with browser.client.get(f"/ui/jobs/{new_id}/inputs/image") as image:
        assert image.status_code == 200 and image.mimetype == "image/png"
        assert image.data == portrait.read_bytes()
    assert browser.client.get(f"/ui/jobs/{new_id}/inputs/nope").status_code == 404


def test_resubmit_refuses_when_inputs_are_gone(
    browser: Browser, services: Any, portrait: Path, short_speech: Path
) -> None:
    job_id = submit_a2v(browser, portrait, short_speech)
    job = load(services, job_id)
    services.store.delete(job.input_keys["audio"])
    before = {o.key for o in services.store.list("jobs/")}
    response = browser.post(f"/ui/jobs/{job_id}/resubmit")
    assert response.headers["Location"] == f"/ui/jobs/{job_id}"
    assert "no longer in the object store" in browser.text(response.headers["Location"])
    assert {o.key for o in services.store.list("jobs/")} == before
    with pytest.raises(Exception, match="no longer in the object store"):
        resubmit_job(services, job)


def test_the_form_asks_for_retries_and_the_page_lists_each_try(browser: Browser, services: Any) -> None:
    import uuid

    from jobservice.jobs import retries
    from jobservice.jobs.transitions import Owner, claim_job, retry_with_next_seed

    form = browser.text("/?task=text2video")
    assert 'name="retry_on_validation_failure"' in form and "Retries on a failed gate" in form
    refused = browser.post(
        "/ui/jobs", {"task": "text2video", "model": "reference-t2v", "prompt": "x", retries.FIELD: "12"}
    )
    assert refused.status_code == 422 and "from 0 to 10" in refused.get_data(as_text=True)
    job_id = submit(browser, seed="7", **{retries.FIELD: "2"})
    jid = uuid.UUID(job_id)
    assert load(services, job_id).retry_on_validation_failure == 2
    with services.db.session() as session:
        job = claim_job(session, jid, worker_id="w1@test", lease_seconds=30)
        assert job is not None
        tried = retries.try_record(
            job,
            verdict="failed",
            failed_checks=["black"],
            message="black frames",
            output_key=f"jobs/{jid}/output.mp4",
            report_key=f"jobs/{jid}/report.json",
            card_seconds=1.5,
            finished_at="2026-12-03T10:00:00+00:00",
        )
        assert retry_with_next_seed(session, jid, owner=Owner("w1@test", 1), tried=tried)
    html = browser.text(f"/ui/jobs/{job_id}")
    assert 'id="tries"' in html and "up to 2 times" in html
    first = html.split('data-try="1"', 1)[1].split("</tr>", 1)[0]
    assert "<td>7</td>" in first and "black" in first and "1.5" in first
    assert f'href="/jobs/{job_id}/video?try=1"' in first
    second = html.split('data-try="2"', 1)[1].split("</tr>", 1)[0]
    assert "<td>8</td>" in second and "queued" in second
