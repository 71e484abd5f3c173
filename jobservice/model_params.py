"""Parameter schemas of the real model families (API side, no torch).

Each schema is what ``POST /jobs`` accepts for one back end, with the defaults the users' seed
documents measured (reference/seed-systems.md, seeds/): FlashHead's 910B quality profile,
FlashTalk's real-time preset, the vLLM-Omni Wan2.1 command. A deployment file may change a
default (``defaults:``); ``with_defaults`` builds that variant so ``/models`` shows the truth.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from jobservice.catalog import _Params

SEED_FIELD = Field(default=None, ge=0, le=2**32 - 1, description="Random seed; chosen if absent.")


# --- SoulX-FlashHead-1.3B (generate_video.py, one process per job) -----------------------------
class FlashHeadParams(_Params):
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


# --- SoulX-FlashTalk-14B (resident worker, fed chunk by chunk) ---------------------------------
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


class FlashTalkParams(_Params):
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


# --- Wan2.1 text2video (vLLM-Omni server or a local diffusers folder) ---------------------------
class _WanParams(_Params):
    prompt: str = Field(min_length=1, max_length=4000, description="What the clip should show.")
    negative_prompt: str = Field(default="", max_length=4000)
    width: int = Field(default=832, ge=32, le=1280, multiple_of=16, description="Pixels; a multiple of 16.")
    height: int = Field(default=480, ge=32, le=1280, multiple_of=16, description="Pixels; a multiple of 16.")
    num_frames: int = Field(default=81, ge=5, le=241, description="4k+1 frames (Wan's VAE time stride is 4).")
    fps: int = Field(default=16, ge=4, le=60, description="Playback frame rate of the clip.")
    num_inference_steps: int = Field(default=50, ge=1, le=200)
    guidance_scale: float = Field(default=4.0, ge=0.0, le=20.0, description="As in the users' benchmark.")
    seed: int | None = SEED_FIELD

    @model_validator(mode="after")
    def _shape(self) -> _WanParams:
        if (self.num_frames - 1) % 4:
            raise ValueError("num_frames must be 4k+1, e.g. 33, 49 or 81")
        if self.width * self.height > 1280 * 720:
            raise ValueError("width x height must not exceed 1280 x 720 pixels")
        return self


class VllmWanParams(_WanParams):
    """Wan2.1 on a vLLM-Omni server: the form fields of POST /v1/videos."""

    flow_shift: float | None = Field(default=None, ge=0.0, le=20.0, description="Default: the server's.")


class DiffusersWanParams(_WanParams):
    """Wan2.1 from a local diffusers folder (WanPipeline)."""


# --- OmniRT (any registered model, CLI or server) -----------------------------------------------
# OmniRT config keys that only the deployment may set (reference/seed-systems.md 1.1): where code,
# weights and environment scripts come from, how the model is launched, on which cards, and where
# outputs go. A request setting one could run another program or take other cards.
OMNIRT_DEPLOYMENT_KEYS = frozenset(
    {
        "repo_path",
        "ckpt_dir",
        "wav2vec_dir",
        "python_executable",
        "python",
        "env",
        "env_script",
        "ascend_env_script",
        "launcher",
        "nproc_per_node",
        "num_processes",
        "master_port",
        "master_addr",
        "visible_devices",
        "accelerator",
        "backend",
        "device",
        "devices",
        "device_map",
        "cpu_offload",
        "resident_target",
        "resident_autostart",
        "remote_worker",
        "output_dir",
        "path",
    }
)
# ... and any key naming a path (t5_quant_dir, model_path, ...).
_PATH_KEY_SUFFIXES = ("_path", "_paths", "_dir", "_dirs", "_script", "_executable", "_file")


def omnirt_deployment_keys(config: dict[str, Any]) -> list[str]:
    """The keys of a request's OmniRT ``config`` (nested ones too) that only the deployment may set."""
    found: list[str] = []
    for key, value in config.items():
        name = str(key).strip().lower().replace("-", "_")
        if name in OMNIRT_DEPLOYMENT_KEYS or name.endswith(_PATH_KEY_SUFFIXES):
            found.append(str(key))
        if isinstance(value, dict):
            found += omnirt_deployment_keys(value)
    return found


class _OmniRTParams(_Params):
    # Not "model": that field of a request names the catalog model ("omnirt").
    omnirt_model: str = Field(min_length=1, max_length=200, description="The OmniRT model id, e.g. wav2lip.")
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
        description="Extra OmniRT config keys (a JSON object; in a form, as JSON text). The deployment's "
        "own config wins, and paths, launch and placement keys (repo_path, launcher, visible_devices...) "
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
        refused = omnirt_deployment_keys(value)
        if refused:
            names = ", ".join(f"'{key}'" for key in refused)
            keys = "key" if len(refused) == 1 else "keys"
            raise ValueError(
                f"config {keys} {names} may only be set in the deployment file (paths, launch, placement)"
            )
        return value


class OmniRTAudioParams(_OmniRTParams):
    """OmniRT audio2video models (OpenTalking family: wav2lip, quicktalk, musetalk; FlashHead)."""


class OmniRTTextParams(_OmniRTParams):
    """OmniRT text2video models."""

    prompt: str = Field(min_length=1, max_length=4000)


def with_defaults(
    base: type[_Params], defaults: dict[str, Any], *, model_id: str, allowed_models: list[str] | None = None
) -> type[_Params]:
    """``base`` with some defaults changed (and ``omnirt_model`` limited), each value checked.

    Raises ValueError naming the bad key. Returns ``base`` itself when nothing changes.
    """
    fields: dict[str, Any] = {}
    for key, value in defaults.items():
        info = base.model_fields.get(key)
        if info is None:
            raise ValueError(
                f"'{key}' is not a parameter of this model; known: {', '.join(base.model_fields)}"
            )
        try:
            TypeAdapter(info.rebuild_annotation()).validate_python(value)
        except ValidationError as exc:
            raise ValueError(f"default for '{key}': {_first(exc)}") from None
        # rebuild_annotation keeps the field's limits (ge, le, multiple_of) on the new default.
        fields[key] = (info.rebuild_annotation(), Field(default=value, description=info.description))
    if allowed_models:
        literal = Literal[tuple(allowed_models)]  # type: ignore[valid-type]
        default = defaults.get("omnirt_model", ...)
        fields["omnirt_model"] = (literal, Field(default=default, description="The OmniRT model id."))
    if not fields:
        return base
    name = base.__name__ + "".join(part.capitalize() for part in re.split(r"[^0-9A-Za-z]+", model_id))
    model: type[BaseModel] = create_model(name, __base__=base, **fields)
    # Defaults must also pass the model-wide rules (e.g. num_frames 4k+1): validate a request that
    # sets only the required text fields.
    sample = {n: _placeholder(f.annotation) for n, f in model.model_fields.items() if f.is_required()}
    try:
        model.model_validate(sample)
    except ValidationError as exc:
        raise ValueError(f"defaults: {_first(exc)}") from None
    return model  # type: ignore[return-value]


def _placeholder(annotation: Any) -> Any:
    """A valid value for a required text field (a Literal's first choice, else "x")."""
    choices = get_args(annotation) if get_origin(annotation) is Literal else ()
    return choices[0] if choices else "x"


def _first(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in err["loc"])
    return f"{loc}: {err['msg']}" if loc else err["msg"]
