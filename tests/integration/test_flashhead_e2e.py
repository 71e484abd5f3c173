"""SoulX-FlashHead through a REAL worker on card group npu:2,3: the stand-in generate_video.py
under the stand-in torchrun, the file gate, the job log, failures, cancel and timeout."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Stack, build_stack
from tests.standins.deploy import FakeCheckout, flashhead_checkout, write_deployment
from tests.standins.jobs import check, gone, job_log, report, speech_clip, submit_a2v

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MODEL = "soulx-flashhead-1.3b"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, FakeCheckout, Path]]:
    tmp = tmp_path_factory.mktemp("flashhead")
    checkout = flashhead_checkout(tmp / "site")
    deployment = write_deployment(
        tmp / "deploy.yaml",
        {
            "reference_models": False,
            "models": {MODEL: checkout.script_entry(cards=2, timeout=10)},
            "workers": [{"devices": "npu:2,3", "models": [MODEL]}],
        },
    )
    stack = build_stack(tmp / "stack", deployment_file=deployment)
    stack.start_worker("fh", devices="npu:2,3")
    yield stack, checkout, speech_clip(tmp)
    stack.close()


@pytest.fixture
def fh(site: tuple[Stack, FakeCheckout, Path]) -> Iterator[tuple[Stack, FakeCheckout, Path]]:
    stack, checkout, speech = site
    checkout.set_mode("ok")
    checkout.record.unlink(missing_ok=True)
    yield site
    checkout.set_mode("ok")


def test_a_job_runs_torchrun_over_the_card_group_and_passes_the_gate(fh: Any) -> None:
    stack, checkout, speech = fh
    job = stack.wait(submit_a2v(stack, MODEL, speech, seed=11), timeout=60)
    assert job.status == "succeeded", (job.error_code, job.error_message)
    (torchrun,) = checkout.records("torchrun")
    assert torchrun["argv"][1:3] == ["--nproc-per-node", "2"]
    assert torchrun["env"]["ASCEND_RT_VISIBLE_DEVICES"] == "2,3" and torchrun["env"]["FAKE_ASCEND_ENV"] == "1"
    ranks = sorted(checkout.records("generate_video.py"), key=lambda r: r["rank"])
    assert [(r["rank"], r["env"]["WORLD_SIZE"]) for r in ranks] == [(0, "2"), (1, "2")]
    env = ranks[0]["env"]
    profile = {k: env[k] for k in env if k.startswith("FLASHHEAD_")}
    assert profile == {
        "FLASHHEAD_SAMPLE_STEPS": "2",
        "FLASHHEAD_VAE_2D_SPLIT": "1",
        "FLASHHEAD_LATENT_CARRY": "0",
        "FLASHHEAD_NPU_FUSION_ATTENTION": "1",
        "FLASHHEAD_DEVICE": "npu",
    }
    argv = ranks[0]["argv"]
    assert argv[argv.index("--base_seed") + 1] == "11" and argv[argv.index("--model_type") + 1] == "pro"
    data = report(stack, str(job.id))
    assert data["execution_mode"] == "subprocess" and data["cold_start"] is True and job.cold_start is True
    assert data["validation"]["mode"] == "file" and data["validation"]["verdict"] == "passed"
    assert (check(data, "width")["actual"], check(data, "fps")["actual"]) == (512, 25.0)
    assert abs(check(data, "duration")["actual"] - 2.0) <= 0.2
    assert data["extra"]["launch"]["nproc_per_node"] == 2 and data["timings"]["process_ms"] > 0
    assert data["device_placement"]["device"] == "npu:2,3"
    view = stack.client.get(f"/jobs/{job.id}").get_json()
    assert view["links"]["log"] == f"/jobs/{job.id}/log"
    log = job_log(stack, str(job.id))
    assert (
        "--nproc-per-node 2" in log and "Generate video chunk-1 done" in log and "finished: succeeded" in log
    )


def test_the_worker_shows_its_cards_and_models(fh: Any) -> None:
    stack, _, _ = fh
    ready = stack.client.get("/readyz").get_json()
    (worker,) = ready["workers"]
    assert worker["devices"] == "npu:2,3" and worker["models"] == [MODEL]
    models = {m["id"]: m for m in stack.client.get("/models").get_json()["models"]}
    assert models[MODEL]["online"] is True and models[MODEL]["maturity"] == "contract-tested"
    assert models[MODEL]["workers"] == [{"id": worker["id"], "devices": "npu:2,3"}]


@pytest.mark.parametrize(
    ("mode", "code", "words"),
    [
        ("exit1", "model_crashed", "exited with status 1"),
        ("missing", "output_missing", "wrote no res_output.mp4"),
        ("black", "validation_failed", "black"),
        ("oom", "out_of_memory", "NPU out of memory"),
    ],
)
def test_failures_end_as_clear_job_errors_and_the_worker_serves_on(
    fh: Any, mode: str, code: str, words: str
) -> None:
    stack, checkout, speech = fh
    checkout.set_mode(mode)
    job = stack.wait(submit_a2v(stack, MODEL, speech), timeout=60)
    assert job.status == "failed" and job.error_code == code and words in (job.error_message or ""), (
        job.error_message
    )
    assert "finished: failed" in job_log(stack, str(job.id)), "the log is kept on failure too"
    if mode == "black":
        assert job.output_key, "a video that fails the gate is kept for inspection"
    checkout.set_mode("ok")
    assert stack.wait(submit_a2v(stack, MODEL, speech), timeout=60).status == "succeeded"


def test_cancel_stops_the_whole_process_group(fh: Any) -> None:
    stack, checkout, speech = fh
    checkout.set_mode("hang")
    job_id = submit_a2v(stack, MODEL, speech)
    deadline = time.monotonic() + 30
    while len(checkout.records("generate_video.py")) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert stack.client.post(f"/jobs/{job_id}/cancel").status_code == 202
    job = stack.wait(job_id, timeout=20)
    assert job.status == "canceled"
    assert gone([r["pid"] for r in checkout.records()]), "torchrun and its ranks must be gone"


def test_a_hung_script_times_out_and_is_killed(fh: Any) -> None:
    stack, checkout, speech = fh
    checkout.set_mode("hang")
    job = stack.wait(submit_a2v(stack, MODEL, speech), timeout=40)
    assert job.status == "failed" and job.error_code == "timeout" and "10 s" in (job.error_message or "")
    assert gone([r["pid"] for r in checkout.records()])
