"""SoulX-FlashTalk on upstream's own code, as a new user would run it: a REAL worker process, the
REAL resident script (workers/adapters/soulx/flashtalk_resident.py) and a fake ``flash_talk`` package
that follows upstream's signatures and return shapes (tests/standins/fake_flash_talk), in both
of upstream's variants (issue 15):

* ``upstream``: ``FlashTalkPipeline.generate`` returns only the new frames and the checkout's
  ``infer_params.yaml`` is in force whatever the job asks (FLASHTALK_* ignored);
* ``patched``: OmniRT's patched checkout, all ``frame_num`` frames, FLASHTALK_* honoured.

Two 13.24 s jobs each: both pass the gate on frame count and duration, and the second reuses the
loaded pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack, build_stack
from tests.realmodels.test_flashtalk_upstream import SECONDS, VARIANTS, speech
from tests.standins.deploy import FakeCheckout, flashtalk_upstream_checkout, write_deployment
from tests.standins.jobs import check, report, submit_a2v

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MODEL = "soulx-flashtalk-14b"


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Stack, FakeCheckout, Path]]:
    variant = str(request.param)
    tmp = tmp_path_factory.mktemp(f"flashtalk-{variant}")
    checkout = flashtalk_upstream_checkout(tmp / "site", **VARIANTS[variant])
    entry = checkout.script_entry(
        resident_script=checkout.extra["resident_script"],
        cards=1,
        chunk_timeout=60,
        startup_timeout=120,
        defaults={"height": 256, "width": 256},  # the realtime preset, smaller frames
    )
    deployment = write_deployment(
        tmp / "deploy.yaml",
        {
            "reference_models": False,
            "models": {MODEL: entry},
            "workers": [{"devices": "npu:0", "models": [MODEL]}],
        },
    )
    stack = build_stack(tmp / "stack", deployment_file=deployment)
    stack.start_worker("ft", devices="npu:0")
    yield variant, stack, checkout, speech(tmp, SECONDS)
    stack.close()


def run(stack: Stack, audio: Path, **params: Any) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    job_id = submit_a2v(stack, MODEL, audio, **params)
    job = stack.wait(job_id, timeout=120)
    view = stack.client.get(f"/jobs/{job_id}").get_json()
    return job, (report(stack, job_id) if job.report_key else {}), view


def test_two_jobs_pass_the_gate_with_one_model_load(site: tuple[str, Stack, FakeCheckout, Path]) -> None:
    variant, stack, checkout, audio = site
    (first, cold, _), (second, warm, view) = run(stack, audio, seed=1), run(stack, audio, seed=2)
    for job, data in ((first, cold), (second, warm)):
        assert job.status == "succeeded", (job.error_code, job.error_message)
        assert data["validation"]["verdict"] == "passed" and check(data, "frame_count")["actual"] == 331
        assert check(data, "duration")["passed"] and data["media_duration_s"] == pytest.approx(SECONDS)
        assert data["frames_generated"] == 331 and data["chunk_summary"]["chunk_count"] == 12
    assert (cold["extra"]["pipeline_reused"], warm["extra"]["pipeline_reused"]) == (False, True)
    assert cold["extra"]["resident"]["pid"] == warm["extra"]["resident"]["pid"]
    assert len(checkout.records("flash_talk.get_pipeline")) == 1, "one model load for both jobs"
    frames = warm["extra"]["chunk_frames"]
    in_force = warm["extra"]["settings_in_force"]
    if variant == "upstream":
        assert frames == {"case": "new_frames_only", "returned": 28, "kept": 28}
        assert (in_force["height"], in_force["width"], in_force["frame_num"]) == (256, 192, 33)
        assert (check(warm, "width")["actual"], check(warm, "height")["actual"]) == (192, 256)
        (warning,) = view["warnings"]
        assert "'realtime' was not honoured" in warning and "frame_num 33 (requested 29)" in warning
        assert warm["extra"]["warnings"] == [warning]
    else:
        assert frames == {"case": "all_frames", "returned": 29, "kept": 28}
        assert (in_force["height"], in_force["width"], in_force["frame_num"]) == (256, 256, 29)
        assert view["warnings"] == [] and warm["extra"]["settings_not_honoured"] == {}
