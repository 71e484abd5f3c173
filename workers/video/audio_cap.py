"""How much of a job's audio a worker decodes: what the API measured, and a second more.

The API judges an upload by the samples that really decode (``jobservice.media.probe.decoded_seconds``),
so a job's ``meta["audio"]["duration_s"]`` is a decoded length, not a header's claim. A worker's own
decode stops one second past it; an input that somehow decodes longer (replaced in the store, a job
queued without meta) cannot make the worker decode for hours.
"""

from __future__ import annotations

from typing import Any

FALLBACK_MAX_AUDIO_S = 3600.0  # a job queued without meta: an hour, far above any accepted upload
MARGIN_S = 1.0


def audio_cap_s(meta: dict[str, dict[str, Any]]) -> float:
    """Seconds of audio to decode at most for a job whose input ``meta`` is given."""
    measured = (meta.get("audio") or {}).get("duration_s")
    if isinstance(measured, int | float) and not isinstance(measured, bool) and measured > 0:
        return min(float(measured) + MARGIN_S, FALLBACK_MAX_AUDIO_S)
    return FALLBACK_MAX_AUDIO_S
