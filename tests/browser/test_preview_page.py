"""The job page plays a running job's preview in a real browser (Debian's Chromium under
Playwright), labelled as not yet validated, and shows the validated video once the job has ended.

A real CPU worker runs the reference talking head on a long speech clip, publishing a preview at
most every half second (``JOBSERVICE_PREVIEW_INTERVAL_SECONDS``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobservice.client import Client
from tests.browser.server import serve
from tests.browser.test_web_ui import Session, open_session
from tests.browser.test_web_ui import playwright as playwright  # noqa: F401 - the fixture, shared
from tests.conftest import SAMPLES, ffmpeg
from tests.integration.conftest import build_stack

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.slow]

MODEL = "reference-talking-head"

# A newer preview may replace the player's source at any moment (one every 0.5 s here): its metadata
# is then gone until the new one has loaded, and a play() in flight is aborted. So the player is
# read once it holds a source that has loaded and played for a moment (seen: NaN and 0 x 0 read
# just after such a swap, under CI's load).
PREVIEW_PLAYS = """async () => {
  const v = document.querySelector('#preview-video');
  const loaded = () => v.readyState >= 1 ? Promise.resolve() : new Promise((resolve, reject) => {
    v.addEventListener('loadedmetadata', resolve, {once: true});
    v.addEventListener('error', () => reject(new Error('preview error ' + (v.error && v.error.code))), {once: true});
  });
  for (let tries = 0; tries < 10; tries += 1) {
    await loaded();
    try { await v.play(); } catch (e) { continue; }  // aborted by a newer preview's load: again
    await new Promise((resolve) => setTimeout(resolve, 400));
    if (v.readyState >= 1 && v.currentTime > 0) break;
  }
  await loaded();
  return {duration: v.duration, time: v.currentTime, width: v.videoWidth, height: v.videoHeight,
          src: v.currentSrc};
}"""


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The app over HTTP with one worker of the reference talking head, previews every 0.5 s."""
    stack = build_stack(tmp_path_factory.mktemp("preview-web"), preview_interval_seconds=0.5)
    stack.start_worker("preview-web", extra_env={"JOBSERVICE_WORKER_MODELS": json.dumps([MODEL])})
    try:
        with serve(stack.services) as url:
            yield url
    finally:
        stack.close()


@pytest.fixture
def web(playwright: Any, base_url: str, tmp_path: Path) -> Iterator[Session]:
    """A fresh Chromium profile with JavaScript on."""
    yield from open_session(playwright, tmp_path / "profile", base_url)


def test_the_job_page_plays_the_preview_then_the_validated_video(web: Session, tmp_path: Path) -> None:
    speech = tmp_path / "long.wav"
    ffmpeg("-stream_loop", "3", "-i", str(SAMPLES / "speech.wav"), "-c:a", "pcm_s16le", str(speech))
    with Client(web.base, timeout=60) as api:
        warm = api.submit_audio2video(
            image=SAMPLES / "portrait.png", audio=SAMPLES / "speech.wav", model=MODEL
        )
        assert api.wait(warm.id, timeout=300).status == "succeeded"  # the model is loaded now
        job = api.submit_audio2video(image=SAMPLES / "portrait.png", audio=speech, model=MODEL, max_size=512)
    page = web.page
    web.goto(f"/ui/jobs/{job.id}")
    page.evaluate("window.__samePage = true")
    web.wait_js(
        "!document.querySelector('#render-preview').hidden && document.querySelector('#preview-video').src",
        120,
    )
    label = page.locator("#render-preview [data-role=preview-label]")
    assert label.is_visible() and label.text_content() == "preview, not yet validated"
    played = page.evaluate(PREVIEW_PLAYS)
    assert played["width"] > 0 and played["height"] > 0, played
    assert 0 < played["duration"] < 29.0 and played["time"] > 0, played  # it plays, and it is partial
    assert f"/jobs/{job.id}/preview?n=" in played["src"]
    first_src = played["src"]
    web.shot("10-job-preview", full_page=False)
    # A newer preview replaces it in place (no reload), while the job still runs.
    web.wait_js(f"document.querySelector('#preview-video').currentSrc !== {json.dumps(first_src)}", 120)
    assert page.evaluate("window.__samePage === true"), "a new preview must not reload the page"

    assert web.wait_finished(300) == "succeeded"
    assert page.locator("#render-preview").count() == 0  # the validated video replaced it
    final = page.evaluate(
        """async () => {
          const v = document.querySelector('#result-video');
          if (v.readyState < 1) await new Promise((r) => v.addEventListener('loadedmetadata', r, {once: true}));
          return {duration: v.duration, src: v.currentSrc};
        }"""
    )
    assert final["duration"] > 28.0 and final["src"].endswith(f"/jobs/{job.id}/video"), final
    web.shot("11-job-validated-video", full_page=False)
    web.assert_clean()
