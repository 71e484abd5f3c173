"""The Fleet and Usage pages and the ETA on a queued job's page, in a real browser (headless Chromium)
against the real app and a real worker process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.server import serve
from tests.browser.test_web_ui import Session, open_session, playwright  # noqa: F401 - the fixture
from tests.integration.conftest import Stack, build_stack

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.slow]

QUICK = {"model": "fake-good", "num_frames": 12, "fps": 12, "size": 32}
SLOW = {"model": "fake-good", "num_frames": 40, "fps": 10, "size": 32, "step_seconds": 0.25}  # ~10 s


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build_stack(tmp_path_factory.mktemp("fleet-pages"), forecast_interval_seconds=1.0)
    s.start_worker("pages", extra_env={"JOBSERVICE_WORKER_MEMORY_GB": "8"})
    yield s
    s.close()


@pytest.fixture(scope="module")
def base_url(stack: Stack) -> Iterator[str]:
    with serve(stack.services) as url:
        yield url


@pytest.fixture
def web(playwright: Any, base_url: str, tmp_path: Path) -> Iterator[Session]:  # noqa: F811
    yield from open_session(playwright, tmp_path / "profile", base_url)


def test_fleet_page_shows_residency_and_a_timeline_with_loads(stack: Stack, web: Session) -> None:
    for job_id in [stack.submit(QUICK) for _ in range(2)]:
        assert stack.wait(job_id, timeout=120).status == "succeeded"
    page = web.page
    web.goto("/ui/fleet")
    group = page.locator("section.fleet-group[data-group='pages@test']")
    assert group.count() == 1
    assert "fake-good" in str(group.locator("[data-role=resident]").text_content())
    assert group.locator("rect[data-state=generating]").count() >= 1
    assert group.locator("rect[data-state=loading]").count() >= 1
    assert group.locator("text[data-mark=load]").count() >= 1
    assert "8.0 GB per card" in str(group.text_content())
    assert page.locator("tr[data-model='fake-good']").count() == 1
    web.shot("fleet-01-page")
    page.set_viewport_size({"width": 375, "height": 800})
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    web.shot("fleet-02-phone")
    web.assert_clean()


def test_usage_page_lists_the_card_seconds_per_tenant(stack: Stack, web: Session) -> None:
    job_id = stack.submit(QUICK)
    assert stack.wait(job_id, timeout=120).status == "succeeded"
    page = web.page
    web.goto("/ui/usage")
    row = page.locator("#usage-rows tr[data-tenant=default][data-model=fake-good]")
    assert row.count() == 1
    total = page.locator(".usage-totals li[data-tenant=default]")
    assert "card-seconds" in str(total.text_content())
    web.shot("fleet-03-usage")
    web.assert_clean()


def test_a_queued_jobs_page_says_when_it_starts(stack: Stack, web: Session) -> None:
    busy = stack.submit(SLOW)
    stack.wait(busy, predicate=lambda j: j.status == "running", timeout=60)
    waiting = stack.submit(QUICK)
    page = web.page
    web.goto(f"/ui/jobs/{waiting}")
    deadline = time.monotonic() + 30
    text = ""
    while time.monotonic() < deadline:
        text = str(page.text_content("[data-role=eta]") or "")
        if "starts" in text:
            break
        page.wait_for_timeout(500)
        if time.monotonic() > deadline - 20 and "starts" not in text:
            page.reload()
    assert "starts" in text, text
    web.shot("fleet-04-queued-eta", full_page=False)
    assert stack.wait(waiting, timeout=120).status == "succeeded"
    web.assert_clean()
