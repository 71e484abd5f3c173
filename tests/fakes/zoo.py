"""A zoo of tiny fake models, each with one failure mode, run by REAL worker processes in tests.

They need no torch: frames are numpy patterns. Enabled with
``JOBSERVICE_CATALOG_EXTRA='["tests.fakes.zoo:specs"]'``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from pydantic import Field

from jobservice.catalog import ModelParams, ModelSpec, ValidationPolicy
from workers.adapters.base import (
    Adapter,
    AdapterError,
    DeviceContext,
    JobInputs,
    RunContext,
    RunOutput,
    VideoFormat,
)


class FakeParams(ModelParams):
    """Parameters every fake model takes."""

    prompt: str = "fake"
    num_frames: int = Field(default=24, ge=2, le=2000)
    fps: int = Field(default=12, ge=1, le=60)
    size: int = Field(default=64, ge=16, le=512, multiple_of=16)
    step_seconds: float = Field(default=0.0, ge=0, le=5)


class SeededParams(FakeParams):
    """A fake with a seed: its video is black for every seed below ``good_from_seed``."""

    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)
    good_from_seed: int = Field(default=0, ge=0, le=2**32)


def moving(frame_index: int, size: int) -> np.ndarray:
    """A bright frame with a bar that moves every frame (never black, never frozen)."""
    frame = np.full((size, size, 3), 140, dtype=np.uint8)
    x = (frame_index * 3) % size
    frame[:, x : x + 4] = (250, 40, 40)
    frame[(frame_index * 5) % size, :] = (40, 250, 40)
    return frame


class FakeAdapter(Adapter):
    """Streams a moving pattern; ``behaviour`` picks the failure."""

    model_ids = ()

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour

    def load(self, device: DeviceContext, params: dict[str, Any] | None = None) -> Any:
        """A handle at once, or after ``load_sleep`` seconds (the heavy models' cold start)."""
        if self.behaviour == "raises_in_load":
            raise RuntimeError("fake load failure")
        time.sleep(float((params or {}).get("load_sleep", 0.0)))
        return {"pid": os.getpid()}

    def run(self, handle: Any, inputs: JobInputs, ctx: RunContext) -> RunOutput:
        p = inputs.params
        n, size, fps = p["num_frames"], p["size"], p["fps"]
        announced = n
        ctx.start_video(VideoFormat(width=size, height=size, fps=fps, num_frames=announced))
        emitted = n - 6 if self.behaviour == "short" else n
        for i in range(emitted):
            ctx.check_cancel()
            if p["step_seconds"]:
                time.sleep(p["step_seconds"])
            ctx.record_step(p["step_seconds"] * 1000)
            if self.behaviour == "raises_mid_run" and i == n // 2:
                raise RuntimeError("fake model crashed mid-run")
            if self.behaviour == "adapter_error" and i == n // 2:
                raise AdapterError("out_of_memory", "The fake model ran out of device memory.")
            if self.behaviour == "exits" and i == n // 2:
                os._exit(3)
            if self.behaviour == "black" or (self.behaviour == "seeded" and p["seed"] < p["good_from_seed"]):
                frame = np.zeros((size, size, 3), dtype=np.uint8)
            elif self.behaviour == "frozen":
                frame = moving(0, size)
            else:
                frame = moving(i, size)
            ctx.emit_frames(frame)
            ctx.progress((i + 1) / n)
        return RunOutput(frames_generated=emitted, media_duration_s=announced / fps)


def _spec(name: str, behaviour: str, **extra: Any) -> ModelSpec:
    return ModelSpec(
        id=f"fake-{name}",
        task="text2video",
        title=f"Fake ({behaviour})",
        summary=f"Test model whose failure mode is: {behaviour}.",
        maturity="reference",
        params=extra.pop("params", FakeParams),
        adapter=f"tests.fakes.zoo:{behaviour.title().replace('_', '')}Adapter",
        requires=("numpy",),
        **extra,
    )


def _adapter_class(behaviour: str) -> type[FakeAdapter]:
    return type(
        f"{behaviour.title().replace('_', '')}Adapter",
        (FakeAdapter,),
        {"__init__": lambda self: FakeAdapter.__init__(self, behaviour)},
    )


BEHAVIOURS = [
    "good",
    "black",
    "frozen",
    "short",
    "raises_mid_run",
    "adapter_error",
    "exits",
    "raises_in_load",
    "slow",
    "heavy",
    "seeded",
]
for _b in BEHAVIOURS:
    globals()[f"{_b.title().replace('_', '')}Adapter"] = _adapter_class(_b)


def specs() -> list[ModelSpec]:
    """The zoo's catalog entries."""
    strict = ValidationPolicy(max_black_seconds=0.0, max_freeze_seconds=0.0, freeze_min_seconds=1.0)
    plain = [b for b in BEHAVIOURS if b not in {"slow", "heavy", "seeded"}]
    out = [_spec(b.replace("_", "-"), b, validation=strict) for b in plain]
    # A model with a seed whose video is black below a chosen seed: retries of a failed gate.
    out.append(_spec("seeded", "seeded", validation=strict, params=SeededParams))
    out.append(_spec("slow", "slow", timeout_seconds=4.0))
    # Models that each need 3 GB and take 2 s to load: a 4 GB card group holds one at a time
    # (tests/integration/test_fleet_e2e.py), a 7 GB one two (tests/integration/test_dispatch_e2e.py).
    heavy = {"min_memory_gb": 3.0, "load_seconds": 2.0, "seconds_per_output_second": 0.45}
    out += [_spec(f"heavy-{x}", "heavy", config={"load_sleep": 2.0}, **heavy) for x in ("a", "b", "c")]
    return out
