"""What a FlashTalk checkout really does, against what a job asked for.

The settings of a FlashTalk process come from its checkout, not from us: upstream's
``flash_talk/inference.py`` reads ``flash_talk/configs/infer_params.yaml`` when imported and
ignores the FLASHTALK_* variables; only an OmniRT-patched (or NPU-adapted) checkout applies them
over the YAML. The resident reports the settings in force (``ready`` and ``started``); the
adapter encodes and gates with those, records both sides in the RunReport and, when they differ,
adds a warning that the job's view shows.
"""

from __future__ import annotations

import math
from typing import Any

from jobservice.families.flashtalk import FLASHTALK_RELOAD_KEYS
from workers.adapters.base import AdapterError, RunContext

CHECKOUT_NOTE = (
    "the checkout's flash_talk/inference.py decides: plain upstream reads "
    "flash_talk/configs/infer_params.yaml and ignores the FLASHTALK_* variables "
    "(only OmniRT-patched or NPU-adapted checkouts apply them)"
)


def requested(params: dict[str, Any]) -> dict[str, Any]:
    """The settings a job asked for (its preset plus overrides, already resolved)."""
    return {key: params[key] for key in FLASHTALK_RELOAD_KEYS}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-9)
    return bool(a == b)


def not_honoured(wanted: dict[str, Any], in_force: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The requested settings the resident does not run with: {key: {requested, in_force}}."""
    return {
        key: {"requested": value, "in_force": in_force.get(key)}
        for key, value in wanted.items()
        if key in in_force and not _same(value, in_force[key])
    }


def warning(preset: str, differences: dict[str, dict[str, Any]]) -> str:
    """One sentence for the job's view: which requested settings the checkout did not honour."""
    parts = ", ".join(
        f"{key} {diff['in_force']} (requested {diff['requested']})" for key, diff in differences.items()
    )
    return f"The requested preset {preset!r} was not honoured: the model ran with {parts}; {CHECKOUT_NOTE}."


def effective_key(params: dict[str, Any], fixed: dict[str, Any]) -> tuple[Any, ...]:
    """The resident key of a job: what it asked for, except the settings this checkout was seen to
    fix whatever is asked (so jobs that differ only in those share one loaded pipeline)."""
    return tuple(fixed.get(key, params[key]) for key in FLASHTALK_RELOAD_KEYS)


def check_chunk(answer: dict[str, Any], per_chunk: int, ctx: RunContext) -> None:
    """A chunk must bring exactly its new frames; record which of upstream's return shapes the
    checkout has (the resident kept the frames by the count ``run_pipeline`` returned)."""
    frames = int(answer.get("frames", -1))
    if frames != per_chunk:
        raise AdapterError(
            "model_error",
            f"chunk {answer.get('index')} brought {frames} new frames, not frame_num - motion_frames_num "
            f"= {per_chunk} (run_pipeline returned {answer.get('frames_returned', '?')})",
        )
    case = {"case": answer.get("frames_case"), "returned": answer.get("frames_returned"), "kept": frames}
    if int(answer.get("index", 0)) == 0:
        ctx.add_extra("chunk_frames", case)


__all__ = ["CHECKOUT_NOTE", "check_chunk", "effective_key", "not_honoured", "requested", "warning"]
