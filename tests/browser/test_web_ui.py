"""The web UI in a real browser: headless Chromium (Debian's package) driven by Playwright, against
the real app over HTTP and a real worker process.

Screenshots go to test-artifacts/browser/. Chromium must be at /usr/bin/chromium (or
JOBSERVICE_TEST_CHROMIUM); a missing browser fails these tests, it never skips them.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.browser.server import serve
from tests.conftest import ROOT
from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.slow]

CHROMIUM = os.environ.get("JOBSERVICE_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = ROOT / "test-artifacts" / "browser"
JOB_URL = re.compile(r".*/ui/jobs/[0-9a-f-]{36}$")
PREVIEW_URL = re.compile(r".*/jobs/[0-9a-f-]{36}/preview\?n=[0-9]+$")


@dataclass
class Session:
    """One browser profile with a page, the server's base URL and the errors the page logged."""

    base: str
    page: Any
    errors: list[str] = field(default_factory=list)
    # 404s of a preview a player was still reading when its job ended (``preview_replaced``): the
    # documented race between the job's end and the page hearing of it, not an error of the page.
    raced_previews: list[str] = field(default_factory=list)

    def goto(self, path: str) -> None:
        self.page.goto(self.base + path)

    def shot(self, name: str, *, full_page: bool = True) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        return path

    def wait_finished(self, timeout_s: float) -> str:
        """Wait until the job page shows a finished job (after its script reloads it); its status."""
        self.page.wait_for_selector('#live[data-terminal="1"]', timeout=timeout_s * 1000)
        return str(self.page.text_content("h1 [data-role=status]")).strip()

    def wait_js(self, expression: str, timeout_s: float = 30.0) -> Any:
        """Poll a JavaScript expression until truthy (wait_for_function evals in the page; our CSP forbids that)."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.page.evaluate(expression)
            if value:
                return value
            assert time.monotonic() < deadline, f"timed out waiting for: {expression}"
            self.page.wait_for_timeout(100)

    def assert_clean(self) -> None:
        """No script errors and no CSP violations were logged (a raced preview's 404 aside, each
        matched to its own response: Chromium logs a failed load without its URL)."""
        errors = list(self.errors)
        for _ in self.raced_previews:
            failed = "Failed to load resource: the server responded with a status of 404 (NOT FOUND)"
            if failed in errors:
                errors.remove(failed)
        assert errors == [], (errors, self.raced_previews)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Redis, SQLite, a local object store and one real CPU worker (fake zoo models included)."""
    s = build_stack(tmp_path_factory.mktemp("web-stack"))
    s.start_worker("web")
    yield s
    s.close()


@pytest.fixture(scope="module")
def base_url(stack: Stack) -> Iterator[str]:
    """The real app served over HTTP on a free port."""
    with serve(stack.services) as url:
        yield url


@pytest.fixture(scope="module")
def playwright() -> Iterator[Any]:
    """Playwright's sync API, after making sure the system Chromium is there."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"Chromium is required for the browser tests at {CHROMIUM}: apt-get install -y chromium "
            "(.ci/run and scripts/test.sh do this as root). Never `playwright install`."
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p


def open_session(playwright: Any, profile: Path, base: str, **options: Any) -> Iterator[Session]:
    context = playwright.chromium.launch_persistent_context(
        user_data_dir=str(profile),
        executable_path=CHROMIUM,
        args=CHROMIUM_ARGS,
        headless=True,
        viewport={"width": 1280, "height": 900},
        **options,
    )
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(30_000)
    session = Session(base=base, page=page)

    def on_console(message: Any) -> None:
        if message.type == "error":
            session.errors.append(message.text)

    def on_response(response: Any) -> None:
        if response.status == 404 and PREVIEW_URL.match(response.url):
            session.raced_previews.append(response.url)

    page.on("console", on_console)
    page.on("response", on_response)
    page.on("pageerror", lambda exc: session.errors.append(str(exc)))
    try:
        yield session
    finally:
        context.close()


@pytest.fixture
def web(playwright: Any, base_url: str, tmp_path: Path) -> Iterator[Session]:
    """A fresh Chromium profile with JavaScript on."""
    yield from open_session(playwright, tmp_path / "profile", base_url)


@pytest.fixture
def web_nojs(playwright: Any, base_url: str, tmp_path: Path) -> Iterator[Session]:
    """A fresh Chromium profile with JavaScript off."""
    yield from open_session(playwright, tmp_path / "profile-nojs", base_url, java_script_enabled=False)


VIDEO_METADATA = """async () => {
  const v = document.querySelector('#result-video');
  if (v.readyState < 1) {
    await new Promise((resolve, reject) => {
      v.addEventListener('loadedmetadata', resolve, {once: true});
      v.addEventListener('error', () => reject(new Error('video error ' + (v.error && v.error.code))), {once: true});
    });
  }
  const seekTo = v.duration * 0.75;
  await new Promise((resolve, reject) => {
    v.addEventListener('seeked', resolve, {once: true});
    v.addEventListener('error', () => reject(new Error('seek error')), {once: true});
    v.currentTime = seekTo;
  });
  return {duration: v.duration, currentTime: v.currentTime, width: v.videoWidth, height: v.videoHeight};
}"""


def test_audio2video_through_the_form(web: Session, portrait: Path, short_speech: Path) -> None:
    started = time.monotonic()
    page = web.page
    web.goto("/")
    page.set_input_files("#f-image", str(portrait))
    page.set_input_files("#f-audio", str(short_speech))
    page.wait_for_selector("#image-preview img")
    web.wait_js("document.querySelector('#audio-preview .hint').textContent.includes(' s ·')")
    assert "2.0" in str(page.text_content("#audio-preview .hint"))
    assert page.input_value("#f-model") == "reference-talking-head"
    web.shot("01-new-audio2video")

    page.click("#submit-job")
    page.wait_for_url(JOB_URL)
    assert page.is_visible("#live progress")
    web.shot("02-job-running", full_page=False)
    assert web.wait_finished(240) == "succeeded"

    facts = page.evaluate(VIDEO_METADATA)
    assert abs(facts["duration"] - 2.0) < 0.1, facts  # the speech lasts 2 s
    assert facts["currentTime"] == pytest.approx(facts["duration"] * 0.75, abs=0.1)  # seeking (Range)
    assert facts["width"] > 0 and facts["height"] > 0
    assert page.text_content("#verdict") == "passed"
    assert page.locator("table.checks tr.check-failed").count() == 0
    assert page.locator("svg.stage-bar rect").count() >= 5
    href = page.get_attribute("a[download]", "href")
    assert href is not None and href.endswith("/video?download=1")
    web.shot("03-job-succeeded")
    page.set_viewport_size({"width": 375, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    web.shot("04-job-succeeded-phone")
    web.assert_clean()
    print(f"audio2video through the browser: {time.monotonic() - started:.1f} s")


def test_failed_job_shows_code_words_and_timeline(web: Session) -> None:
    page = web.page
    web.goto("/?task=text2video")
    page.select_option("#f-model", "fake-black")
    page.wait_for_selector("#f-size")  # the model's own parameters were swapped in
    assert "A worker serving this model is online." in str(page.text_content(".model-info"))
    page.fill("#f-prompt", "<script>alert(1)</script> a black clip")
    page.fill("#f-num_frames", "24")
    page.click("#submit-job")
    page.wait_for_url(JOB_URL)
    assert web.wait_finished(60) == "failed"
    assert page.text_content("#failure code") == "validation_failed"
    assert "did not pass the quality checks" in str(page.text_content("#failure"))
    assert page.locator("#timeline rect.seg-black").count() >= 1
    assert page.locator("table.checks tr.check-failed").count() >= 1
    assert page.text_content("#prompt") == "<script>alert(1)</script> a black clip"  # shown, not run
    # clicking the timeline seeks the kept video
    page.click("#timeline .tl-track", position={"x": 5, "y": 9})
    web.shot("05-job-failed")
    web.assert_clean()


def test_progress_moves_then_cancel_and_resubmit(web: Session) -> None:
    page = web.page
    web.goto("/?task=text2video&model=fake-good")
    page.fill("#f-prompt", "a long one")
    page.fill("#f-num_frames", "400")
    page.fill("#f-step_seconds", "0.15")
    page.click("#submit-job")
    page.wait_for_url(JOB_URL)
    job_url = page.url
    page.evaluate("window.__samePage = true")
    web.wait_js("document.querySelector('#live progress').value > 0.08", 60)
    first = page.evaluate("document.querySelector('#live progress').value")
    web.wait_js(f"document.querySelector('#live progress').value > {first} + 0.02")
    assert page.evaluate("window.__samePage === true"), "progress must update without reloading"
    assert page.text_content("[data-role=stage]") == "Generating frames"
    web.shot("06-job-progress", full_page=False)

    page.click("#cancel-job")
    page.wait_for_selector(".flash-success")
    assert web.wait_finished(30) == "canceled"
    assert page.locator("#cancel-job").count() == 0
    # the page reloads itself when the job ends; the message of the click survives that reload
    kept = page.wait_for_selector(".flash-success", timeout=5000)
    assert kept is not None and "cancel" in str(kept.text_content()).lower()
    assert "canceled at a user's request" in str(page.text_content("#failure"))
    assert "generate (stopped)" in str(page.text_content(".legend"))
    web.shot("07-job-canceled", full_page=False)

    page.click("#resubmit-job")
    page.wait_for_url(JOB_URL)
    assert page.url != job_url
    assert "Resubmitted job" in str(page.text_content(".flash-success"))
    assert page.text_content("#live-title") is not None
    page.click("#cancel-job")
    assert web.wait_finished(30) == "canceled"
    web.assert_clean()


def test_form_checks_files_before_upload(web: Session) -> None:
    page = web.page
    web.goto("/")
    page.set_input_files("#f-image", {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hello"})
    page.wait_for_selector("[data-error-for=image]:not(:empty)")
    assert "not a PNG, JPEG or WebP" in str(page.text_content("[data-error-for=image]"))
    page.click("#submit-job")  # blocked in the browser: nothing is uploaded
    assert page.url.rstrip("/") == web.base
    web.assert_clean()


def test_jobs_list_and_form_at_phone_width(web: Session) -> None:
    page = web.page
    page.set_viewport_size({"width": 375, "height": 800})
    web.goto("/ui/jobs")
    assert page.locator("#job-rows tr").count() >= 3
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    web.shot("08-jobs-phone")
    page.set_viewport_size({"width": 1280, "height": 900})
    page.check("input[name=status][value=failed]")
    page.click(".filters button[type=submit]")
    page.wait_for_url(re.compile(r".*status=failed.*"))
    assert page.locator("#job-rows tr").count() == 1
    web.shot("09-jobs-filtered")
    page.set_viewport_size({"width": 375, "height": 800})
    web.goto("/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    web.shot("10-new-job-phone")
    web.assert_clean()


def test_without_javascript_the_form_posts_and_pages_refresh(web_nojs: Session) -> None:
    page = web_nojs.page
    web_nojs.goto("/?task=text2video")
    page.select_option("#f-model", "fake-good")
    page.click("button[name=change_model]")  # the <noscript> button shows the model's parameters
    page.wait_for_selector("#f-size")
    page.fill("#f-prompt", "no script here")
    page.fill("#f-num_frames", "12")
    page.click("#submit-job")
    page.wait_for_url(JOB_URL)
    assert page.locator('noscript meta[http-equiv="refresh"]').count() == 1 or web_nojs.page.content()
    deadline = time.monotonic() + 60
    while "succeeded" not in str(page.text_content("h1 [data-role=status]")):
        assert time.monotonic() < deadline, "the page should refresh itself until the job finishes"
        page.wait_for_timeout(500)
    assert page.locator("#result-video").count() == 1
    web_nojs.shot("11-nojs-succeeded")


def _paths(urls: list[str]) -> list[str]:
    from urllib.parse import urlsplit

    return [urlsplit(url).path for url in urls]


def test_job_page_follows_the_event_stream(web: Session) -> None:
    page = web.page
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url))
    web.goto("/?task=text2video&model=fake-good")
    page.fill("#f-prompt", "streamed")
    page.fill("#f-num_frames", "80")
    page.fill("#f-step_seconds", "0.05")
    page.click("#submit-job")
    page.wait_for_url(JOB_URL)
    job_id = page.url.rsplit("/", 1)[1]
    page.evaluate("window.__samePage = true")
    web.wait_js("document.querySelector('#live').dataset.live === 'stream'")
    web.wait_js("document.querySelector('#live progress').value > 0.1", 60)
    assert page.evaluate("window.__samePage === true"), "progress must update without reloading"
    assert web.wait_finished(60) == "succeeded"
    paths = _paths(seen)
    assert f"/jobs/{job_id}/stream" in paths
    assert f"/jobs/{job_id}" not in paths, "the page followed the stream, it did not poll"
    web.assert_clean()


def test_job_page_polls_when_the_stream_fails(web: Session) -> None:
    page = web.page
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url))
    page.route("**/stream", lambda route: route.abort())
    web.goto("/?task=text2video&model=fake-good")
    page.fill("#f-prompt", "polled")
    page.fill("#f-num_frames", "60")
    page.fill("#f-step_seconds", "0.05")
    page.click("#submit-job")
    page.wait_for_url(JOB_URL)
    job_id = page.url.rsplit("/", 1)[1]
    assert web.wait_finished(60) == "succeeded"
    paths = _paths(seen)
    assert f"/jobs/{job_id}/stream" in paths and f"/jobs/{job_id}" in paths  # tried, then polled
