"""SoulX-FlashTalk 14B: a resident worker per card group keeps the model loaded; jobs go chunk by chunk.

Presets: ``realtime`` (the seed benchmark's speed-first profile) and ``quality`` (upstream's
infer_params.yaml); the worker side is ``workers/adapters/soulx/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from jobservice.catalog import ModelParams, ValidationPolicy
from jobservice.families.entry import ScriptEntry, resolve_path
from jobservice.families.family import Family, register


class FlashTalkEntry(ScriptEntry):
    """SoulX-FlashTalk: a resident worker per card group (workers/adapters/soulx/flashtalk_resident.py)."""

    backend: Literal["flashtalk"]
    resident_script: Path | None = Field(
        default=None, description="Speaks the resident protocol; default: the one shipped with jobservice."
    )
    pipeline_cache_size: int = Field(default=1, ge=1, le=8, description="Resident pipelines kept (LRU).")
    startup_timeout: float = Field(default=900.0, gt=0, description="Seconds to load the model.")
    chunk_timeout: float = Field(default=600.0, gt=0, description="Seconds one chunk may take.")
    cancel_grace: float = Field(default=30.0, ge=0, description="Wait for an in-flight chunk on cancel.")
    cpu_offload: bool = False

    @field_validator("resident_script", mode="before")
    @classmethod
    def _resident(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_path(value, info)

    def required_paths(self) -> list[tuple[str, str]]:
        """As for FlashHead, plus a custom resident script."""
        found = super().required_paths()
        if self.resident_script is not None:
            found.append(("resident_script", str(self.resident_script)))
        return found


FLASHTALK_DEFAULT_PROMPT = (
    "A person is talking. Only the foreground characters are moving, the background remains static."
)
# "realtime" is the seed benchmark's speed-first profile (910B2 x8: ~0.89 s per steady chunk);
# "quality" is upstream's infer_params.yaml.
FLASHTALK_PRESETS: dict[str, dict[str, Any]] = {
    "realtime": {
        "height": 704,
        "width": 416,
        "frame_num": 29,
        "motion_frames_num": 1,
        "sample_steps": 2,
        "color_correction_strength": 0.0,
    },
    "quality": {
        "height": 768,
        "width": 448,
        "frame_num": 33,
        "motion_frames_num": 5,
        "sample_steps": 4,
        "color_correction_strength": 1.0,
    },
}
# Settings read when the FlashTalk process starts (FLASHTALK_* variables): changing one needs
# another resident pipeline. Everything else (image, audio, prompt, seed) is per request.
FLASHTALK_RELOAD_KEYS = (
    "height",
    "width",
    "frame_num",
    "motion_frames_num",
    "sample_steps",
    "color_correction_strength",
)


class FlashTalkParams(ModelParams):
    """SoulX-FlashTalk: a portrait and speech to a talking video, from a preset plus overrides."""

    preset: Literal["realtime", "quality"] = Field(
        default="realtime", description="realtime: 704x416, 29/1 frames, 2 steps; quality: upstream 768x448."
    )
    prompt: str = Field(default=FLASHTALK_DEFAULT_PROMPT, min_length=1, max_length=2000)
    seed: int = Field(default=9999, ge=0, le=2**32 - 1, description="base_seed of get_base_data.")
    sample_steps: int | None = Field(default=None, ge=1, le=50, description="Default: the preset's.")
    frame_num: int | None = Field(default=None, ge=5, le=129, description="Frames per chunk (4k+1).")
    motion_frames_num: int | None = Field(default=None, ge=1, le=33, description="Carried frames (4k+1).")
    height: int | None = Field(default=None, ge=256, le=1280, multiple_of=16)
    width: int | None = Field(default=None, ge=256, le=1280, multiple_of=16)
    color_correction_strength: float | None = Field(default=None, ge=0.0, le=1.0)
    max_chunks: int | None = Field(
        default=None, ge=1, le=100_000, description="Stop after this many chunks (benchmarks)."
    )

    @model_validator(mode="after")
    def _resolve_preset(self) -> FlashTalkParams:
        for key, value in FLASHTALK_PRESETS[self.preset].items():
            if getattr(self, key) is None:
                setattr(self, key, value)
        assert self.frame_num is not None and self.motion_frames_num is not None
        if self.frame_num % 4 != 1 or self.motion_frames_num % 4 != 1:
            raise ValueError("frame_num and motion_frames_num must be 4k+1 (the VAE's time stride is 4)")
        if self.motion_frames_num >= self.frame_num:
            raise ValueError("motion_frames_num must be smaller than frame_num")
        return self


# Through our resident worker we trim the padded last chunk and mux ourselves, so the default
# (exact) tolerances hold.
FAMILY = register(
    Family(
        name="flashtalk",
        entry=FlashTalkEntry,
        params=lambda _entry, _task: FlashTalkParams,
        known_models=("soulx-flashtalk-14b",),
        adapter="workers.adapters.soulx.flashtalk:FlashTalkAdapter",
        task="audio2video",
        title="SoulX-FlashTalk 14B",
        summary="SoulX-FlashTalk kept loaded in a resident worker per card group and fed chunk by chunk; "
        "presets: realtime (704x416, 29/1 frames, 2 steps) and quality.",
        execution_mode="persistent_worker",
        previews=True,  # its adapter streams each chunk's frames
        devices=("cuda", "npu"),
        requires=(),
        min_memory_gb=64.0,  # OmniRT's resource_hint, aggregate
        policy=ValidationPolicy(),
    )
)
