"""SoulX-FlashHead 1.3B: the checkout's ``generate_video.py`` run once per job (python or torchrun).

Defaults are the seed document's 910B quality profile (pro, stream, 2 steps, VAE 2D split on,
latent carry off, fusion attention on); the worker side is ``workers/adapters/soulx/flashhead.py``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from jobservice.catalog import ModelParams, ValidationPolicy
from jobservice.families.entry import ScriptEntry
from jobservice.families.family import Family, register


class FlashHeadEntry(ScriptEntry):
    """SoulX-FlashHead: ``generate_video.py`` once per job."""

    backend: Literal["flashhead"]
    script: str = Field(default="generate_video.py", description="Relative to repo.")


class FlashHeadParams(ModelParams):
    """SoulX-FlashHead: a portrait and speech to a 512x512, 25 fps talking head."""

    seed: int = Field(default=42, ge=0, le=2**32 - 1, description="Passed as --base_seed.")
    model_type: Literal["pro", "lite"] = Field(
        default="pro", description="--model_type: Model_Pro or Model_Lite."
    )
    audio_encode_mode: Literal["stream", "once"] = Field(
        default="stream", description="--audio_encode_mode: embed audio per chunk (stream) or all at once."
    )
    sample_steps: int = Field(
        default=2, ge=1, le=50, description="FLASHHEAD_SAMPLE_STEPS (NPU adaptation; upstream fixes 4)."
    )
    vae_2d_split: bool = Field(default=True, description="FLASHHEAD_VAE_2D_SPLIT (NPU adaptation).")
    latent_carry: bool = Field(
        default=False,
        description="FLASHHEAD_LATENT_CARRY: faster, but drifted in style on 910B; off by default.",
    )
    npu_fusion_attention: bool = Field(
        default=True, description="FLASHHEAD_NPU_FUSION_ATTENTION (NPU adaptation)."
    )


# FlashHead generates whole 28-frame slices, pads the last one with silence and muxes with
# ``ffmpeg -c:v copy -shortest``; with stream copy -shortest stops on packet boundaries, so the
# video can run a few frames past the audio (and AAC ends on 1024-sample frames).
FAMILY = register(
    Family(
        name="flashhead",
        entry=FlashHeadEntry,
        params=lambda _entry, _task: FlashHeadParams,
        known_models=("soulx-flashhead-1.3b",),
        adapter="workers.adapters.soulx.flashhead:FlashHeadAdapter",
        task="audio2video",
        title="SoulX-FlashHead 1.3B",
        summary="SoulX-FlashHead's generate_video.py run per job (python or torchrun over the worker's "
        "cards): 512x512, 25 fps, the audio's duration.",
        execution_mode="subprocess",
        devices=("cuda", "npu"),
        requires=(),
        min_memory_gb=48.0,  # OmniRT's resource_hint for 910B2, aggregate over the cards
        policy=ValidationPolicy(frame_tolerance=4, duration_tolerance_seconds=0.2),
    )
)
