"""A fake model for batch tests: deterministic frames, a controllable (and noisy) step time.

``fake-bench`` sleeps ``step_ms`` per frame, stretched by a random factor in 1 ± ``jitter``
(fresh randomness every run: that is the noise a batch must not mistake for a regression), and
draws frames that depend only on ``seed``. A worker started with ``BENCH_SLOWDOWN=<factor>``
plays a slower model: each frame's whole work is stretched by the factor. Registered with
``tests.fakes.bench:specs``.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import numpy as np
from pydantic import Field

from jobservice.catalog import ModelParams, ModelSpec
from tests.fakes.zoo import moving
from workers.adapters.base import Adapter, DeviceContext, JobInputs, RunContext, RunOutput, VideoFormat


class BenchParams(ModelParams):
    """Parameters of the bench fake."""

    prompt: str = "bench"
    num_frames: int = Field(default=24, ge=2, le=2000)
    fps: int = Field(default=12, ge=1, le=60)
    size: int = Field(default=64, ge=16, le=512, multiple_of=16)
    step_ms: float = Field(default=10.0, ge=0, le=2000)
    jitter: float = Field(default=0.0, ge=0, le=0.9)
    seed: int = Field(default=0, ge=0)


class BenchAdapter(Adapter):
    """Streams seed-dependent frames at a controlled pace."""

    model_ids = ("fake-bench",)

    def load(self, device: DeviceContext, params: dict[str, Any] | None = None) -> Any:
        return {}

    def run(self, handle: Any, inputs: JobInputs, ctx: RunContext) -> RunOutput:
        p = inputs.params
        n, size, fps = p["num_frames"], p["size"], p["fps"]
        noise = random.Random()  # noqa: S311 - noise, not security
        slowdown = float(os.environ.get("BENCH_SLOWDOWN", "1.0"))
        ctx.start_video(VideoFormat(width=size, height=size, fps=fps, num_frames=n))
        for i in range(n):
            ctx.check_cancel()
            started = time.perf_counter()
            time.sleep(p["step_ms"] / 1000 * (1 + noise.uniform(-p["jitter"], p["jitter"])))
            frame = moving(i + p["seed"], size)
            frame[0, 0] = (p["seed"] % 256, 0, 0)
            ctx.emit_frames(np.ascontiguousarray(frame))
            if slowdown > 1.0:
                time.sleep((slowdown - 1.0) * (time.perf_counter() - started))
            ctx.record_step((time.perf_counter() - started) * 1000)
            ctx.progress((i + 1) / n)
        return RunOutput(frames_generated=n, media_duration_s=n / fps)


def specs() -> list[ModelSpec]:
    """The bench fake's catalog entry."""
    return [
        ModelSpec(
            id="fake-bench",
            task="text2video",
            title="Fake bench model",
            summary="Deterministic frames, a controllable noisy pace (batch tests).",
            maturity="reference",
            params=BenchParams,
            adapter="tests.fakes.bench:BenchAdapter",
            requires=("numpy",),
        )
    ]
