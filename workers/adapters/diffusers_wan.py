"""Wan2.1 text2video with diffusers: ``WanPipeline.from_pretrained(<local folder>)`` kept resident.

The folder is a diffusers layout (model_index.json, transformer/, vae/, text_encoder/,
tokenizer/, scheduler/), e.g. Wan-AI/Wan2.1-T2V-1.3B-Diffusers downloaded beforehand; it is read
with ``local_files_only`` so a worker never downloads anything. The pipeline lives on the worker's
device in the configured dtype (bfloat16 on cards, float32 on the CPU by default). Denoising steps
are timed and checked for cancel through diffusers' step callback; the decoded frames stream into
the pipeline's encoder and gate. An out-of-memory error empties the allocator's cache so the card
serves the next job.

Verified here on the CPU only, with a tiny randomly initialised Wan pipeline (see tests).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from jobservice.families.diffusers import DiffusersEntry
from workers.adapters.base import (
    Adapter,
    AdapterError,
    DeviceContext,
    JobInputs,
    RunContext,
    RunOutput,
    VideoFormat,
)
from workers.adapters.entries import deployment_entry
from workers.adapters.processes.memory import (
    MemoryReader,
    check_budget,
    is_out_of_memory,
    read_free_memory,
    release_cached_memory,
)

EMIT_BATCH = 16  # frames per write to the encoder


@dataclass
class WanHandle:
    """The resident pipeline."""

    pipe: Any
    entry: DiffusersEntry
    device: DeviceContext
    dtype: str


def resolve_dtype(name: str, device: DeviceContext) -> str:
    """``auto``: bfloat16 on cards (Wan's published dtype), float32 on the CPU (bf16 is slow there)."""
    if name != "auto":
        return name
    return "float32" if device.kind == "cpu" else "bfloat16"


class DiffusersWanAdapter(Adapter):
    """A resident WanPipeline on the worker's device."""

    model_ids = ()
    execution_mode = "resident"

    def __init__(self, *, memory_reader: MemoryReader | None = None) -> None:
        self._memory_reader = memory_reader or (lambda device: read_free_memory(device, in_process=True))

    def load(self, device: DeviceContext, params: dict[str, Any] | None = None) -> WanHandle:
        """Check the memory budget, then load the folder onto the device."""
        entry, _ = deployment_entry("diffusers", params, DiffusersEntry)
        check_budget(
            model_id=str(entry.path.name),
            need_gb=entry.min_memory_gb,
            scope=entry.memory_scope,
            device=device,
            reader=self._memory_reader,
        )
        import torch

        if device.kind == "npu":
            import torch_npu  # noqa: F401 - registers the "npu" device with torch

        from diffusers import WanPipeline

        dtype = resolve_dtype(entry.dtype, device)
        try:
            pipe = WanPipeline.from_pretrained(
                str(entry.path), dtype=getattr(torch, dtype), local_files_only=True
            )
            pipe.to(device.torch_device)
        except Exception as exc:
            if is_out_of_memory(str(exc)):
                release_cached_memory(device)
                raise AdapterError("out_of_memory", f"Loading {entry.path} ran out of memory: {exc}") from exc
            raise
        pipe.set_progress_bar_config(disable=True)
        if entry.enable_vae_tiling:
            pipe.vae.enable_tiling()
        return WanHandle(pipe=pipe, entry=entry, device=device, dtype=dtype)

    def unload(self, handle: Any) -> None:
        """Drop the pipeline and the allocator's cache."""
        wan: WanHandle = handle
        wan.pipe = None
        release_cached_memory(wan.device)

    def run(self, handle: Any, inputs: JobInputs, ctx: RunContext) -> RunOutput:
        """Denoise (timing and checking cancel per step), decode, stream the frames."""
        import torch

        wan: WanHandle = handle
        p = inputs.params
        steps = int(p["num_inference_steps"])
        ctx.start_video(
            VideoFormat(width=p["width"], height=p["height"], fps=p["fps"], num_frames=p["num_frames"])
        )
        # A CPU generator: the same seed gives the same video on any device.
        generator = torch.Generator(device="cpu").manual_seed(int(p["seed"]))
        clock = {"last": time.perf_counter()}

        def on_step(pipe: Any, index: int, timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
            now = time.perf_counter()
            ctx.record_step((now - clock["last"]) * 1000)
            clock["last"] = now
            ctx.progress(0.9 * (index + 1) / steps, "denoising")
            ctx.check_cancel()  # raises out of the pipeline call at a step boundary
            return tensors

        started = time.perf_counter()
        try:
            with torch.inference_mode():
                result = wan.pipe(
                    prompt=p["prompt"],
                    negative_prompt=p.get("negative_prompt") or None,
                    height=p["height"],
                    width=p["width"],
                    num_frames=p["num_frames"],
                    num_inference_steps=steps,
                    guidance_scale=float(p["guidance_scale"]),
                    generator=generator,
                    output_type="np",
                    max_sequence_length=wan.entry.max_sequence_length,
                    callback_on_step_end=on_step,
                )
        except torch.OutOfMemoryError as exc:
            release_cached_memory(wan.device)
            raise AdapterError(
                "out_of_memory", f"Wan2.1 ran out of memory on {wan.device.label}: {exc}"
            ) from exc
        except RuntimeError as exc:
            if not is_out_of_memory(str(exc)):
                raise
            release_cached_memory(wan.device)
            raise AdapterError(
                "out_of_memory", f"Wan2.1 ran out of memory on {wan.device.label}: {exc}"
            ) from exc
        ctx.add_timing("pipeline_ms", (time.perf_counter() - started) * 1000)
        video = np.asarray(result.frames[0])  # [F, H, W, 3] floats in 0..1
        frames = (np.clip(video, 0.0, 1.0) * 255.0).round().astype(np.uint8)
        for start in range(0, len(frames), EMIT_BATCH):
            ctx.emit_frames(frames[start : start + EMIT_BATCH])
        ctx.progress(1.0)
        ctx.add_extra("diffusers", {"dtype": wan.dtype, "path": str(wan.entry.path)})
        return RunOutput(frames_generated=len(frames), media_duration_s=len(frames) / float(p["fps"]))
