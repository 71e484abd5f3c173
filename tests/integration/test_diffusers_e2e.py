"""Wan2.1 from a local diffusers folder in a REAL worker process on the CPU: a tiny, randomly
initialised WanPipeline built here from small configs (no downloads) runs through the whole job
path: load once, denoise step by step, stream frames, pass the gate. WanPipeline hands over every
frame at once, after its last step, so its running jobs say that no preview will exist."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jobservice.jobs.previews import NO_PREVIEW_BACKEND
from tests.integration.conftest import Stack, build_stack
from tests.standins.deploy import ROOT, write_deployment
from tests.standins.jobs import report

pytestmark = [pytest.mark.integration, pytest.mark.slow]
MODEL = "wan2.1-t2v-1.3b"
ENDED = ("succeeded", "failed", "canceled")
PARAMS = {"prompt": "a red kite over the sea", "width": 64, "height": 48, "num_frames": 17, "fps": 8}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("diffusers")
    folder = tmp / "Wan2.1-T2V-tiny-Diffusers"
    subprocess.run(
        [sys.executable, "-m", "tests.standins.tiny_wan", str(folder)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    deployment = write_deployment(
        tmp / "deploy.yaml",
        {
            "default_models": {"text2video": "wan2.1-t2v-1.3b"},
            "models": {
                "wan2.1-t2v-1.3b": {
                    "backend": "diffusers",
                    "path": folder.name,  # relative to the deployment file
                    "defaults": {"num_inference_steps": 4, "guidance_scale": 5.0},
                }
            },
            "workers": [{"devices": "cpu", "models": ["wan2.1-t2v-1.3b"]}],
        },
    )
    built = build_stack(tmp / "stack", deployment_file=deployment)
    built.start_worker("wan", devices="cpu", extra_env={"HF_HUB_OFFLINE": "1"})
    yield built
    built.close()


def test_a_tiny_random_wan_pipeline_runs_end_to_end(stack: Stack) -> None:
    first = stack.wait(stack.submit({"task": "text2video", **PARAMS, "seed": 3}), timeout=240)
    assert first.status == "succeeded", (first.error_code, first.error_message)
    assert first.model == "wan2.1-t2v-1.3b", "the deployment's default for text2video"
    data = report(stack, str(first.id))
    assert data["validation"]["verdict"] == "passed" and data["validation"]["mode"] == "streamed"
    assert data["frames_generated"] == 17 and len(data["step_ms"]) == 4
    assert data["extra"]["diffusers"]["dtype"] == "float32" and data["cold_start"] is True
    assert data["execution_mode"] == "resident" and "torch" in data["versions"]
    second = stack.wait(stack.submit({"model": "wan2.1-t2v-1.3b", **PARAMS, "seed": 3}), timeout=240)
    assert second.status == "succeeded" and second.cold_start is False, "the pipeline stays loaded"
    again = report(stack, str(second.id))
    assert again["artifacts"][0]["sha256"] == data["artifacts"][0]["sha256"], (
        "same prompt and seed, same video"
    )


def test_a_running_wan_job_says_no_preview_will_exist(stack: Stack) -> None:
    """Previews are on (the default interval), yet the back end has none to give: the catalog and
    the running job say so, the preview answers no_preview, and nothing is published."""
    models = {m["id"]: m for m in stack.client.get("/models").get_json()["models"]}
    assert models[MODEL]["previews"] is False and "No previews" in models[MODEL]["summary"]
    # More steps than the default four: a second or more of denoising to be seen running, on any host.
    job_id = stack.submit({"model": MODEL, **PARAMS, "seed": 5, "num_inference_steps": 12})
    views: list[dict[str, Any]] = []
    refusals: list[str] = []
    deadline = time.monotonic() + 240
    while not views or views[-1]["status"] not in ENDED:
        assert time.monotonic() < deadline, views[-1]
        view = stack.client.get(f"/jobs/{job_id}").get_json()
        views.append(view)
        if view["status"] == "running" and (view["preview"] or {}).get("state") == "none":
            answer = stack.client.get(f"/jobs/{job_id}/preview")
            if stack.client.get(f"/jobs/{job_id}").get_json()["status"] == "running":
                # Asked while it ran: refused because the back end hands over a finished video.
                assert answer.status_code == 404, answer.status_code
                refusals.append(answer.get_json()["error"]["code"])
        time.sleep(0.05)
    final = views[-1]
    assert final["status"] == "succeeded", final.get("error")
    running = [v for v in views if v["status"] == "running"]
    states = [(v["preview"] or {}).get("state") for v in running]
    assert states and states[-1] == "none" and "ready" not in states, states
    assert running[-1]["preview"]["message"] == NO_PREVIEW_BACKEND, (
        "the back end's reason, not 'previews off'"
    )
    assert refusals and set(refusals) == {"no_preview"}, refusals
    assert all("preview" not in v["links"] for v in views)
    # Ended: no preview, and the preview's address says the video replaced it.
    assert final["preview"] is None and "video" in final["links"]
    gone = stack.client.get(f"/jobs/{job_id}/preview")
    assert gone.status_code == 404 and gone.get_json()["error"]["code"] == "preview_replaced"
    assert "preview" not in report(stack, job_id)["extra"]
    keys = [i.key for i in stack.services.store.list(f"jobs/{job_id}/")]
    assert f"jobs/{job_id}/output.mp4" in keys and not any("/preview-" in k for k in keys), keys
