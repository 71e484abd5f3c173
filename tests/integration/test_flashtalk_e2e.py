"""SoulX-FlashTalk through a REAL worker on card group npu:4-7: one resident pipeline kept between
jobs, fed chunk by chunk, with the seed benchmark's chunk telemetry in the RunReport."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack, build_stack
from tests.standins.deploy import FakeCheckout, flashtalk_checkout, write_deployment
from tests.standins.jobs import check, gone, job_log, report, speech_clip, submit_a2v

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MODEL = "soulx-flashtalk-14b"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, FakeCheckout, Path]]:
    tmp = tmp_path_factory.mktemp("flashtalk")
    checkout = flashtalk_checkout(tmp / "site")
    entry = checkout.script_entry(
        resident_script=checkout.extra["resident_script"],
        cards=4,
        pipeline_cache_size=1,
        chunk_timeout=20,
        defaults={"height": 256, "width": 256},  # small frames keep the test quick
    )
    deployment = write_deployment(
        tmp / "deploy.yaml",
        {
            "reference_models": False,
            "models": {MODEL: entry},
            "workers": [{"devices": "npu:4-7", "models": [MODEL]}],
        },
    )
    stack = build_stack(tmp / "stack", deployment_file=deployment)
    stack.start_worker("ft", devices="npu:4-7")
    yield stack, checkout, speech_clip(tmp)
    stack.close()


@pytest.fixture
def ft(site: tuple[Stack, FakeCheckout, Path]) -> Iterator[tuple[Stack, FakeCheckout, Path]]:
    site[1].set_mode("ok")
    yield site
    site[1].set_mode("ok")


def run(stack: Stack, speech: Path, **params: Any) -> tuple[Any, dict[str, Any]]:
    job = stack.wait(submit_a2v(stack, MODEL, speech, **params), timeout=90)
    return job, report(stack, str(job.id)) if job.report_key else {}


def test_the_resident_pipeline_is_kept_between_jobs(ft: Any) -> None:
    stack, checkout, speech = ft
    first, cold = run(stack, speech)
    assert first.status == "succeeded", (first.error_code, first.error_message)
    second, warm = run(stack, speech, seed=5)
    assert second.status == "succeeded"
    assert cold["execution_mode"] == "persistent_worker" == warm["execution_mode"]
    assert (cold["extra"]["pipeline_reused"], warm["extra"]["pipeline_reused"]) == (False, True)
    assert (first.cold_start, second.cold_start) == (True, False)
    assert cold["extra"]["resident"]["pid"] == warm["extra"]["resident"]["pid"]
    assert "resident_start_ms" in cold["timings"] and "resident_start_ms" not in warm["timings"]
    summary = warm["chunk_summary"]
    assert summary["chunk_count"] == 2 and summary["steady_chunk_core_ms_avg"] == 900.0
    assert summary["chunk_core_ms_avg"] == 3450.0 and summary["audio_embedding_ms_avg"] == 21.0
    assert summary["chunk_copy_ms_avg"] == 33.0 and summary["steady_chunk_total_ms_avg"] >= 954.0
    assert warm["validation"]["mode"] == "streamed" and warm["validation"]["verdict"] == "passed"
    # The resident's chunks stream into the pipeline: the first one was published as a preview.
    assert warm["extra"]["preview"]["published"] >= 1 and warm["extra"]["preview"]["failures"] == 0
    assert check(warm, "frame_count")["actual"] == 50 and check(warm, "audio_present")["passed"]
    ranks = checkout.records("flashtalk_resident")
    assert len(ranks) == 4 and {r["env"]["ASCEND_RT_VISIBLE_DEVICES"] for r in ranks} == {"4,5,6,7"}
    assert ranks[0]["env"]["FLASHTALK_FRAME_NUM"] == "29" and ranks[0]["env"]["FLASHTALK_HEIGHT"] == "256"
    assert [r["nproc"] for r in checkout.records("torchrun")] == [4]
    log = job_log(stack, str(second.id))
    assert "--- resident worker log ---" in log and "Generate video chunk-1 done" in log


def test_cancel_acts_at_a_chunk_boundary_and_the_resident_survives(ft: Any) -> None:
    stack, checkout, _ = ft
    long_speech = speech_clip(stack.tmp, 6.0)
    checkout.set_mode("slow_chunks:0.6")
    job_id = submit_a2v(stack, MODEL, long_speech)
    stack.wait(job_id, predicate=lambda j: j.status == "running" and j.progress > 0.2, timeout=60)
    assert stack.client.post(f"/jobs/{job_id}/cancel").status_code == 202
    job = stack.wait(job_id, timeout=30)
    assert job.status == "canceled"
    checkout.set_mode("ok")
    after, data = run(stack, speech_clip(stack.tmp))
    assert after.status == "succeeded" and data["extra"]["pipeline_reused"] is True


def test_out_of_memory_fails_the_job_and_the_next_one_runs(ft: Any) -> None:
    stack, checkout, speech = ft
    checkout.set_mode("oom")
    failed, data = run(stack, speech)
    assert failed.status == "failed" and failed.error_code == "out_of_memory"
    assert data["error"]["code"] == "out_of_memory"
    checkout.set_mode("ok")
    after, data = run(stack, speech)
    assert after.status == "succeeded" and data["extra"]["pipeline_reused"] is True


def test_new_settings_replace_the_resident_and_a_crash_restarts_it(ft: Any) -> None:
    stack, checkout, speech = ft
    before = checkout.records("flashtalk_resident")
    job, data = run(stack, speech, sample_steps=4)
    assert job.status == "succeeded" and data["extra"]["pipeline_reused"] is False
    assert gone([r["pid"] for r in before]), "pipeline_cache_size 1: the old resident is shut down first"
    checkout.set_mode("crash")
    crashed, _ = run(stack, speech, sample_steps=4)
    assert (
        crashed.status == "failed"
        and crashed.error_code == "model_crashed"
        and "139" in (crashed.error_message or "")
    )
    checkout.set_mode("ok")
    again, data = run(stack, speech, sample_steps=4)
    assert again.status == "succeeded" and data["extra"]["pipeline_reused"] is False


def test_a_black_video_with_correct_audio_fails_the_gate(ft: Any) -> None:
    stack, checkout, speech = ft
    checkout.set_mode("black")
    job, data = run(stack, speech)
    assert job.status == "failed" and job.error_code == "validation_failed"
    assert not check(data, "black")["passed"] and check(data, "audio_present")["passed"]


def test_max_chunks_is_checked_against_what_it_asked_for(ft: Any) -> None:
    stack, _, _ = ft
    job, data = run(stack, speech_clip(stack.tmp, 6.0), max_chunks=1)
    assert job.status == "succeeded", job.error_message
    assert check(data, "duration")["expected"] == pytest.approx(28 / 25) and data["frames_generated"] == 28


def test_a_cancel_while_start_is_in_flight_does_not_fail_the_next_job(ft: Any) -> None:
    stack, checkout, speech = ft
    warm, _ = run(stack, speech)
    assert warm.status == "succeeded"
    starts = len([r for r in checkout.records("flashtalk_op") if r["op"] == "start"])
    checkout.set_mode("slow_start:2")
    job_id = submit_a2v(stack, MODEL, speech)
    deadline = time.monotonic() + 60
    while len([r for r in checkout.records("flashtalk_op") if r["op"] == "start"]) == starts:
        assert time.monotonic() < deadline, "the job never sent its start"
        time.sleep(0.05)
    assert stack.client.post(f"/jobs/{job_id}/cancel").status_code == 202  # its start is in flight
    assert stack.wait(job_id, timeout=30).status == "canceled"
    checkout.set_mode("ok")
    after, data = run(stack, speech)
    assert after.status == "succeeded", (after.error_code, after.error_message)
    assert data["extra"]["pipeline_reused"] is True
