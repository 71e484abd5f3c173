"""What the families' parameter models share: the seed field, Wan2.1's text2video fields, and
``with_defaults``, which applies a deployment's ``defaults:`` so ``/models`` shows the truth."""

from __future__ import annotations

import re
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, create_model, model_validator

from jobservice.catalog import ModelParams
from jobservice.families.family import config_problem

SEED_FIELD = Field(default=None, ge=0, le=2**32 - 1, description="Random seed; chosen if absent.")


class WanParams(ModelParams):
    """Wan2.1 text2video, shared by the vLLM-Omni and diffusers families."""

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
    def _shape(self) -> WanParams:
        if (self.num_frames - 1) % 4:
            raise ValueError("num_frames must be 4k+1, e.g. 33, 49 or 81")
        if self.width * self.height > 1280 * 720:
            raise ValueError("width x height must not exceed 1280 x 720 pixels")
        return self


def with_defaults(
    base: type[ModelParams],
    defaults: dict[str, Any],
    *,
    model_id: str,
    allowed_models: list[str] | None = None,
) -> type[ModelParams]:
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
            raise ValueError(
                f"default for '{key}': {config_problem(exc.errors(include_url=False)[0])}"
            ) from None
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
        raise ValueError(f"defaults: {config_problem(exc.errors(include_url=False)[0])}") from None
    return model  # type: ignore[return-value]


def _placeholder(annotation: Any) -> Any:
    """A valid value for a required text field (a Literal's first choice, else "x")."""
    choices = get_args(annotation) if get_origin(annotation) is Literal else ()
    return choices[0] if choices else "x"
