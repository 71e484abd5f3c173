"""Wan2.1 from a local diffusers folder in a REAL worker process on the CPU: a tiny, randomly
initialised WanPipeline built here from small configs (no downloads) runs through the whole job
path: load once, denoise step by step, stream frames, pass the gate."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.integration.conftest import Stack, build_stack
from tests.standins.deploy import ROOT, write_deployment
from tests.standins.jobs import report

pytestmark = [pytest.mark.integration, pytest.mark.slow]
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
