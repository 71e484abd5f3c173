"""The job-group pages in a real browser: headless Chromium against the real app over HTTP and a
real worker running the CPU reference text2video model. A manifest dropped on ``/ui/groups`` runs
to the end on its group's page (followed live); a refused one shows its problems; a folder of files
goes as direct uploads (``POST /uploads``) that the manifest's cells then name."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.server import serve
from tests.browser.test_web_ui import Session, open_session, playwright
from tests.integration.conftest import Stack, build_stack

__all__ = ["playwright"]
pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.slow]

GROUP_URL = re.compile(r".*/ui/groups/[0-9a-f-]{36}$")
ROWS = "model,prompt,width,height,num_frames,num_inference_steps,fps,seed\n" + "".join(
    f"reference-t2v,kite {n},64,64,8,2,8,{n}\n" for n in (1, 2)
)


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One CPU worker serving the reference models, and the app served over HTTP."""
    stack: Stack = build_stack(tmp_path_factory.mktemp("groups-web"), watch_interval_seconds=0.1)
    stack.start_worker(
        "groups-web",
        extra_env={"JOBSERVICE_WORKER_MODELS": json.dumps(["reference-t2v", "reference-talking-head"])},
    )
    try:
        with serve(stack.services) as url:
            yield url
    finally:
        stack.close()


@pytest.fixture
def web(playwright: Any, base_url: str, tmp_path: Path) -> Iterator[Session]:
    """A fresh Chromium profile with JavaScript on."""
    yield from open_session(playwright, tmp_path / "profile", base_url)


def test_a_dropped_manifest_runs_to_the_end_on_its_page(web: Session, tmp_path: Path) -> None:
    manifest = tmp_path / "kites.csv"
    manifest.write_text(ROWS)
    page = web.page
    web.goto("/ui/groups")
    page.set_input_files("#f-manifest", str(manifest))
    page.click("#group-form button[type=submit]")
    page.wait_for_url(GROUP_URL)
    assert "kites" in str(page.text_content("h1"))
    page.wait_for_selector('#group-live[data-ended="1"]', timeout=240_000)  # followed live, then reloaded
    assert str(page.text_content("h1 [data-role=status]")).strip() == "finished"
    assert "2 succeeded" in str(page.text_content("[data-role=counts]"))
    assert (
        page.locator("td .badge-succeeded").count() == 2 and page.locator("td a:text('video')").count() == 2
    )
    results = page.get_attribute("a:text('results (CSV)')", "href")
    assert results is not None and results.endswith("/results")
    web.shot("groups-01-finished")
    web.assert_clean()


def test_a_refused_manifest_lists_its_problems(web: Session, tmp_path: Path) -> None:
    manifest = tmp_path / "bad.csv"
    manifest.write_text("model,prompt,width\nreference-t2v,ok,64\nreference-t2v,,65\n")
    page = web.page
    web.goto("/ui/groups")
    page.set_input_files("#f-manifest", str(manifest))
    page.click("#group-form button[type=submit]")
    page.wait_for_selector("#manifest-problems")
    cells = page.locator("#manifest-problems tbody tr").all_text_contents()
    assert any("prompt" in c for c in cells) and any("width" in c for c in cells)
    web.errors = [e for e in web.errors if "status of 422" not in e]  # the refused page itself
    web.assert_clean()


def test_a_folder_of_files_goes_as_direct_uploads_and_the_group_runs(
    web: Session, tmp_path: Path, portrait: Path, short_speech: Path
) -> None:
    manifest = tmp_path / "faces.csv"
    manifest.write_text("model,image,audio\nreference-talking-head,face.png,speech.mp3\n")
    sent: list[str] = []
    page = web.page
    page.on("request", lambda request: sent.append(f"{request.method} {request.url.split('/', 3)[-1]}"))
    web.goto("/ui/groups")
    page.set_input_files("#f-manifest", str(manifest))
    folder = tmp_path / "inputs"
    folder.mkdir()
    (folder / "face.png").write_bytes(portrait.read_bytes())
    (folder / "speech.mp3").write_bytes(short_speech.read_bytes())
    page.set_input_files("#f-files", str(folder))
    page.click("#group-form button[type=submit]")  # each named file: declared, PUT, completed
    page.wait_for_url(GROUP_URL, timeout=60_000)
    completes = [r for r in sent if r.startswith("POST uploads/") and r.endswith("/complete")]
    assert len(completes) == 2 and any(r.startswith("PUT uploads/") for r in sent), sent
    page.wait_for_selector('#group-live[data-ended="1"]', timeout=240_000)
    assert str(page.text_content("h1 [data-role=status]")).strip() == "finished"
    assert "1 succeeded" in str(page.text_content("[data-role=counts]"))
    web.assert_clean()
