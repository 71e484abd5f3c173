"""Wan2.1 text2video from a local diffusers folder (``WanPipeline.from_pretrained``, never a download),
kept resident on the worker's device; the worker side is ``workers/adapters/diffusers_wan.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from jobservice.catalog import ValidationPolicy
from jobservice.families.entry import EntryBase, resolve_path
from jobservice.families.family import Family, register
from jobservice.families.params import WanParams


class DiffusersEntry(EntryBase):
    """A local diffusers folder loaded with ``WanPipeline.from_pretrained``."""

    backend: Literal["diffusers"]
    path: Path = Field(description="The diffusers folder (model_index.json).")
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        default="auto", description="auto: bfloat16 on cards, float32 on the CPU."
    )
    max_sequence_length: int = Field(default=512, ge=8, le=1024)
    enable_vae_tiling: bool = False

    @field_validator("path", mode="before")
    @classmethod
    def _path(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_path(value, info)

    def required_paths(self) -> list[tuple[str, str]]:
        """The folder's model_index.json."""
        return [("path", str(self.path / "model_index.json"))]


class DiffusersWanParams(WanParams):
    """Wan2.1 from a local diffusers folder (WanPipeline)."""


FAMILY = register(
    Family(
        name="diffusers",
        entry=DiffusersEntry,
        params=lambda _entry, _task: DiffusersWanParams,
        adapter="workers.adapters.diffusers_wan:DiffusersWanAdapter",
        task="text2video",
        title="Wan2.1 T2V (diffusers)",
        summary=(
            "Wan2.1 text2video from a local diffusers folder (WanPipeline) on the worker's device. "
            "No previews: the pipeline hands over the clip only once every frame is denoised and decoded."
        ),
        execution_mode="resident",
        # WanPipeline denoises the whole clip and decodes it in one call: the adapter gets every
        # frame at once, at the end, so a "preview" could only race the final video (and delay it
        # by a remux); its running jobs say that no preview will exist.
        previews=False,
        devices=("cpu", "cuda", "npu"),
        requires=("torch", "numpy", "diffusers", "transformers", "accelerate"),
        min_memory_gb=None,
        policy=ValidationPolicy(),
    )
)
