"""OmniRT: any model OmniRT runs with ``generate``, through ``python -m omnirt generate --config`` or a
running ``omnirt serve``; the request ``config`` allow-list lives here, once, for the API and the
adapter (``workers/adapters/omnirt/adapter/``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from jobservice.catalog import ModelParams, ValidationPolicy
from jobservice.families.entry import EntryBase, resolve_command, resolve_path
from jobservice.families.family import Family, register
from jobservice.families.params import SEED_FIELD


class OmniRTEntry(EntryBase):
    """OmniRT: ``python -m omnirt generate --json`` per job, or a running ``omnirt serve``."""

    backend: Literal["omnirt"]
    mode: Literal["cli", "server"] = "cli"
    python: str = Field(default="python3", description="A Python with omnirt installed (cli mode).")
    endpoint: str | None = Field(default=None, description="http://host:port of omnirt serve (server mode).")
    api_key: str | None = None
    omnirt_backend: Literal["auto", "cuda", "ascend", "cpu-stub"] = "auto"
    models: list[str] = Field(
        default_factory=list, description="OmniRT model ids offered (required: a request names one of them)."
    )
    request_config: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Per OmniRT model, the config keys a request may set (a part of the allow-list; "
        "a model not named here takes the whole allow-list).",
    )
    fps: dict[str, float] = Field(default_factory=dict, description="Output fps per OmniRT model.")
    config: dict[str, Any] = Field(default_factory=dict, description="OmniRT config sent with every request.")
    path_map: dict[str, str] = Field(
        default_factory=dict, description="Local folder -> the same folder as the OmniRT server sees it."
    )
    scratch_dir: Path | None = Field(default=None, description="Shared folder for inputs/outputs (server).")
    cancel_grace: float = Field(
        default=10.0,
        ge=0,
        description="Seconds to wait for a server job to end after DELETE (OmniRT stops only queued ones).",
    )

    @field_validator("config")
    @classmethod
    def _no_output_dir(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Each job's output folder is chosen by the adapter (and artifacts outside it refused).
        if "output_dir" in value:
            raise ValueError("output_dir is set per job by the service; remove it from config")
        return value

    @field_validator("python", mode="before")
    @classmethod
    def _command(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_command(value, info)

    @field_validator("scratch_dir", mode="before")
    @classmethod
    def _scratch(cls, value: Any, info: ValidationInfo) -> Any:
        return resolve_path(value, info)

    @model_validator(mode="after")
    def _server_needs_endpoint(self) -> OmniRTEntry:
        if self.mode == "server" and not self.endpoint:
            raise ValueError("endpoint is required when mode is server")
        if not self.models:  # without it a request could ask OmniRT for any model it can load
            raise ValueError("models is required: the OmniRT model ids this entry offers")
        for model, keys in self.request_config.items():
            if model not in self.models:
                raise ValueError(f"request_config names '{model}', which is not in models")
            extra = sorted(set(keys) - OMNIRT_REQUEST_CONFIG_KEYS)
            if extra:
                raise ValueError(f"request_config.{model}: '{extra[0]}' is not on the request allow-list")
        return self

    def request_keys(self, model: str) -> frozenset[str]:
        """The config keys a request for OmniRT model ``model`` may set."""
        keys = self.request_config.get(model)
        return OMNIRT_REQUEST_CONFIG_KEYS if keys is None else frozenset(keys)

    def required_paths(self) -> list[tuple[str, str]]:
        """The Python of cli mode."""
        return [("python", self.python)] if self.mode == "cli" else []


# --- OmniRT (any registered model, CLI or server) -----------------------------------------------
# The OmniRT config keys a *request* may set: sampling and quality knobs of OmniRT 0.1.0's models
# (``request_from_args`` in omnirt/cli/main.py and each model's ``supported_config``). Anything else
# (where code, weights and env scripts come from, how and where the model is launched, where its
# outputs go, which service it calls) is the deployment's alone: a request setting one could run
# another program, take other cards or write elsewhere. An allow-list, because OmniRT grows new
# path and launch keys with every model (``worker_script``, ``extra_env``, ``hf_endpoint``...).
OMNIRT_REQUEST_CONFIG_KEYS = frozenset(
    {
        # diffusion models
        "num_inference_steps",
        "guidance_scale",
        "scheduler",
        "seed",
        "strength",
        "width",
        "height",
        "size",
        "resolution",
        "fps",
        "num_frames",
        "dtype",
        "max_sequence_length",
        "frame_bucket",
        "motion_bucket_id",
        "decode_chunk_size",
        "noise_aug_strength",
        "true_cfg_scale",
        # script-backed talking heads (FlashHead, FlashTalk, LiveAct)
        "model_type",
        "audio_encode_mode",
        "sample_steps",
        "vae_2d_split",
        "latent_carry",
        "npu_fusion_attention",
        "max_chunks",
        "audio_cfg",
        "text_guidance_scale",
        "audio_guidance_scale",
    }
)


# Keys that are also job parameters (``OmniRTParams``), where their limits are checked: set in
# ``config`` they would slip past those limits (``num_frames: 10**9``), so a request's config may not.
OMNIRT_PARAMETER_KEYS = frozenset(
    {"seed", "width", "height", "num_frames", "fps", "num_inference_steps", "guidance_scale", "preset"}
)


def omnirt_refused_config_keys(
    config: dict[str, Any], allowed: frozenset[str] = OMNIRT_REQUEST_CONFIG_KEYS
) -> list[str]:
    """The keys of a request's OmniRT ``config`` that a request may not set: any key off ``allowed``
    (the allow-list, or the model's part of it), a job parameter's key, and any key whose value is
    not a plain value (a list or object, at any depth, could carry anything)."""
    refused: list[str] = []
    for key, value in config.items():
        plain = isinstance(value, str | int | float | bool)
        if str(key) not in allowed or str(key) in OMNIRT_PARAMETER_KEYS or not plain:
            refused.append(str(key))
    return refused


def omnirt_refusal(refused: list[str], allowed: frozenset[str] = OMNIRT_REQUEST_CONFIG_KEYS) -> str:
    """The sentence refusing ``refused`` config keys (the API's 422 and the adapter's error)."""
    names = ", ".join(f"'{key}'" for key in refused)
    keys = "key" if len(refused) == 1 else "keys"
    settable = sorted(allowed - OMNIRT_PARAMETER_KEYS)
    return (
        f"config {keys} {names} may not be set by a request (paths, launch and placement belong to the "
        f"deployment file; seed, sizes, frames, fps, steps and guidance are parameters of their own); "
        f"a request may set: {', '.join(settable) or 'nothing'}"
    )


class OmniRTParams(ModelParams):
    """What every OmniRT job may say."""

    # Not "model": that field of a request names the catalog model ("omnirt").
    omnirt_model: str = Field(
        min_length=1, max_length=200, description="The OmniRT model id, e.g. soulx-flashhead-1.3b."
    )
    preset: Literal["fast", "balanced", "quality", "low-vram"] | None = None
    prompt: str | None = Field(default=None, max_length=4000)
    negative_prompt: str | None = Field(default=None, max_length=4000)
    seed: int | None = SEED_FIELD
    width: int | None = Field(default=None, ge=32, le=4096)
    height: int | None = Field(default=None, ge=32, le=4096)
    num_frames: int | None = Field(default=None, ge=1, le=2000)
    fps: int | None = Field(default=None, ge=1, le=120, description="Expected output fps (and passed on).")
    num_inference_steps: int | None = Field(default=None, ge=1, le=200)
    guidance_scale: float | None = Field(default=None, ge=0.0, le=30.0)
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra OmniRT config keys (a JSON object; in a form, as JSON text): sampling and "
        "quality knobs only (sample_steps, model_type, num_inference_steps...); the deployment's own "
        "config wins, and paths, launch and placement keys (repo_path, launcher, visible_devices...) "
        "are refused.",
    )

    @field_validator("config", mode="before")
    @classmethod
    def _config_from_form(cls, value: Any) -> Any:
        # Multipart forms (audio2video) carry every field as text.
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                raise ValueError("config must be a JSON object") from None
        return value

    @field_validator("config")
    @classmethod
    def _no_deployment_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        refused = omnirt_refused_config_keys(value)
        if refused:
            raise ValueError(omnirt_refusal(refused))
        return value


class OmniRTAudioParams(OmniRTParams):
    """OmniRT audio2video models (soulx-flashhead-1.3b, soulx-flashtalk-14b...)."""


class OmniRTTextParams(OmniRTParams):
    """OmniRT text2video models."""

    prompt: str = Field(min_length=1, max_length=4000)


def _params(entry: Any, task: str) -> type[ModelParams]:
    base = OmniRTTextParams if task == "text2video" else OmniRTAudioParams
    if not isinstance(entry, OmniRTEntry) or not entry.request_config:
        return base
    checked_entry = entry

    class PerModel(base):  # type: ignore[valid-type,misc]
        """The request config checked against the chosen OmniRT model's part of the allow-list."""

        @model_validator(mode="after")
        def _model_keys(self) -> PerModel:
            allowed = checked_entry.request_keys(self.omnirt_model)
            refused = omnirt_refused_config_keys(self.config, allowed)
            if refused:
                raise ValueError(omnirt_refusal(refused, allowed))
            return self

    PerModel.__name__ = PerModel.__qualname__ = base.__name__ + "PerModel"
    return PerModel


def _mode(entry: Any, default: str) -> str:
    return "http" if entry.mode == "server" else default


# OmniRT's models mux on their own (FlashTalk's script truncates the last partial slice, up to
# 28 frames = 1.12 s); a deployment can tighten this per model.
FAMILY = register(
    Family(
        name="omnirt",
        entry=OmniRTEntry,
        params=_params,
        known_models=("omnirt",),
        mode_of=_mode,
        offered_models=lambda entry: entry.models,
        adapter="workers.adapters.omnirt.adapter:OmniRTAdapter",
        task="audio2video",
        title="OmniRT",
        summary="Any model OmniRT runs with `generate` (soulx-flashhead-1.3b, ...) through `python -m omnirt "
        "generate --config <request> --json` or a running `omnirt serve`.",
        execution_mode="subprocess",
        devices=("cpu", "cuda", "npu"),
        requires=(),
        min_memory_gb=None,
        policy=ValidationPolicy(frame_tolerance=2, duration_tolerance_seconds=1.2),
    )
)
