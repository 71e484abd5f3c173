"""Adapter of the built-in reference text2video model (``reference-t2v``).

Runs the small latent diffusion model of :mod:`workers.adapters.reference.t2v_model`: encode the
prompt and negative prompt, denoise seeded noise for ``num_inference_steps`` DDIM steps with
classifier-free guidance, then decode the latent in temporal chunks, streaming each chunk to the
encoder as soon as it is ready.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from workers.adapters.base import Adapter, DeviceContext, JobInputs, RunContext, RunOutput, VideoFormat
from workers.adapters.reference.common import Stopwatch, resolve_device, to_uint8_frames
from workers.adapters.reference.t2v_model import VAE_SCALE, ReferenceT2VModel
from workers.adapters.reference.t2v_prior import CODE_DIM, LATENT_CHANNELS, SceneShape

DECODE_CHUNK_FRAMES = 16
DENOISE_SHARE = 0.85  # progress fraction given to the denoising loop; decoding takes the rest


class ReferenceT2VAdapter(Adapter):
    """Text -> video with a real denoising loop; deterministic for (prompt, negative prompt, seed)."""

    model_ids = ("reference-t2v",)

    def load(self, device: DeviceContext, params: dict[str, Any] | None = None) -> ReferenceT2VModel:
        """Build the fixed weights on the worker's device (once per worker process)."""
        return ReferenceT2VModel(resolve_device(device.torch_device))

    def run(self, handle: Any, inputs: JobInputs, ctx: RunContext) -> RunOutput:
        """Generate ``num_frames`` frames of ``width`` x ``height`` and stream them through ``ctx``."""
        model: ReferenceT2VModel = handle
        p = inputs.params
        width, height, num_frames = int(p["width"]), int(p["height"]), int(p["num_frames"])
        fps, steps = float(p["fps"]), int(p["num_inference_steps"])
        guidance, seed = float(p["guidance_scale"]), int(p["seed"])
        ctx.start_video(VideoFormat(width=width, height=height, fps=fps, num_frames=num_frames))

        with torch.inference_mode():
            clock = Stopwatch(model.device)
            shape = SceneShape(num_frames, height // VAE_SCALE, width // VAE_SCALE, fps)
            # Everything random comes from the seed, drawn on the host so that a seed gives the
            # same start on every device: first the composition code, then the latent noise.
            gen = torch.Generator().manual_seed(seed)
            code = torch.randn(CODE_DIM, generator=gen)
            noise = torch.randn(1, LATENT_CHANNELS, shape.frames, shape.height, shape.width, generator=gen)
            noise = noise.to(model.device)
            branches = (
                model.branch(str(p["prompt"]), code, shape),
                model.branch(str(p.get("negative_prompt") or ""), code, shape),
            )
            band_energy = model.noise_energy(noise)
            ctx.add_timing("text_encode_ms", clock.lap())
            ctx.check_cancel()

            x = noise
            started = time.perf_counter()
            for i, (t, a_next) in enumerate(model.timesteps(steps)):
                x = model.guided_step(x, t, a_next, branches, band_energy, guidance)
                ctx.record_step(clock.lap())
                ctx.progress(DENOISE_SHARE * (i + 1) / steps, "denoise")
                ctx.check_cancel()
            ctx.add_timing("denoise_ms", (time.perf_counter() - started) * 1000.0)

            started = time.perf_counter()
            latent = x[0].transpose(0, 1)  # [T, C, h, w]: frames become the decoder's batch
            for start in range(0, num_frames, DECODE_CHUNK_FRAMES):
                stop = min(num_frames, start + DECODE_CHUNK_FRAMES)
                ctx.emit_frames(to_uint8_frames(model.decode(latent[start:stop])))
                ctx.progress(DENOISE_SHARE + (1 - DENOISE_SHARE) * stop / num_frames, "decode")
                ctx.check_cancel()
            ctx.add_timing("decode_ms", (time.perf_counter() - started) * 1000.0)

        return RunOutput(
            frames_generated=num_frames,
            media_duration_s=num_frames / fps,
            extra={
                "latent_shape": [LATENT_CHANNELS, shape.frames, shape.height, shape.width],
                "sampler": "ddim-trailing-zero-snr",
                "guidance_scale": guidance,
                "seed": seed,
                "device": str(model.device),
            },
        )
