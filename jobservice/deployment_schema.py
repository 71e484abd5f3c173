"""The schema of a deployment file: one pydantic model per back end, plus the card groups.

Workers read a model's entry back from ``ModelSpec.config`` with ``parse_entry`` (in
``jobservice.deployment``), so the file, the catalog and the adapters share one definition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from jobservice.placement import DeviceSpecError, parse_devices

BACKENDS = ("flashhead", "flashtalk", "omnirt", "vllm-omni", "diffusers")
# Well-known model ids and their back end, so an entry for them may omit ``backend:``.
KNOWN_MODELS = {
    "soulx-flashhead-1.3b": "flashhead",
    "soulx-flashtalk-14b": "flashtalk",
    "omnirt": "omnirt",
    "wan2.1-t2v-1.3b": "vllm-omni",
}


def with_known_backend(model_id: str, raw: Any) -> Any:
    """``raw`` with ``backend`` filled in for a well-known model id."""
    if isinstance(raw, dict) and "backend" not in raw and model_id in KNOWN_MODELS:
        return {"backend": KNOWN_MODELS[model_id], **raw}
    return raw


def _resolve(value: Any, info: ValidationInfo) -> Any:
    """A relative path, resolved against the deployment file's folder (when reading a file)."""
    if value is None or value == "":
        return None
    base = (info.context or {}).get("base_dir")
    path = Path(str(value)).expanduser()
    if base is not None and not path.is_absolute():
        path = Path(base) / path
    return path


def _resolve_command(value: Any, info: ValidationInfo) -> Any:
    """A command: a bare name is looked up on PATH when run; anything with a slash is a path."""
    if value is None or "/" not in str(value):
        return value
    return str(_resolve(value, info))


class _Entry(BaseModel):
    """What every model entry may say."""

    model_config = ConfigDict(extra="forbid")

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
    defaults: dict[str, Any] = Field(default_factory=dict, description="Parameter defaults.")
    validation: dict[str, Any] = Field(default_factory=dict, description="Output gate thresholds.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the model.")

    def required_paths(self) -> list[tuple[str, str]]:
        """(name, path) pairs that must exist where the model runs."""
        return []


class _ScriptEntry(_Entry):
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
        return _resolve(value, info)

    @field_validator("python", "torchrun", mode="before")
    @classmethod
    def _commands(cls, value: Any, info: ValidationInfo) -> Any:
        return _resolve_command(value, info)

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


class FlashHeadEntry(_ScriptEntry):
    """SoulX-FlashHead: ``generate_video.py`` once per job."""

    backend: Literal["flashhead"]
    script: str = Field(default="generate_video.py", description="Relative to repo.")


class FlashTalkEntry(_ScriptEntry):
    """SoulX-FlashTalk: a resident worker per card group (workers/adapters/flashtalk_resident.py)."""

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
        return _resolve(value, info)

    def required_paths(self) -> list[tuple[str, str]]:
        """As for FlashHead, plus a custom resident script."""
        found = super().required_paths()
        if self.resident_script is not None:
            found.append(("resident_script", str(self.resident_script)))
        return found


class OmniRTEntry(_Entry):
    """OmniRT: ``python -m omnirt generate --json`` per job, or a running ``omnirt serve``."""

    backend: Literal["omnirt"]
    mode: Literal["cli", "server"] = "cli"
    python: str = Field(default="python3", description="A Python with omnirt installed (cli mode).")
    endpoint: str | None = Field(default=None, description="http://host:port of omnirt serve (server mode).")
    api_key: str | None = None
    omnirt_backend: Literal["auto", "cuda", "ascend", "cpu-stub"] = "auto"
    models: list[str] = Field(default_factory=list, description="OmniRT model ids offered (empty: any).")
    fps: dict[str, float] = Field(default_factory=dict, description="Output fps per OmniRT model.")
    config: dict[str, Any] = Field(default_factory=dict, description="OmniRT config sent with every request.")
    path_map: dict[str, str] = Field(
        default_factory=dict, description="Local folder -> the same folder as the OmniRT server sees it."
    )
    scratch_dir: Path | None = Field(default=None, description="Shared folder for inputs/outputs (server).")

    @field_validator("python", mode="before")
    @classmethod
    def _command(cls, value: Any, info: ValidationInfo) -> Any:
        return _resolve_command(value, info)

    @field_validator("scratch_dir", mode="before")
    @classmethod
    def _scratch(cls, value: Any, info: ValidationInfo) -> Any:
        return _resolve(value, info)

    @model_validator(mode="after")
    def _server_needs_endpoint(self) -> OmniRTEntry:
        if self.mode == "server" and not self.endpoint:
            raise ValueError("endpoint is required when mode is server")
        return self

    def required_paths(self) -> list[tuple[str, str]]:
        """The Python of cli mode."""
        return [("python", self.python)] if self.mode == "cli" else []


class VllmOmniEntry(_Entry):
    """vLLM-Omni: a pool of ``vllm-omni serve`` instances, each running one job at a time."""

    backend: Literal["vllm-omni"]
    endpoints: list[str] = Field(min_length=1, description="Base URLs, e.g. http://10.0.0.5:8023.")
    served_model: str | None = Field(default=None, description="Sent as the model field (must match).")
    mode: Literal["async", "sync"] = Field(
        default="async",
        description="async: POST /v1/videos + poll + /content; sync: /v1/videos/sync (<600 s).",
    )
    poll_interval: float = Field(default=2.0, gt=0, le=60)
    api_key: str | None = None
    acquire_timeout: float | None = Field(default=None, gt=0, description="Wait for an idle instance.")

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"'{url}' is not an http(s) URL")
        return [url.rstrip("/") for url in value]


class DiffusersEntry(_Entry):
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
        return _resolve(value, info)

    def required_paths(self) -> list[tuple[str, str]]:
        """The folder's model_index.json."""
        return [("path", str(self.path / "model_index.json"))]


Entry = Annotated[
    FlashHeadEntry | FlashTalkEntry | OmniRTEntry | VllmOmniEntry | DiffusersEntry,
    Field(discriminator="backend"),
]


class WorkerGroupEntry(BaseModel):
    """One card group: ``jobservice worker --devices <devices>`` serving ``models``."""

    model_config = ConfigDict(extra="forbid")

    devices: str
    models: list[str] = Field(min_length=1)
    name: str | None = None
    config: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-model overrides for this group, e.g. its own endpoints."
    )

    @field_validator("devices")
    @classmethod
    def _devices(cls, value: str) -> str:
        try:
            return parse_devices(value).label  # canonical, e.g. "npu:4-7" -> "npu:4,5,6,7"
        except DeviceSpecError as exc:
            raise ValueError(str(exc)) from None

    @property
    def card_count(self) -> int:
        """Cards in the group (1 for the CPU)."""
        return parse_devices(self.devices).count

    @property
    def cards(self) -> list[tuple[str, int]]:
        """(kind, index) of each card."""
        device = parse_devices(self.devices)
        return [(device.kind, i) for i in device.indices]


class DeploymentFile(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid")

    reference_models: bool = Field(default=True, description="Keep the built-in reference models.")
    default_models: dict[Literal["audio2video", "text2video"], str] = Field(default_factory=dict)
    models: dict[str, Entry] = Field(default_factory=dict)
    workers: list[WorkerGroupEntry] = Field(default_factory=list)

    @field_validator("models", mode="before")
    @classmethod
    def _known_backends(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {mid: with_known_backend(mid, raw) for mid, raw in value.items()}
