"""The parts of a deployment entry that every family shares, and how entry paths resolve.

Relative paths resolve against the deployment file's folder (passed as validation context).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from jobservice.catalog import MAX_GATE_RETRIES


def resolve_path(value: Any, info: ValidationInfo) -> Any:
    """A relative path, resolved against the deployment file's folder (when reading a file)."""
    if value is None or value == "":
        return None
    base = (info.context or {}).get("base_dir")
    path = Path(str(value)).expanduser()
    if base is not None and not path.is_absolute():
        path = Path(base) / path
    return path


def resolve_command(value: Any, info: ValidationInfo) -> Any:
    """A command: a bare name is looked up on PATH when run; anything with a slash is a path."""
    if value is None or "/" not in str(value):
        return value
    return str(resolve_path(value, info))


class EntryBase(BaseModel):
    """What every model entry may say."""

    model_config = ConfigDict(extra="forbid")

    backend: str  # each family narrows it to its own name (the discriminator of a file's entries)
    enabled: bool = True
    task: Literal["audio2video", "text2video"] | None = None
    title: str | None = None
    summary: str | None = None
    maturity: Literal["contract-tested", "hardware-verified"] = Field(
        default="contract-tested", description="Set hardware-verified only after running it on your cards."
    )
    cards: int = Field(default=1, ge=1, le=64, description="Cards a worker needs to serve the model.")
    devices: list[Literal["cpu", "cuda", "npu"]] | None = None
    min_memory_gb: float | None = Field(default=None, ge=0, description="Free device memory needed to load.")
    memory_scope: Literal["aggregate", "per_card"] = "aggregate"
    timeout: float | None = Field(default=None, gt=0, description="A job's limit in seconds.")
    retry_on_validation_failure: int = Field(
        default=0,
        ge=0,
        le=MAX_GATE_RETRIES,
        description="Run a job whose video fails the gate again with the next seed, up to this many "
        "times (a job may ask for its own count; regression batches never retry).",
    )
    load_seconds: float | None = Field(
        default=None, ge=0, description="A cold load's seconds, until the service has measured one."
    )
    seconds_per_output_second: float | None = Field(
        default=None, ge=0, description="Generation seconds per second of video, until measured."
    )
    defaults: dict[str, Any] = Field(default_factory=dict, description="Parameter defaults.")
    validation: dict[str, Any] = Field(default_factory=dict, description="Output gate thresholds.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the model.")

    def required_paths(self) -> list[tuple[str, str]]:
        """(name, path) pairs that must exist where the model runs."""
        return []


class ScriptEntry(EntryBase):
    """A checkout of a SoulX repository run with its own Python."""

    repo: Path = Field(description="The checkout (generate_video.py lives here).")
    ckpt_dir: Path
    wav2vec_dir: Path
    python: str = Field(default="python3", description="The checkout's Python (a path or a name on PATH).")
    launcher: Literal["auto", "python", "torchrun"] = Field(
        default="auto", description="auto: torchrun when the worker owns more than one card."
    )
    nproc_per_node: int | None = Field(default=None, ge=1, le=64, description="Default: the worker's cards.")
    torchrun: str | None = Field(default=None, description="Default: torchrun next to python, else on PATH.")
    ascend_env_script: Path | None = Field(default=None, description="Sourced before launching (CANN).")

    @field_validator("repo", "ckpt_dir", "wav2vec_dir", "ascend_env_script", mode="before")
    @classmethod
    def _paths(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_path(value, info)

    @field_validator("python", "torchrun", mode="before")
    @classmethod
    def _commands(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_command(value, info)

    def required_paths(self) -> list[tuple[str, str]]:
        """The checkout, weights, Python and env script."""
        found = [
            ("repo", str(self.repo)),
            ("ckpt_dir", str(self.ckpt_dir)),
            ("wav2vec_dir", str(self.wav2vec_dir)),
        ]
        found.append(("python", self.python))
        if self.ascend_env_script is not None:
            found.append(("ascend_env_script", str(self.ascend_env_script)))
        return found
