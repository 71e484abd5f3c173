"""The built-in reference models: real torch compute on the worker's device (CPU, CUDA or NPU).

They demonstrate the pipeline honestly and are labelled ``maturity: reference``; they are not
FlashTalk or Wan2.1. Their adapters are ``workers/adapters/reference/``.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from jobservice.catalog import ModelParams, ModelSpec


class ReferenceT2VParams(ModelParams):
    """Parameters of the built-in reference text2video model."""

    prompt: str = Field(min_length=1, max_length=2000, description="What the clip should show.")
    negative_prompt: str = Field(default="", max_length=2000, description="What the clip should avoid.")
    width: int = Field(default=512, ge=64, le=1280, multiple_of=16, description="Pixels; a multiple of 16.")
    height: int = Field(default=320, ge=64, le=1280, multiple_of=16, description="Pixels; a multiple of 16.")
    num_frames: int = Field(default=49, ge=8, le=241, description="Frames to generate.")
    fps: int = Field(default=16, ge=4, le=60, description="Playback frame rate of the clip.")
    num_inference_steps: int = Field(default=20, ge=1, le=100, description="Denoising steps.")
    guidance_scale: float = Field(default=5.0, ge=0.0, le=20.0, description="Classifier-free guidance scale.")
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1, description="Random seed; chosen if absent.")

    @model_validator(mode="after")
    def _area_cap(self) -> ReferenceT2VParams:
        if self.width * self.height > 1280 * 720:
            raise ValueError("width x height must not exceed 1280 x 720 pixels")
        return self


class ReferenceTalkingHeadParams(ModelParams):
    """Parameters of the built-in reference talking-head (audio2video) model."""

    seed: int = Field(default=42, ge=0, le=2**32 - 1, description="Seed of head motion and blinks.")
    fps: int = Field(default=25, ge=10, le=60, description="Output frame rate.")
    max_size: int = Field(
        default=512, ge=128, le=1280, multiple_of=16, description="Longest output side; a multiple of 16."
    )
    motion_scale: float = Field(default=1.0, ge=0.0, le=3.0, description="Strength of head motion.")
    mouth_scale: float = Field(default=1.0, ge=0.0, le=3.0, description="Strength of mouth opening.")
    chunk_frames: int = Field(default=33, ge=8, le=129, description="Frames per generated chunk.")
    motion_frames: int = Field(default=5, ge=0, le=16, description="Frames carried into the next chunk.")

    @model_validator(mode="after")
    def _chunking(self) -> ReferenceTalkingHeadParams:
        if self.motion_frames >= self.chunk_frames:
            raise ValueError("motion_frames must be smaller than chunk_frames")
        return self


REFERENCE_T2V = ModelSpec(
    id="reference-t2v",
    task="text2video",
    title="Reference text2video (built in)",
    summary=(
        "A small built-in diffusion model: a real denoising loop with classifier-free guidance, "
        "conditioned on the prompt and seed. It demonstrates the pipeline honestly; it is not Wan2.1."
    ),
    maturity="reference",
    params=ReferenceT2VParams,
    adapter="workers.adapters.reference.t2v:ReferenceT2VAdapter",
    requires=("torch", "numpy"),
    # Its decoder streams the clip 16 frames at a time once denoising ends (the whole clip is
    # denoised at once): previews, video only, cover that last stretch of the run.
    previews=True,
)

REFERENCE_TALKING_HEAD = ModelSpec(
    id="reference-talking-head",
    task="audio2video",
    title="Reference talking head (built in)",
    summary=(
        "Animates a portrait from speech: the mouth follows the audio's loudness envelope, with head "
        "motion and blinks, generated in chunks with carried motion frames. A reference model, not FlashTalk."
    ),
    maturity="reference",
    params=ReferenceTalkingHeadParams,
    adapter="workers.adapters.reference.talking_head:ReferenceTalkingHeadAdapter",
    inputs=("image", "audio"),
    requires=("torch", "numpy", "cv2"),
    previews=True,
)


def reference_specs() -> list[ModelSpec]:
    """The built-in models, in catalog order."""
    return [REFERENCE_TALKING_HEAD, REFERENCE_T2V]
