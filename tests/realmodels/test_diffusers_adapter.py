"""The diffusers Wan2.1 adapter with a tiny random pipeline, on the CPU, in this process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobservice.families.diffusers import DiffusersWanParams
from jobservice.fleet.placement import parse_devices
from tests.fakes.context import RecordingContext
from tests.realmodels.conftest import deployed_spec
from tests.standins.deploy import ROOT
from workers.adapters.base import AdapterError, JobCanceled, JobInputs
from workers.adapters.processes.memory import CardMemory


@pytest.fixture(scope="session")
def tiny_wan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built in a child process, so this test process's warnings filter never sees diffusers' imports."""
    folder = tmp_path_factory.mktemp("tiny-wan") / "Wan2.1-T2V-tiny-Diffusers"
    subprocess.run(
        [sys.executable, "-m", "tests.standins.tiny_wan", str(folder)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return folder


def params(**overrides: Any) -> dict[str, Any]:
    base = {"prompt": "a red kite over the sea", "width": 64, "height": 48, "num_frames": 9, "fps": 8}
    return DiffusersWanParams.model_validate(
        {**base, "num_inference_steps": 3, "seed": 5, **overrides}
    ).model_dump(mode="json")


def test_budget_fails_fast_without_loading(tmp_path: Path, tiny_wan: Path, ctx: RecordingContext) -> None:
    from workers.adapters.diffusers_wan import DiffusersWanAdapter

    spec = deployed_spec(
        tmp_path, "wan-tiny", {"backend": "diffusers", "path": str(tiny_wan), "min_memory_gb": 16}
    )
    adapter = DiffusersWanAdapter(memory_reader=lambda device: [CardMemory("cuda", 0, free_mb=4096)])
    with pytest.raises(AdapterError) as failure:
        adapter.load(parse_devices("cuda:0"), spec.config)
    assert failure.value.code == "insufficient_device_memory" and "16 GB" in failure.value.message


def test_generates_frames_step_by_step_and_cancels_at_a_step(
    tmp_path: Path, tiny_wan: Path, ctx: RecordingContext
) -> None:
    from workers.adapters.diffusers_wan import DiffusersWanAdapter

    spec = deployed_spec(tmp_path, "wan-tiny", {"backend": "diffusers", "path": str(tiny_wan)})
    adapter = DiffusersWanAdapter()
    handle = adapter.load(parse_devices("cpu"), spec.config)
    assert handle.dtype == "float32"
    inputs = JobInputs(job_id="j", model="wan-tiny", params=params(), files={}, scratch=ctx.scratch)
    out = adapter.run(handle, inputs, ctx)
    assert out.frames_generated == 9 == ctx.frame_count and len(ctx.steps) == 3
    video = ctx.frames
    assert video.shape == (9, 48, 64, 3)
    assert video.mean() > 20, "random weights still give a picture, not black"
    assert np.abs(np.diff(video.astype(int), axis=0)).mean() > 1, "and frames that change"
    again = RecordingContext(ctx.scratch)
    adapter.run(handle, inputs, again)
    assert np.array_equal(again.frames, video), "same seed, same frames"
    stopped = RecordingContext(ctx.scratch, cancel_when=lambda c: len(c.steps) >= 2)
    with pytest.raises(JobCanceled):
        adapter.run(handle, inputs, stopped)
    assert len(stopped.steps) == 2 and stopped.frame_count == 0
