"""Settings of uploads: request and file limits, the spool (jobservice.media)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class MediaSettings(BaseModel):
    """Uploads.

    Read by `jobservice.media.uploads` (every uploaded file is streamed to the spool and decoded
    before it is accepted), the API's request limits and the web form's hints.
    """

    max_request_mb: int = Field(default=256, ge=1, description="Largest request body the API accepts.")
    max_image_mb: int = Field(default=20, ge=1, description="Largest image file accepted.")
    max_audio_mb: int = Field(default=100, ge=1, description="Largest audio file accepted.")
    max_image_pixels: int = Field(
        default=40_000_000, ge=64 * 64, description="Images with more pixels than this are refused."
    )
    min_image_side: int = Field(
        default=64, ge=16, description="Images with a side shorter than this (pixels) are refused."
    )
    min_audio_seconds: float = Field(default=0.5, gt=0, description="Shortest speech audio accepted.")
    max_audio_seconds: float = Field(
        default=300.0,
        gt=0,
        description="Longest speech audio accepted (as decoded, whatever its header says).",
    )
    spool_dir: Path | None = Field(
        default=None, description="Where uploads are streamed before they are checked; unset: var_dir/spool."
    )
