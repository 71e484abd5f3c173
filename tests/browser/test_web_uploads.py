"""The web form's direct uploads in a real browser (headless Chromium): with the threshold at 0 the
page sends each file by POST /uploads, PUTs its parts with progress, completes it, and the job's
form names the uploads; a real worker runs the job."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.server import serve
from tests.browser.test_web_ui import JOB_URL, Session, open_session, playwright  # noqa: F401
from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def upload_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """A stack whose web form sends every file as a direct upload, one worker, served over HTTP."""
    stack = build_stack(tmp_path_factory.mktemp("web-uploads"), upload_direct_above_mb=0)
    stack.start_worker(
        "web-uploads", extra_env={"JOBSERVICE_WORKER_MODELS": json.dumps(["reference-talking-head"])}
    )
    try:
        with serve(stack.services) as base:
            yield stack, base
    finally:
        stack.close()


@pytest.fixture
def web(playwright: Any, upload_stack: tuple[Stack, str], tmp_path: Path) -> Iterator[Session]:  # noqa: F811
    yield from open_session(playwright, tmp_path / "profile", upload_stack[1])


def test_the_form_uploads_files_directly_then_submits(
    web: Session, upload_stack: tuple[Stack, str], portrait: Path, short_speech: Path
) -> None:
    stack, _ = upload_stack
    sent: list[str] = []
    web.page.on("request", lambda request: sent.append(f"{request.method} {request.url.split('/', 3)[-1]}"))
    web.goto("/")
    web.page.set_input_files("#f-image", str(portrait))
    web.page.set_input_files("#f-audio", str(short_speech))
    web.page.click("#submit-job")
    web.page.wait_for_url(JOB_URL)
    puts = [r for r in sent if r.startswith("PUT uploads/")]
    completes = [r for r in sent if r.startswith("POST uploads/") and r.endswith("/complete")]
    assert len(puts) == 2 and len(completes) == 2, sent
    posted = [r for r in sent if r.startswith("POST ui/") or r.startswith("POST jobs")]
    assert posted, sent
    job_id = web.page.url.rsplit("/", 1)[-1]
    job = stack.job(job_id)
    assert {job.input_meta["image"]["upload_id"], job.input_meta["audio"]["upload_id"]} == {
        c.split("/")[1] for c in completes
    }
    assert web.wait_finished(240) == "succeeded"
    web.assert_clean()
