"""vLLM-Omni's own extras on ``POST /v1/videos``, read as vLLM-Omni reads them.

Checked against vLLM-Omni's request model, ``VideoGenerationRequest`` in
``vllm_omni/entrypoints/openai/protocol/videos.py`` (vllm-project/vllm-omni at 48e6026): its
``video_params`` block fills ``width``/``height``/``num_frames``/``fps`` where the top level has none
(``resolve_video_params``), and its sound and frame-interpolation switches default to off.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from jobservice.errors import Invalid

# vLLM-Omni's switches (vllm_omni/entrypoints/openai/protocol/videos.py), sent at their defaults by
# scripts that spell everything out: at these values they ask for nothing, so they are dropped.
UPSTREAM_DEFAULTS: dict[str, bool | float] = {
    "generate_sound": False,
    "enable_frame_interpolation": False,
    "frame_interpolation_exp": 1,
    "frame_interpolation_scale": 1.0,
}
VIDEO_PARAMS = ("width", "height", "num_frames", "fps")  # vLLM-Omni's optional video_params block


def vllm_omni_extras(params: dict[str, Any], model_params: Iterable[str]) -> None:
    """Fold ``video_params`` into ``params`` and drop vLLM-Omni's switches left at their defaults
    (unless the model has a parameter of that name); anything else stays for the model to judge."""
    _merge_video_params(params)
    names = set(model_params)
    for name, default in UPSTREAM_DEFAULTS.items():
        if name in params and name not in names and _is_default(params[name], default):
            del params[name]


def _merge_video_params(params: dict[str, Any]) -> None:
    """vLLM-Omni's ``video_params`` block (JSON text in a form): its values where the top level has
    none, as vLLM-Omni resolves them."""
    block = params.pop("video_params", None)
    if block in (None, ""):
        return
    if isinstance(block, str):
        try:
            block = json.loads(block)
        except ValueError:
            block = None
    if not isinstance(block, dict) or not set(block) <= set(VIDEO_PARAMS):
        raise Invalid(
            "invalid_parameters",
            f"'video_params' must be an object with some of {', '.join(VIDEO_PARAMS)}.",
            field="video_params",
        )
    for name, value in block.items():
        if params.get(name) in (None, ""):
            params[name] = value


def _is_default(value: Any, default: bool | float) -> bool:
    if isinstance(default, bool):
        return value is False or (isinstance(value, str) and value.strip().lower() in ("false", "0"))
    try:
        return not isinstance(value, bool) and float(value) == default
    except (TypeError, ValueError):
        return False
